"""What a corpus reader produces: kept documents, rejected records, and the error for fatal input.

Readers never drop anything silently: every record is either a `Document` (possibly repaired,
with the repairs named) or a `Rejection` that goes to the quarantine output with its reason.
"""
from typing import NamedTuple, Optional, Tuple


class CorpusError(ValueError):
    """The corpus cannot be ingested as configured; the message names the file (and line)."""


class Document(NamedTuple):
    """One document and where it came from.

    `line` is the 1-based line (or, for TFRecord, record) where the document starts.
    `metadata` holds the configured extra fields as sorted (name, value) string pairs.
    `repairs` names every repair applied to it (e.g. 'invalid_utf8_replaced').
    `text` is None only for the legacy pass-through of a record without a text field.
    `language` / `language_confidence` are set by language identification ('' when it is off).
    """

    text: Optional[str]
    source: str
    line: int
    metadata: Tuple[Tuple[str, str], ...] = ()
    repairs: Tuple[str, ...] = ()
    language: str = ""
    language_confidence: float = 0.0

    @property
    def location(self) -> str:
        return f"{self.source}:{self.line}"

    def sort_key(self) -> Tuple[str, int]:
        """Deterministic order used to pick which of several duplicates is kept (the first)."""
        return (self.source, self.line)


class Rejection(NamedTuple):
    """A record (or whole file) that was not ingested, with the reason and a capped raw sample."""

    reason: str
    source: str
    line: int
    raw: bytes = b""
    raw_size: int = 0
    detail: str = ""

    @property
    def location(self) -> str:
        return f"{self.source}:{self.line}"


# Reasons a record is quarantined (the keys of the run summary's `quarantined` counts).
INVALID_UTF8 = "invalid_utf8"
NUL_BYTES = "nul_bytes"
BINARY_FILE = "binary_file"
EMPTY_FILE = "empty_file"
RECORD_TOO_LARGE = "record_too_large"
TRUNCATED_COMPRESSED_FILE = "truncated_compressed_file"
CORRUPT_TFRECORD = "corrupt_tfrecord"
MALFORMED_RECORD = "malformed_record"
MISSING_TEXT_FIELD = "missing_text_field"

# Repairs a reader applies itself (cleaning steps add their own).
INVALID_UTF8_REPLACED = "invalid_utf8_replaced"
