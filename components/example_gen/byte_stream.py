"""Opening corpus files on any `tf.io.gfile` filesystem and reading them in bounded memory.

Compression is chosen by the last extension (`.gz`, `.bz2`) and decompressed as a stream, so a
file is never held in memory whole. `bounded_lines` cuts the stream into lines in fixed-size
chunks; a line longer than the limit is not accumulated: only a capped prefix and its size are
kept, so a 50 MB line costs at most about `max_line_bytes` of memory.
"""
import bz2
import contextlib
import gzip
import os
import zlib
from typing import BinaryIO, Iterator, NamedTuple, Tuple

import tensorflow as tf

COMPRESSIONS = {".gz": "GZIP", ".bz2": "BZIP2"}
CHUNK_BYTES = 1 << 20
SNIFF_BYTES = 8192
# Exceptions a truncated or corrupt compressed stream raises while being read.
DECOMPRESSION_ERRORS = (EOFError, zlib.error, OSError)


def split_extension(path: str) -> Tuple[str, str]:
    """('.jsonl', 'GZIP') for 'a.jsonl.gz'; ('.txt', '') for 'a.txt'. Extensions are lower-cased."""
    stem, last = os.path.splitext(path.lower())
    compression = COMPRESSIONS.get(last, "")
    if compression:
        stem, last = os.path.splitext(stem)
    return last, compression


@contextlib.contextmanager
def open_binary(path: str) -> Iterator[BinaryIO]:
    """The decompressed byte stream of `path` (local path or any URI tf.io.gfile supports)."""
    _, compression = split_extension(path)
    with tf.io.gfile.GFile(path, "rb") as raw:
        if compression == "GZIP":
            with gzip.GzipFile(fileobj=raw, mode="rb") as stream:
                yield stream
        elif compression == "BZIP2":
            with bz2.BZ2File(raw, mode="rb") as stream:
                yield stream
        else:
            yield raw


class Line(NamedTuple):
    """One line without its newline. For an oversized line, `data` is a capped prefix and
    `size` the full length in bytes."""

    number: int
    data: bytes
    size: int
    oversized: bool


def bounded_lines(stream: BinaryIO, max_line_bytes: int, sample_bytes: int, chunk_bytes: int = CHUNK_BYTES) -> Iterator[Line]:
    """Yields the lines of `stream`, each at most `max_line_bytes` long (longer ones flagged)."""
    number, pending, overflow_size, overflow_prefix = 1, b"", 0, b""
    while True:
        chunk = stream.read(chunk_bytes)
        if not chunk:
            break
        start = 0
        while True:
            end = chunk.find(b"\n", start)
            piece = chunk[start:] if end < 0 else chunk[start:end]
            if overflow_size:
                overflow_size += len(piece)
            elif len(pending) + len(piece) > max_line_bytes:
                overflow_prefix = (pending + piece[:sample_bytes])[:sample_bytes]
                overflow_size, pending = len(pending) + len(piece), b""
            else:
                pending += piece
            if end < 0:
                break
            if overflow_size:
                yield Line(number, overflow_prefix, overflow_size, True)
                overflow_size, overflow_prefix = 0, b""
            else:
                yield Line(number, pending.rstrip(b"\r"), len(pending), False)
                pending = b""
            number += 1
            start = end + 1
    if overflow_size:
        yield Line(number, overflow_prefix, overflow_size, True)
    elif pending:
        yield Line(number, pending.rstrip(b"\r"), len(pending), False)


def looks_binary(head: bytes) -> bool:
    """True for content that is not text: NUL bytes plus a high share of other control bytes.

    A text file with a stray NUL is not binary (its record is quarantined instead); UTF-8 of any
    script passes, since only C0 control bytes count against it.
    """
    if not head or b"\x00" not in head:
        return False
    controls = sum(1 for byte in head if byte < 0x20 and byte not in b"\t\n\r\f\x0b\x1b")
    return controls / len(head) > 0.1
