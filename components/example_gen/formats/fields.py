"""Turning a parsed record's fields (JSON object, CSV row, tf.Example) into a Document."""

import json
from typing import Any, Dict, Optional, Tuple

from components.example_gen.formats.lines import Outcome
from components.example_gen.options import ReadOptions
from components.example_gen.records import INVALID_UTF8, MALFORMED_RECORD, MISSING_TEXT_FIELD, Document, Rejection
from components.example_gen.utf8 import ensure_encodable


def _as_string(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, sort_keys=True)


def metadata_of(record: Dict[str, Any], fields: Tuple[str, ...]) -> Tuple[Tuple[str, str], ...]:
    """The configured metadata fields present in `record`, as sorted (name, string value) pairs."""
    return tuple(sorted((name, _as_string(record[name])) for name in fields if record.get(name) is not None))


METADATA_NOT_UNICODE = "a metadata field is not valid Unicode"


def encodable_metadata(record: Dict[str, Any], fields: Tuple[str, ...]) -> Optional[Tuple[Tuple[str, str], ...]]:
    """`metadata_of(record, fields)`, or None when a value cannot be written as UTF-8."""
    metadata = metadata_of(record, fields)
    if any(ensure_encodable(value, "skip", "")[0] is None for _, value in metadata):
        return None
    return metadata


def record_to_outcome(
    record: Dict[str, Any], text_field: str, source: str, line: int, raw: bytes, options: ReadOptions
) -> Outcome:
    """A Document from `record[text_field]`, or a Rejection naming what is wrong with the record."""
    sample = raw[: options.quarantine_sample_bytes]
    text = record.get(text_field)
    if text is None:
        return Rejection(MISSING_TEXT_FIELD, source, line, sample, len(raw), f"no field '{text_field}'")
    if not isinstance(text, str):
        return Rejection(
            MALFORMED_RECORD,
            source,
            line,
            sample,
            len(raw),
            f"field '{text_field}' must be a string, got {type(text).__name__}",
        )
    text, repairs = ensure_encodable(text, options.invalid_utf8, f"{source}:{line}")
    if text is None:
        return Rejection(INVALID_UTF8, source, line, sample, len(raw), f"field '{text_field}' is not valid Unicode")
    metadata = encodable_metadata(record, options.metadata_fields)
    if metadata is None:
        return Rejection(INVALID_UTF8, source, line, sample, len(raw), METADATA_NOT_UNICODE)
    return Document(text, source, line, metadata, repairs)
