"""Typed options of the ExampleGen stage: how corpus files are read (`ExampleGenOptions`) and which
cleaning and curation steps run (`CleaningOptions`, with `QualityOptions` and
`DecontaminationOptions`). Composed into the pipeline config as `example_gen` and `cleaning`.

The executor receives each as its JSON text (`Options.to_parameter`) in ExampleGen's custom config
under `EXAMPLE_GEN_OPTIONS_KEY` / `CLEANING_OPTIONS_KEY` and parses it with the same class; Beam
workers get the parsed (picklable) objects.
"""

from typing import Any, List, Literal, Optional, get_args

from pydantic import Field, model_validator

from components.example_gen import profiles
from components.options import Options

BLANK_LINE = "blank_line"  # txt separator: one or more blank lines between documents
EACH_LINE = "line"  # txt separator: every non-blank line is a document

EXAMPLE_GEN_OPTIONS_KEY, CLEANING_OPTIONS_KEY, CORPUS_FINGERPRINT_KEY = "example_gen", "cleaning", "corpus_fingerprint"

# How a .jsonl record is read (`formats/conversations.py`): 'auto' detects it per record from its
# fields, 'text' is a plain document in the text field, the others are instruction-data formats.
ConversationFormat = Literal["auto", "text", "messages", "prompt_completion", "alpaca", "vertex", "nemo"]
AUTO_FORMAT, TEXT_FORMAT = "auto", "text"
CONVERSATION_FORMATS = get_args(ConversationFormat)


class ReadOptions(Options):
    """How corpus files are parsed and what happens to bad input (the part the readers use)."""

    jsonl_text_field: str = Field(
        "text", description="Field of a .jsonl record (or bytes feature of a TFRecord tf.Example) holding the document."
    )
    csv_text_column: str = Field("text", description="Header name of the .csv/.tsv column holding the document.")
    txt_document_separator: str = Field(
        BLANK_LINE,
        min_length=1,
        description="How .txt files split into documents: 'blank_line', 'line' (one per line) or a literal separator line.",
    )
    conversation_format: ConversationFormat = Field(
        "auto",
        description="How .jsonl records are read: 'auto' (per record, from its fields: messages, prompt+completion, "
        "instruction+output (Alpaca), contents (Vertex), input+output (NeMo), else the text field), 'text' "
        "(a plain document in jsonl_text_field, as before conversations were read), or one instruction "
        "format for every record: 'messages', 'prompt_completion', 'alpaca', 'vertex', 'nemo'. A record "
        "that is not a valid conversation is quarantined as invalid_conversation; a run reads one kind "
        "(plain text or conversations).",
    )
    metadata_fields: List[str] = Field(
        default_factory=list,
        description="Extra .jsonl/.csv/TFRecord fields carried into the examples (declare them in the curated schema).",
    )
    invalid_utf8: Literal["replace", "skip", "fail"] = Field(
        "replace",
        description="Invalid UTF-8: replace with U+FFFD (counted), skip the record (quarantined) or fail the run.",
    )
    max_record_bytes: int = Field(
        16 * 1024 * 1024, ge=1, description="Longer lines/documents are quarantined, never held in memory."
    )
    quarantine_sample_bytes: int = Field(4096, ge=0, description="Raw bytes kept per quarantined record.")


class ExampleGenOptions(ReadOptions):
    """Which corpus files (and spans) become tf.Examples, how they are read and split."""

    file_pattern: str = Field("*", description="Glob (relative to data_root) of the corpus files to read.")
    train_buckets: int = Field(9, ge=1, description="Hash buckets for the train split.")
    eval_buckets: int = Field(1, ge=1, description="Hash buckets for the eval split.")
    span: Optional[int] = Field(
        None,
        ge=0,
        description="Span to ingest when file_pattern has {SPAN} or {YYYY}{MM}{DD}; default (null) is the latest span.",
    )
    first_span: Optional[int] = Field(
        None,
        ge=0,
        description="With a span pattern: also ingest every earlier span from this one on (a span range ending at "
        "`span` or the latest); spans without files are skipped. Default (null): one span.",
    )

    @model_validator(mode="after")
    def _span_range_is_ordered(self) -> "ExampleGenOptions":
        if self.first_span is not None and self.span is not None and self.first_span > self.span:
            raise ValueError(
                f"example_gen.first_span ({self.first_span}) must not be after example_gen.span ({self.span})"
            )
        return self


class QualityOptions(Options):
    """Gopher / C4 / FineWeb-style document quality rules (`cleaning/quality.py`).

    Each field default is the published value named in its description (the `web` profile),
    except where the description says why it is more lenient here. `cleaning.profile` replaces the
    defaults of the options the user did not set (`profiles.py`: the default profile `curated`
    keeps only lorem ipsum, alpha words at 0.25, duplicate line characters at 0.6 and the top
    2-gram at 0.5). Words are `\\w+` runs, and every CJK character counts as a unit of its own
    for the repetition rules. Word-based rules apply only to the languages they were made for
    (`cleaning/quality.py`: `RULE_LANGUAGES`); a document in another language is exempt from
    them, and counted as exempt. A rule set to 0 (bounds: min 0, max 0) is off.
    """

    enabled: bool = Field(
        True,
        description="Quality rules on. `cleaning.profile` sets the defaults of every "
        "cleaning.quality key; the defaults listed are the default profile's, and "
        "each description names the web profile's value and its source.",
    )
    min_words: int = Field(
        5, ge=0, description="web: 5 (Gopher: 50; lower so short release notes and replies survive)."
    )
    max_words: int = Field(100_000, ge=0, description="web: Gopher 100,000.")
    min_mean_word_length: float = Field(3.0, ge=0.0, description="web: Gopher 3.")
    max_mean_word_length: float = Field(10.0, ge=0.0, description="web: Gopher 10.")
    max_symbol_word_ratio: float = Field(
        0.1, ge=0.0, description="web: Gopher 0.1 ('#' and '...' / '\u2026' per word)."
    )
    max_bullet_lines_fraction: float = Field(
        0.9, ge=0.0, le=1.0, description="web: Gopher 0.9 (lines starting with a bullet)."
    )
    max_ellipsis_lines_fraction: float = Field(
        0.3, ge=0.0, le=1.0, description="web: Gopher 0.3 (lines ending in '...' or '\u2026')."
    )
    min_alpha_words_fraction: float = Field(
        0.8, ge=0.0, le=1.0, description="web: Gopher 0.8 (words with at least one letter)."
    )
    min_stop_words: int = Field(
        2, ge=0, description="web: Gopher 2 of the, be, to, of, and, that, have, with (English only)."
    )
    min_punctuated_lines_fraction: float = Field(
        0.12, ge=0.0, le=1.0, description='web: FineWeb 0.12 (C4 ends each kept line in . ! ? ").'
    )
    max_short_lines_fraction: float = Field(
        0.67, ge=0.0, le=1.0, description="web: FineWeb 0.67 (lines of at most short_line_chars characters)."
    )
    short_line_chars: int = Field(30, ge=1, description="web: FineWeb 30.")
    max_duplicate_lines_fraction: float = Field(0.3, ge=0.0, le=1.0, description="web: Gopher 0.3.")
    max_duplicate_paragraphs_fraction: float = Field(0.3, ge=0.0, le=1.0, description="web: Gopher 0.3.")
    max_duplicate_line_chars_fraction: float = Field(0.2, ge=0.0, le=1.0, description="web: Gopher 0.2.")
    max_duplicate_paragraph_chars_fraction: float = Field(0.2, ge=0.0, le=1.0, description="web: Gopher 0.2.")
    max_top_2gram_chars_fraction: float = Field(0.2, ge=0.0, le=1.0, description="web: Gopher 0.20.")
    max_top_3gram_chars_fraction: float = Field(0.18, ge=0.0, le=1.0, description="web: Gopher 0.18.")
    max_top_4gram_chars_fraction: float = Field(0.16, ge=0.0, le=1.0, description="web: Gopher 0.16.")
    max_duplicate_5gram_chars_fraction: float = Field(
        0.15, ge=0.0, le=1.0, description="web: Gopher 0.15 (6- to 9-grams interpolate down to the 10-gram limit)."
    )
    max_duplicate_10gram_chars_fraction: float = Field(0.1, ge=0.0, le=1.0, description="web: Gopher 0.10.")
    reject_lorem_ipsum: bool = Field(True, description="web: C4 pages containing 'lorem ipsum' are dropped.")
    cjk_min_fraction: float = Field(
        0.3, ge=0.0, le=1.0, description="Share of letters in CJK scripts above which a text counts as CJK."
    )


class DecontaminationOptions(Options):
    """Removal of training documents that share a long n-gram with an evaluation suite.

    The pipeline always adds the Evaluator's red-team prompts and bias templates to `files`; add
    held-out evaluation files (.txt lines, .jsonl records, .json values) here. Units are lower-cased
    words, or characters for CJK text. A suite text shorter than `ngram` units but at least
    `min_units` long counts as one n-gram of its own length (GPT-3's rule for short prompts).
    """

    enabled: bool = Field(True, description="Remove training documents that share an n-gram with an evaluation suite.")
    ngram: int = Field(13, ge=1, description="GPT-3 / PaLM decontamination used 13-grams.")
    min_units: int = Field(8, ge=1, description="Shorter suite texts are not matched at all.")
    files: List[str] = Field(
        default_factory=list, description="Held-out evaluation files (bundled: references allowed)."
    )


class CleaningOptions(Options):
    """Cleaning steps ExampleGen applies, in this order, each counted in the run summary: normalise,
    strip controls, scrub PII, length filter, language identification and filter, quality rules,
    decontamination, toxicity filter, exact dedup, near-duplicate removal. On conversations the text
    steps run on every turn, the toxicity filter on the assistant turns, and the other filters on the
    whole conversation (`cleaning/curation_steps.py`)."""

    profile: Literal["web", "curated", "off"] = Field(
        profiles.DEFAULT_PROFILE,
        description="Quality rule defaults: 'curated' (only rules for garbage in any corpus: lorem ipsum, symbol soup, "
        "extreme repetition), 'web' (every Gopher/C4/FineWeb rule, for crawled text) or 'off' (none). "
        "A cleaning.quality option set explicitly wins over the profile.",
    )
    unicode_normalization: Literal["none", "NFC", "NFKC"] = Field(
        "NFC", description="Unicode normalisation of every document (counted as repaired)."
    )
    remove_control_chars: bool = Field(True, description="Drop control characters other than newline and tab.")
    scrub_pii: bool = Field(
        True,
        description="Replace e-mail addresses, national ID numbers (US SSN, UK NINO, Chinese resident ID), "
        "card and phone numbers with placeholders (counted per kind).",
    )
    min_chars: int = Field(1, ge=0, description="Shorter documents are removed (counted).")
    max_chars: int = Field(200_000, ge=1, description="Longer documents are removed (counted).")
    exact_dedup: bool = Field(
        True, description="Remove exact duplicates (content hash; the first by file and line is kept)."
    )
    near_dedup: bool = Field(True, description="MinHash/LSH near-duplicate removal on Beam.")
    near_dedup_threshold: float = Field(
        0.8, gt=0.0, le=1.0, description="Jaccard similarity of word shingles that counts as a near-duplicate."
    )
    shingle_words: int = Field(
        5, ge=1, description="Words per shingle (word n-gram) that near-duplicate detection compares."
    )
    minhash_permutations: int = Field(128, ge=1, description="MinHash signature length (hash functions per document).")
    lsh_bands: int = Field(
        32, ge=1, description="Must divide minhash_permutations; more bands find less similar candidates."
    )
    seed: int = Field(1, description="Seed of the MinHash hash functions (the same seed finds the same duplicates).")
    language_id: bool = Field(
        True,
        description="Identify each document's language (py3langid): `language` and `language_confidence` features.",
    )
    languages: List[str] = Field(
        default_factory=list,
        description="ISO 639-1 codes of the languages to keep; empty keeps all (the mix is reported).",
    )
    quality: QualityOptions = Field(
        default_factory=QualityOptions, description="Gopher/C4/FineWeb quality rules (defaults set by `profile`)."
    )
    decontamination: DecontaminationOptions = Field(
        default_factory=DecontaminationOptions,
        description="N-gram overlap removal against the evaluator's safety prompts and bias templates plus `files`.",
    )
    toxicity_threshold: float = Field(
        0.0,
        ge=0.0,
        le=1.0,
        description="Remove English documents the toxicity classifier scores at or above this (a conversation: when any "
        "of its assistant turns does); 0 is off.",
    )
    removed_samples_per_rule: int = Field(
        5, ge=0, description="Documents each curation rule removed that are kept in the quarantine for review."
    )

    @model_validator(mode="before")
    @classmethod
    def _profile_sets_rule_defaults(cls, data: Any) -> Any:
        """Fills the quality options the user did not set with the profile's values. Runs on the
        raw input, where 'not set' is still visible: keys absent from a mapping, or fields outside
        a `QualityOptions` instance's `model_fields_set`. Options that crossed to an executor as
        JSON carry every key, so the profile is applied once, where the config is built (assigning
        `profile` later leaves the resolved rule options as they are)."""
        if not isinstance(data, dict):
            return data
        profile, given = data.get("profile", profiles.DEFAULT_PROFILE), data.get("quality")
        if profile is False:  # YAML reads a bare `off` (`--set cleaning.profile=off`) as false
            profile, data = profiles.OFF, dict(data, profile=profiles.OFF)
        if profile not in profiles.PROFILES:
            return data  # field validation names the allowed profiles
        defaults = profiles.quality_defaults(profile)
        if isinstance(given, QualityOptions):  # also on assignment, where every field is already resolved
            return dict(
                data, quality=QualityOptions(**{**defaults, **given.model_dump(include=given.model_fields_set)})
            )
        if given is None or isinstance(given, dict):
            return dict(data, quality={**defaults, **(given or {})})
        return data  # field validation names the wrong type

    @model_validator(mode="after")
    def _consistent(self) -> "CleaningOptions":
        if self.minhash_permutations % self.lsh_bands:
            raise ValueError(
                f"cleaning.lsh_bands ({self.lsh_bands}) must divide cleaning.minhash_permutations ({self.minhash_permutations})"
            )
        if self.languages and not self.language_id:
            raise ValueError("cleaning.languages needs cleaning.language_id")
        return self
