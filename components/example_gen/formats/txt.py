"""Plain text: documents separated by blank lines (default), one per line, or by a literal line.

A document's lines are kept as bytes while it accumulates and decoded together when it ends:
the common case (no NUL byte, valid UTF-8) costs one check and one decode per document. Only a
document that fails that fast check is examined line by line, which names the first bad line
exactly as a per-line reader would.
"""

from typing import Iterator, List, Optional

from components.example_gen.byte_stream import Line
from components.example_gen.formats.lines import Outcome, line_format_reader
from components.example_gen.options import BLANK_LINE, EACH_LINE, ReadOptions
from components.example_gen.records import INVALID_UTF8, NUL_BYTES, RECORD_TOO_LARGE, Document, Rejection
from components.example_gen.utf8 import decode_utf8


class _Paragraph:
    """The document being accumulated (its raw lines), or the reason it will be quarantined."""

    def __init__(self, first_line: int):
        self.first_line = first_line
        self.lines: List[Line] = []
        self.size = 0
        self.reject_reason: Optional[str] = None
        self.reject_detail = ""
        self.reject_sample = b""

    def add(self, line: Line, source: str, options: ReadOptions) -> None:
        """Appends `line`; past `max_record_bytes` the document is rejected and stops storing lines."""
        self.size += line.size
        if self.reject_reason:
            return
        if line.oversized or self.size > options.max_record_bytes:
            self._check_lines(source, options)  # a bad line before this one is the first problem
            self._reject(
                RECORD_TOO_LARGE,
                line,
                f"document exceeds max_record_bytes={options.max_record_bytes} "
                f"(line {line.number} alone is {line.size} bytes)",
            )
            return
        self.lines.append(line)

    def _reject(self, reason: str, line: Line, detail: str) -> None:
        if self.reject_reason is None:
            self.reject_reason, self.reject_detail, self.reject_sample = reason, detail, line.data
        self.lines = []

    def _check_lines(self, source: str, options: ReadOptions):
        """Line-by-line decoding: (text parts, repairs), or None after rejecting the first bad line.
        Raises CorpusError under the 'fail' policy."""
        parts, repairs = [], set()
        for line in self.lines:
            if b"\x00" in line.data:
                self._reject(NUL_BYTES, line, f"NUL byte at line {line.number}")
                return None
            text, line_repairs = decode_utf8(line.data, options.invalid_utf8, f"{source}:{line.number}")
            if text is None:
                self._reject(INVALID_UTF8, line, f"invalid UTF-8 at line {line.number}")
                return None
            parts.append(text)
            repairs.update(line_repairs)
        return parts, repairs

    def _decode(self, source: str, options: ReadOptions) -> Optional[Document]:
        raw = b"\n".join(line.data for line in self.lines)
        if b"\x00" not in raw:
            try:
                return Document(raw.decode("utf-8"), source, self.first_line)
            except UnicodeDecodeError:
                pass
        checked = self._check_lines(source, options)
        if checked is None:
            return None
        parts, repairs = checked
        return Document("\n".join(parts), source, self.first_line, (), tuple(sorted(repairs)))

    def outcome(self, source: str, options: ReadOptions) -> Outcome:
        document = None if self.reject_reason else self._decode(source, options)
        if document is not None:
            return document
        sample = self.reject_sample[: options.quarantine_sample_bytes]
        return Rejection(self.reject_reason, source, self.first_line, sample, self.size, self.reject_detail)


def _boundary_test(separator: str):
    """The predicate telling whether a line ends the current document (and is not part of one)."""
    if separator == BLANK_LINE:
        return lambda line: not line.oversized and not line.data.strip()
    literal = separator.encode("utf-8")
    return lambda line: not line.oversized and line.data.strip() == literal


def parse_txt_lines(lines: Iterator[Line], source: str, options: ReadOptions) -> Iterator[Outcome]:
    """Documents of a text file: separated by blank lines, one per line, or by a literal line."""
    each_line = options.txt_document_separator == EACH_LINE
    is_boundary = None if each_line else _boundary_test(options.txt_document_separator)
    paragraph: Optional[_Paragraph] = None
    for line in lines:
        if each_line:
            if paragraph:
                yield paragraph.outcome(source, options)
                paragraph = None
            if not line.oversized and not line.data.strip():
                continue
        elif is_boundary(line):
            if paragraph:
                yield paragraph.outcome(source, options)
                paragraph = None
            continue
        paragraph = paragraph or _Paragraph(line.number)
        paragraph.add(line, source, options)
    if paragraph:
        yield paragraph.outcome(source, options)


read_txt = line_format_reader(parse_txt_lines)
