"""CSV and TSV with a header row; the document is the configured text column.

Quoted fields may span lines (the row's line number is where it starts). A row whose field
count differs from the header's is quarantined; a header without the text column is an error
for the whole file, since no row of it could be read as configured.
"""

import csv
from typing import Iterator, List

from components.example_gen.byte_stream import Line
from components.example_gen.formats.fields import record_to_outcome
from components.example_gen.formats.lines import Outcome, line_format_reader
from components.example_gen.options import ReadOptions
from components.example_gen.records import (
    INVALID_UTF8,
    MALFORMED_RECORD,
    NUL_BYTES,
    RECORD_TOO_LARGE,
    CorpusError,
    Document,
    Rejection,
)
from components.example_gen.utf8 import decode_utf8


class _DecodedLines:
    """Feeds decoded lines to `csv.reader`, setting aside (as rejections) lines it cannot take."""

    def __init__(self, lines: Iterator[Line], source: str, options: ReadOptions):
        self._lines, self._source, self._options = lines, source, options
        self.rejections: List[Rejection] = []
        self.repairs: set = set()
        self.last_line = 0

    def __iter__(self):
        return self

    def __next__(self) -> str:
        for line in self._lines:
            self.last_line = line.number
            sample = line.data[: self._options.quarantine_sample_bytes]
            if line.oversized:
                self.rejections.append(
                    Rejection(
                        RECORD_TOO_LARGE,
                        self._source,
                        line.number,
                        sample,
                        line.size,
                        f"line exceeds max_record_bytes={self._options.max_record_bytes}",
                    )
                )
                continue
            if b"\x00" in line.data:
                self.rejections.append(
                    Rejection(NUL_BYTES, self._source, line.number, sample, line.size, "NUL byte in the line")
                )
                continue
            text, repairs = decode_utf8(line.data, self._options.invalid_utf8, f"{self._source}:{line.number}")
            if text is None:
                self.rejections.append(
                    Rejection(INVALID_UTF8, self._source, line.number, sample, line.size, "invalid UTF-8 in the line")
                )
                continue
            self.repairs.update(repairs)
            return text + "\n"
        raise StopIteration


def parse_delimited_lines(
    lines: Iterator[Line], source: str, options: ReadOptions, delimiter: str
) -> Iterator[Outcome]:
    """One Document per row after the header."""
    csv.field_size_limit(max(options.max_record_bytes, csv.field_size_limit()))
    decoded = _DecodedLines(lines, source, options)
    rows = csv.reader(decoded, delimiter=delimiter)
    header = None
    row_start = 1
    while True:
        try:
            row = next(rows)
        except StopIteration:
            break
        except csv.Error as exc:
            yield from decoded.rejections
            decoded.rejections.clear()
            yield Rejection(
                MALFORMED_RECORD, source, row_start, b"", 0, f"malformed {delimiter!r}-separated row ({exc})"
            )
            row_start = decoded.last_line + 1
            continue
        yield from decoded.rejections
        decoded.rejections.clear()
        line, row_start = row_start, decoded.last_line + 1
        if header is None:
            header = row
            if options.csv_text_column not in header:
                raise CorpusError(
                    f"{source}:{line}: no column '{options.csv_text_column}' in the header "
                    f"(columns: {', '.join(header)})"
                )
            continue
        raw = delimiter.join(row).encode("utf-8", errors="replace")
        if not row:
            continue
        if len(row) != len(header):
            yield Rejection(
                MALFORMED_RECORD,
                source,
                line,
                raw[: options.quarantine_sample_bytes],
                len(raw),
                f"row has {len(row)} fields, the header has {len(header)}",
            )
            continue
        outcome = record_to_outcome(dict(zip(header, row)), options.csv_text_column, source, line, raw, options)
        if decoded.repairs and isinstance(outcome, Document):
            outcome = outcome._replace(repairs=tuple(sorted(decoded.repairs)))
        decoded.repairs = set()
        yield outcome
    yield from decoded.rejections


read_csv = line_format_reader(lambda lines, source, options: parse_delimited_lines(lines, source, options, ","))
read_tsv = line_format_reader(lambda lines, source, options: parse_delimited_lines(lines, source, options, "\t"))
