"""Shared front end of the line-based formats (.txt, .jsonl, .csv/.tsv): open, sniff, split lines."""

from typing import BinaryIO, Callable, Iterator, Union

from components.example_gen import byte_stream
from components.example_gen.options import ReadOptions
from components.example_gen.records import BINARY_FILE, Document, Rejection

Outcome = Union[Document, Rejection]
LineParser = Callable[[Iterator[byte_stream.Line], str, ReadOptions], Iterator[Outcome]]


class _PrefixedStream:
    """A stream whose first bytes were already read (for sniffing) and are served again first."""

    def __init__(self, head: bytes, rest: BinaryIO):
        self._head, self._rest = head, rest

    def read(self, size: int) -> bytes:
        if self._head:
            out, self._head = self._head[:size], self._head[size:]
            return out
        return self._rest.read(size)


def line_format_reader(parse_lines: LineParser) -> Callable[[str, str, ReadOptions], Iterator[Outcome]]:
    """Wraps a parser of lines into a file reader that quarantines binary files whole."""

    def read(path: str, source: str, options: ReadOptions) -> Iterator[Outcome]:
        with byte_stream.open_binary(path) as stream:
            head = stream.read(byte_stream.SNIFF_BYTES)
            if byte_stream.looks_binary(head):
                yield Rejection(
                    BINARY_FILE,
                    source,
                    0,
                    head[: options.quarantine_sample_bytes],
                    len(head),
                    "NUL and control bytes in the first 8 KiB: not a text file",
                )
                return
            lines = byte_stream.bounded_lines(
                _PrefixedStream(head, stream), options.max_record_bytes, options.quarantine_sample_bytes
            )
            yield from parse_lines(lines, source, options)

    read.__doc__ = parse_lines.__doc__
    return read
