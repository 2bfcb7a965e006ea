"""JSON Lines: one JSON object per line; the document is the configured text field, or the
record is a conversation in one of the instruction-data formats (`conversations`)."""

import json
from typing import Iterator

from components.example_gen.byte_stream import Line
from components.example_gen.formats.conversations import record_outcome
from components.example_gen.formats.lines import Outcome, line_format_reader
from components.example_gen.options import ReadOptions
from components.example_gen.records import (
    INVALID_UTF8,
    MALFORMED_RECORD,
    NUL_BYTES,
    RECORD_TOO_LARGE,
    Document,
    Rejection,
)
from components.example_gen.utf8 import decode_utf8


def parse_jsonl_lines(lines: Iterator[Line], source: str, options: ReadOptions) -> Iterator[Outcome]:
    """One Document (text or conversation) per JSON object line; malformed lines are quarantined, blank lines skipped."""
    for line in lines:
        sample = line.data[: options.quarantine_sample_bytes]
        if line.oversized:
            yield Rejection(
                RECORD_TOO_LARGE,
                source,
                line.number,
                sample,
                line.size,
                f"line exceeds max_record_bytes={options.max_record_bytes}",
            )
            continue
        if not line.data.strip():
            continue
        if b"\x00" in line.data:
            yield Rejection(NUL_BYTES, source, line.number, sample, line.size, "NUL byte in the line")
            continue
        text, line_repairs = decode_utf8(line.data, options.invalid_utf8, f"{source}:{line.number}")
        if text is None:
            yield Rejection(INVALID_UTF8, source, line.number, sample, line.size, "invalid UTF-8 in the line")
            continue
        try:
            record = json.loads(text)
        except (json.JSONDecodeError, RecursionError) as exc:
            detail = (
                f"malformed JSON ({exc.msg} at column {exc.colno})"
                if isinstance(exc, json.JSONDecodeError)
                else "JSON nested too deeply"
            )
            yield Rejection(MALFORMED_RECORD, source, line.number, sample, line.size, detail)
            continue
        if not isinstance(record, dict):
            yield Rejection(
                MALFORMED_RECORD,
                source,
                line.number,
                sample,
                line.size,
                f"expected a JSON object, got {type(record).__name__}",
            )
            continue
        outcome = record_outcome(record, source, line.number, line.data, options)
        if line_repairs and isinstance(outcome, Document):
            outcome = outcome._replace(repairs=tuple(sorted(set(outcome.repairs) | set(line_repairs))))
        yield outcome


read_jsonl = line_format_reader(parse_jsonl_lines)
