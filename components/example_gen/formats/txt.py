"""Plain text: documents separated by blank lines (default), one per line, or by a literal line."""
from typing import Iterator, List, Optional

from components.example_gen.byte_stream import Line
from components.example_gen.decoding import decode_utf8
from components.example_gen.formats.lines import Outcome, line_format_reader
from components.example_gen.options import BLANK_LINE, EACH_LINE, ReadOptions
from components.example_gen.records import INVALID_UTF8, NUL_BYTES, RECORD_TOO_LARGE, Document, Rejection


class _Paragraph:
    """The document being accumulated, or the reason it will be quarantined instead."""

    def __init__(self, first_line: int):
        self.first_line = first_line
        self.parts: List[str] = []
        self.size = 0
        self.repairs: set = set()
        self.reject_reason: Optional[str] = None
        self.reject_detail = ""
        self.reject_sample = b""

    def reject(self, reason: str, line: Line, detail: str) -> None:
        if self.reject_reason is None:
            self.reject_reason, self.reject_detail, self.reject_sample = reason, detail, line.data
        self.parts = []

    def outcome(self, source: str, options: ReadOptions) -> Outcome:
        if self.reject_reason:
            sample = self.reject_sample[: options.quarantine_sample_bytes]
            return Rejection(self.reject_reason, source, self.first_line, sample, self.size, self.reject_detail)
        return Document("\n".join(self.parts), source, self.first_line, (), tuple(sorted(self.repairs)))


def _is_separator(line: Line, separator: str) -> bool:
    if line.oversized:
        return False
    if separator == BLANK_LINE:
        return not line.data.strip()
    return line.data.strip() == separator.encode("utf-8")


def parse_txt_lines(lines: Iterator[Line], source: str, options: ReadOptions) -> Iterator[Outcome]:
    """Documents of a text file: separated by blank lines, one per line, or by a literal line."""
    separator = options.txt_document_separator
    paragraph: Optional[_Paragraph] = None
    for line in lines:
        blank = not line.oversized and not line.data.strip()
        boundary = True if separator == EACH_LINE else _is_separator(line, separator)
        if boundary and paragraph:
            yield paragraph.outcome(source, options)
            paragraph = None
        if (separator == EACH_LINE and blank) or (separator != EACH_LINE and boundary):
            continue
        paragraph = paragraph or _Paragraph(line.number)
        paragraph.size += line.size
        if paragraph.reject_reason:
            continue
        if line.oversized or paragraph.size > options.max_record_bytes:
            paragraph.reject(RECORD_TOO_LARGE, line, f"document exceeds max_record_bytes={options.max_record_bytes} "
                                                     f"(line {line.number} alone is {line.size} bytes)")
            continue
        if b"\x00" in line.data:
            paragraph.reject(NUL_BYTES, line, f"NUL byte at line {line.number}")
            continue
        text, repairs = decode_utf8(line.data, options.invalid_utf8, f"{source}:{line.number}")
        if text is None:
            paragraph.reject(INVALID_UTF8, line, f"invalid UTF-8 at line {line.number}")
            continue
        paragraph.parts.append(text)
        paragraph.repairs.update(repairs)
    if paragraph:
        yield paragraph.outcome(source, options)


read_txt = line_format_reader(parse_txt_lines)
