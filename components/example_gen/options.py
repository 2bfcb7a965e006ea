"""Options of the corpus readers and the cleaning steps, as the executor receives them.

The pipeline config (`pipeline/config.py`, sections `example_gen` and `cleaning`) is the user-facing
surface and owns the documented defaults; these dataclasses are what crosses into the Beam
workers (plain, picklable values). `from_dict` rejects unknown keys so a config typo cannot be
silently ignored on a worker.
"""
import dataclasses
from typing import Any, Dict, Optional, Tuple, Type, TypeVar

_T = TypeVar("_T")

UTF8_POLICIES = ("replace", "skip", "fail")
NORMALIZATION_FORMS = ("none", "NFC", "NFKC")
BLANK_LINE = "blank_line"  # txt separator: one or more blank lines between documents
EACH_LINE = "line"  # txt separator: every non-blank line is a document


def _from_dict(cls: Type[_T], values: Optional[Dict[str, Any]]) -> _T:
    values = dict(values or {})
    fields = {field.name: field for field in dataclasses.fields(cls)}
    unknown = sorted(set(values) - set(fields))
    if unknown:
        raise ValueError(f"unknown {cls.__name__} keys: {', '.join(unknown)}")
    for key, value in values.items():
        nested = fields[key].type
        if isinstance(value, dict) and dataclasses.is_dataclass(nested):
            values[key] = _from_dict(nested, value)
        elif isinstance(value, list):
            values[key] = tuple(value)
    return cls(**values)


def _check_fraction(owner: str, name: str, value: float) -> None:
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"{owner}.{name} must be in [0, 1], got {value}")


@dataclasses.dataclass(frozen=True)
class ReadOptions:
    """How corpus files are parsed and what happens to bad input."""

    txt_document_separator: str = BLANK_LINE  # BLANK_LINE, EACH_LINE, or a literal separator line
    text_field: str = "text"  # .jsonl key / TFRecord feature holding the document
    csv_text_column: str = "text"  # header name of the document column in .csv/.tsv
    metadata_fields: Tuple[str, ...] = ()  # extra .jsonl/.csv/TFRecord fields carried into examples
    invalid_utf8: str = "replace"  # one of UTF8_POLICIES
    max_record_bytes: int = 16 * 1024 * 1024  # longer lines/records are quarantined, never held in memory
    quarantine_sample_bytes: int = 4096  # raw bytes kept per quarantined record

    def __post_init__(self):
        if self.invalid_utf8 not in UTF8_POLICIES:
            raise ValueError(f"invalid_utf8 must be one of {UTF8_POLICIES}, got {self.invalid_utf8!r}")
        if self.max_record_bytes < 1 or self.quarantine_sample_bytes < 0:
            raise ValueError("max_record_bytes must be >= 1 and quarantine_sample_bytes >= 0")

    @classmethod
    def from_dict(cls, values: Optional[Dict[str, Any]]) -> "ReadOptions":
        return _from_dict(cls, values)


@dataclasses.dataclass(frozen=True)
class QualityOptions:
    """Gopher / C4 / FineWeb-style document quality rules (`cleaning/quality.py`).

    Each default is the published value named beside it, except where the comment says why it is
    more lenient here (the bundled corpus is short support replies, not web pages). Words are
    `\\w+` runs; for CJK text (see `cjk_min_fraction`) every CJK character counts as a word, so
    word-count and n-gram rules still apply and the word-length rule is skipped. A rule set to 0
    (bounds: min 0, max 0) is off.
    """

    enabled: bool = True
    min_words: int = 5  # Gopher: 50; lower so short release notes and replies survive
    max_words: int = 100_000  # Gopher: 100,000
    min_mean_word_length: float = 3.0  # Gopher: 3
    max_mean_word_length: float = 10.0  # Gopher: 10
    max_symbol_word_ratio: float = 0.1  # Gopher: 0.1 ('#' and '...' / '\u2026' per word)
    max_bullet_lines_fraction: float = 0.9  # Gopher: 0.9 (lines starting with a bullet)
    max_ellipsis_lines_fraction: float = 0.3  # Gopher: 0.3 (lines ending in '...' or '\u2026')
    min_alpha_words_fraction: float = 0.8  # Gopher: 0.8 (words with at least one letter)
    min_stop_words: int = 2  # Gopher: 2 of the, be, to, of, and, that, have, with (English only)
    min_punctuated_lines_fraction: float = 0.12  # FineWeb: 0.12 (C4 ends each kept line in . ! ? ")
    max_short_lines_fraction: float = 0.67  # FineWeb: 0.67 (lines of at most 30 characters)
    short_line_chars: int = 30  # FineWeb: 30
    max_duplicate_lines_fraction: float = 0.3  # Gopher: 0.3
    max_duplicate_paragraphs_fraction: float = 0.3  # Gopher: 0.3
    max_duplicate_line_chars_fraction: float = 0.2  # Gopher: 0.2
    max_duplicate_paragraph_chars_fraction: float = 0.2  # Gopher: 0.2
    max_top_2gram_chars_fraction: float = 0.2  # Gopher: 0.20
    max_top_3gram_chars_fraction: float = 0.18  # Gopher: 0.18
    max_top_4gram_chars_fraction: float = 0.16  # Gopher: 0.16
    max_duplicate_5gram_chars_fraction: float = 0.15  # Gopher: 0.15 (6..10-grams: 0.14 .. 0.10)
    max_duplicate_10gram_chars_fraction: float = 0.1  # Gopher: 0.10
    reject_lorem_ipsum: bool = True  # C4: pages containing 'lorem ipsum' are dropped
    cjk_min_fraction: float = 0.3  # share of letters in CJK scripts above which a text counts as CJK

    def __post_init__(self):
        for field in dataclasses.fields(self):
            if field.name.endswith(("_fraction", "_ratio")) and field.name != "max_symbol_word_ratio":
                _check_fraction("cleaning.quality", field.name, getattr(self, field.name))
        if self.min_words < 0 or self.max_words < 0 or self.short_line_chars < 1:
            raise ValueError("cleaning.quality word bounds must be >= 0 and short_line_chars >= 1")

    @classmethod
    def from_dict(cls, values: Optional[Dict[str, Any]]) -> "QualityOptions":
        return _from_dict(cls, values)


@dataclasses.dataclass(frozen=True)
class DecontaminationOptions:
    """Removal of training documents that share a long n-gram with an evaluation suite.

    The pipeline always adds the Evaluator's red-team prompts and bias templates to `files`; add
    held-out evaluation files (.txt lines, .jsonl records, .json values) here. Units are lower-cased
    words, or characters for CJK text. A suite text shorter than `ngram` units but at least
    `min_units` long counts as one n-gram of its own length (GPT-3's rule for short prompts).
    """

    enabled: bool = True
    ngram: int = 13  # GPT-3 / PaLM decontamination used 13-grams
    min_units: int = 8
    files: Tuple[str, ...] = ()

    def __post_init__(self):
        if self.ngram < 1 or not 1 <= self.min_units:
            raise ValueError("cleaning.decontamination.ngram and min_units must be >= 1")


@dataclasses.dataclass(frozen=True)
class CleaningOptions:
    """Which cleaning steps run, in this order: normalise, strip controls, scrub PII, length
    filter, language identification and filter, quality rules, decontamination, toxicity filter,
    exact dedup, near-duplicate removal."""

    unicode_normalization: str = "NFC"  # one of NORMALIZATION_FORMS
    remove_control_chars: bool = True
    scrub_pii: bool = True
    min_chars: int = 1
    max_chars: int = 200_000
    exact_dedup: bool = True
    near_dedup: bool = True
    near_dedup_threshold: float = 0.8  # Jaccard similarity of word shingles at or above which docs are near-duplicates
    shingle_words: int = 5
    minhash_permutations: int = 128
    lsh_bands: int = 32
    seed: int = 1
    language_id: bool = True  # py3langid: `language` + `language_confidence` features
    languages: Tuple[str, ...] = ()  # ISO 639-1 codes to keep; empty keeps every language
    quality: QualityOptions = QualityOptions()
    decontamination: DecontaminationOptions = DecontaminationOptions()
    toxicity_threshold: float = 0.0  # English documents scoring >= this are removed; 0 is off
    removed_samples_per_rule: int = 5  # removed documents per rule kept in the quarantine for review

    def __post_init__(self):
        _check_fraction("cleaning", "toxicity_threshold", self.toxicity_threshold)
        if self.languages and not self.language_id:
            raise ValueError("cleaning.languages needs cleaning.language_id")
        if self.unicode_normalization not in NORMALIZATION_FORMS:
            raise ValueError(f"unicode_normalization must be one of {NORMALIZATION_FORMS}")
        if self.minhash_permutations % self.lsh_bands:
            raise ValueError("minhash_permutations must be a multiple of lsh_bands")
        if not 0.0 < self.near_dedup_threshold <= 1.0:
            raise ValueError("near_dedup_threshold must be in (0, 1]")

    @classmethod
    def from_dict(cls, values: Optional[Dict[str, Any]]) -> "CleaningOptions":
        return _from_dict(cls, values)
