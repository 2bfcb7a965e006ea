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
    known = {field.name for field in dataclasses.fields(cls)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise ValueError(f"unknown {cls.__name__} keys: {', '.join(unknown)}")
    for key, value in values.items():
        if isinstance(value, list):
            values[key] = tuple(value)
    return cls(**values)


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
class CleaningOptions:
    """Which cleaning steps run, in this order: normalise, strip controls, scrub PII, length
    filter, exact dedup, near-duplicate removal."""

    unicode_normalization: str = "NFC"  # one of NORMALIZATION_FORMS
    remove_control_chars: bool = True
    scrub_pii: bool = False
    min_chars: int = 1
    max_chars: int = 200_000
    exact_dedup: bool = True
    near_dedup: bool = True
    near_dedup_threshold: float = 0.8  # Jaccard similarity of word shingles at or above which docs are near-duplicates
    shingle_words: int = 5
    minhash_permutations: int = 128
    lsh_bands: int = 32
    seed: int = 1

    def __post_init__(self):
        if self.unicode_normalization not in NORMALIZATION_FORMS:
            raise ValueError(f"unicode_normalization must be one of {NORMALIZATION_FORMS}")
        if self.minhash_permutations % self.lsh_bands:
            raise ValueError("minhash_permutations must be a multiple of lsh_bands")
        if not 0.0 < self.near_dedup_threshold <= 1.0:
            raise ValueError("near_dedup_threshold must be in (0, 1]")

    @classmethod
    def from_dict(cls, values: Optional[Dict[str, Any]]) -> "CleaningOptions":
        return _from_dict(cls, values)
