"""What a corpus reader produces: kept documents, rejected records, and the error for fatal input.

Readers never drop anything silently: every record is either a `Document` (possibly repaired,
with the repairs named) or a `Rejection` that goes to the quarantine output with its reason.

A document is plain text or a conversation. A conversation carries its turns as (role, content)
pairs, roles `system`, `user` or `assistant`, and its `text` is the contents joined with a blank
line (`flatten_turns`): the text every text-level step (statistics, language identification,
quality rules, near-duplicates, decontamination, the tokenizer's sample) works on. A step that
changes the contents replaces both at once (`Document.with_turns`).
"""

from typing import NamedTuple, Optional, Sequence, Tuple

SYSTEM, USER, ASSISTANT = "system", "user", "assistant"
ROLES = (SYSTEM, USER, ASSISTANT)
PROMPT_ROLES = (SYSTEM, USER)  # the turns a reply answers (counted as `prompt_chars`)
TURN_SEPARATOR = "\n\n"  # between the contents of two turns in a conversation's `text`
Turn = Tuple[str, str]  # (role, content)
TEXT_KIND, CONVERSATIONS_KIND = "text", "conversations"  # what a document is (`Document.kind`)


def flatten_turns(turns: Sequence[Turn]) -> str:
    """A conversation's `text`: its contents joined with a blank line, without role names."""
    return TURN_SEPARATOR.join(content for _, content in turns)


class CorpusError(ValueError):
    """The corpus cannot be ingested as configured; the message names the file (and line)."""


class Document(NamedTuple):
    """One document and where it came from.

    `line` is the 1-based line (or, for TFRecord, record) where the document starts.
    `metadata` holds the configured extra fields as sorted (name, value) string pairs.
    `repairs` names every repair applied to it (e.g. 'invalid_utf8_replaced').
    `text` is None only for the legacy pass-through of a record without a text field.
    `language` / `language_confidence` are set by language identification ('' when it is off).
    `turns` holds a conversation's (role, content) pairs; empty for a plain-text document.
    """

    text: Optional[str]
    source: str
    line: int
    metadata: Tuple[Tuple[str, str], ...] = ()
    repairs: Tuple[str, ...] = ()
    language: str = ""
    language_confidence: float = 0.0
    turns: Tuple[Turn, ...] = ()

    @property
    def is_conversation(self) -> bool:
        return bool(self.turns)

    @property
    def kind(self) -> str:
        """TEXT_KIND or CONVERSATIONS_KIND."""
        return CONVERSATIONS_KIND if self.turns else TEXT_KIND

    def with_turns(self, turns: Sequence[Turn]) -> "Document":
        """This conversation with `turns` as its turns and their flattened contents as its text."""
        turns = tuple(turns)
        return self._replace(turns=turns, text=flatten_turns(turns))

    def contents_of(self, roles: Sequence[str]) -> Tuple[str, ...]:
        """The contents of the turns whose role is in `roles`, in order."""
        return tuple(content for role, content in self.turns if role in roles)

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
INVALID_CONVERSATION = "invalid_conversation"

# Repairs a reader applies itself (cleaning steps add their own).
INVALID_UTF8_REPLACED = "invalid_utf8_replaced"
