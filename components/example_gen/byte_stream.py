"""Opening corpus files on any `tf.io.gfile` filesystem and reading them in bounded memory.

Compression is chosen by the last extension (`.gz`, `.bz2`) and decompressed as a stream, so a
file is never held in memory whole. The decompressing stream (`SalvagingDecompressor`) hands out
every byte decompressed before a truncation or corruption and only then raises, so the readers
keep each complete record that precedes the damage, whatever the file's size. `bounded_lines` cuts the stream into lines in fixed-size
chunks; a line longer than the limit is not accumulated: only a capped prefix and its size are
kept, so a 50 MB line costs at most about `max_line_bytes` of memory.
"""

import bz2
import contextlib
import itertools
import os
import zlib
from typing import BinaryIO, Iterator, NamedTuple, Tuple

import tensorflow as tf

COMPRESSIONS = {".gz": "GZIP", ".bz2": "BZIP2"}
CHUNK_BYTES = 1 << 20
SNIFF_BYTES = 8192
COMPRESSED_PIECE_BYTES = 16 * 1024  # compressed input per decompression step: bounds what a corrupt piece loses
# Exceptions a truncated or corrupt compressed stream raises while being read.
DECOMPRESSION_ERRORS = (EOFError, zlib.error, OSError)


def split_extension(path: str) -> Tuple[str, str]:
    """('.jsonl', 'GZIP') for 'a.jsonl.gz'; ('.txt', '') for 'a.txt'. Extensions are lower-cased."""
    stem, last = os.path.splitext(path.lower())
    compression = COMPRESSIONS.get(last, "")
    if compression:
        stem, last = os.path.splitext(stem)
    return last, compression


_DECOMPRESSORS = {
    "GZIP": lambda: zlib.decompressobj(wbits=16 + zlib.MAX_WBITS),
    "BZIP2": bz2.BZ2Decompressor,
}


class SalvagingDecompressor:
    """A read-only stream of the decompressed bytes of a gzip or bzip2 stream (several members
    or streams one after another included).

    `read` may return fewer bytes than asked. At a truncation (input ends inside a member) or a
    corruption, every byte decompressed before it is returned first; the next `read` raises
    EOFError (truncated) or the decompressor's error (corrupt), with the compressed offset.
    """

    def __init__(self, raw: BinaryIO, compression: str):
        self._raw, self._new = raw, _DECOMPRESSORS[compression]
        self._decompressor, self._started = self._new(), False
        self._pending, self._error, self._done, self._offset = b"", None, False, 0

    def _decompress(self, data: bytes) -> None:
        while data:
            self._started = True
            self._pending += self._decompressor.decompress(data)
            data = self._decompressor.unused_data if self._decompressor.eof else b""
            if self._decompressor.eof:
                self._decompressor, self._started = self._new(), False

    def _fill(self) -> None:
        data = self._raw.read(COMPRESSED_PIECE_BYTES)
        if not data:
            self._done = True
            if self._started:
                self._error = EOFError(f"compressed stream ends inside a member at byte {self._offset}")
            return
        try:
            self._decompress(data)
        except (zlib.error, OSError, EOFError) as exc:
            self._done, self._error = True, type(exc)(f"{exc} (near compressed byte {self._offset})")
        self._offset += len(data)

    def read(self, size: int = -1) -> bytes:
        while not self._pending and not self._done:
            self._fill()
        if not self._pending:
            if self._error is not None:
                error, self._error = self._error, None
                raise error
            return b""
        size = len(self._pending) if size is None or size < 0 else size
        out, self._pending = self._pending[:size], self._pending[size:]
        return out


@contextlib.contextmanager
def open_binary(path: str) -> Iterator[BinaryIO]:
    """The decompressed byte stream of `path` (local path or any URI tf.io.gfile supports)."""
    _, compression = split_extension(path)
    with tf.io.gfile.GFile(path, "rb") as raw:
        yield SalvagingDecompressor(raw, compression) if compression else raw


class Line(NamedTuple):
    """One line without its newline. For an oversized line, `data` is a capped prefix and
    `size` the full length in bytes."""

    number: int
    data: bytes
    size: int
    oversized: bool


class _LineInProgress:
    """A line that continues past the end of a chunk. Once it exceeds `max_line_bytes` only a
    capped prefix and the running size are kept."""

    __slots__ = ("data", "size", "oversized")

    def __init__(self):
        self.data, self.size, self.oversized = b"", 0, False

    def extend(self, piece: bytes, max_line_bytes: int, sample_bytes: int) -> None:
        self.size += len(piece)
        if self.oversized:
            return
        if self.size > max_line_bytes:
            self.data, self.oversized = (self.data + piece[:sample_bytes])[:sample_bytes], True
        else:
            self.data += piece

    def line(self, number: int) -> Line:
        data = self.data if self.oversized else self.data.rstrip(b"\r")
        return Line(number, data, self.size, self.oversized)


def bounded_lines(
    stream: BinaryIO, max_line_bytes: int, sample_bytes: int, chunk_bytes: int = CHUNK_BYTES
) -> Iterator[Line]:
    """Yields the lines of `stream`, each at most `max_line_bytes` long (longer ones flagged).

    Each chunk is split at newlines by `bytes.split` (in C); only the piece that runs over a
    chunk boundary is carried, in bounded form, to the next chunk.
    """
    number, carried = 1, _LineInProgress()
    while True:
        chunk = stream.read(chunk_bytes)
        if not chunk:
            break
        pieces = chunk.split(b"\n")
        first_complete = 0
        if len(pieces) > 1 and carried.size:
            carried.extend(pieces[0], max_line_bytes, sample_bytes)
            yield carried.line(number)
            number, carried, first_complete = number + 1, _LineInProgress(), 1
        for piece in itertools.islice(pieces, first_complete, len(pieces) - 1):
            if len(piece) > max_line_bytes:
                yield Line(number, piece[:sample_bytes], len(piece), True)
            else:
                yield Line(number, piece.rstrip(b"\r"), len(piece), False)
            number += 1
        carried.extend(pieces[-1], max_line_bytes, sample_bytes)
    if carried.size:
        yield carried.line(number)


def looks_binary(head: bytes) -> bool:
    """True for content that is not text: NUL bytes plus a high share of other control bytes.

    A text file with a stray NUL is not binary (its record is quarantined instead); UTF-8 of any
    script passes, since only C0 control bytes count against it.
    """
    if not head or b"\x00" not in head:
        return False
    controls = sum(1 for byte in head if byte < 0x20 and byte not in b"\t\n\r\f\x0b\x1b")
    return controls / len(head) > 0.1
