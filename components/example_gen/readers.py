"""Streaming readers that turn one corpus file into documents.

Formats:
    .txt    one document per paragraph; paragraphs are separated by one or more blank lines
    .jsonl  one JSON object per line; the document is the configured text field

Readers stream line by line through `tf.io.gfile`, so local paths and object-store URIs both
work and memory stays bounded by the largest document. Malformed input raises `CorpusError`
naming the file and line.
"""
import json
import os
from typing import Iterator, NamedTuple, Optional

import tensorflow as tf

SUPPORTED_EXTENSIONS = (".txt", ".jsonl")


class CorpusError(ValueError):
    """A corpus file cannot be read as documents; the message names the file and line."""


class Document(NamedTuple):
    """One document and where it came from. `text` is None when a record lacks the text field."""

    text: Optional[str]
    source: str
    line: int


def _decoded_lines(path: str) -> Iterator[tuple]:
    """Yields (line_number, line_text) with strict UTF-8 decoding and a precise error."""
    with tf.io.gfile.GFile(path, "rb") as handle:
        for number, raw in enumerate(handle, start=1):
            try:
                yield number, raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise CorpusError(
                    f"{path}:{number}: invalid UTF-8 at byte {exc.start} of the line ({exc.reason})"
                ) from None


def read_txt_documents(path: str) -> Iterator[Document]:
    """Yields the blank-line separated paragraphs of a text file, inner newlines kept."""
    source = os.path.basename(path)
    paragraph, first_line = [], 0
    for number, line in _decoded_lines(path):
        if line.strip():
            if not paragraph:
                first_line = number
            paragraph.append(line.rstrip("\r\n"))
        elif paragraph:
            yield Document("\n".join(paragraph), source, first_line)
            paragraph = []
    if paragraph:
        yield Document("\n".join(paragraph), source, first_line)


def read_jsonl_documents(path: str, text_field: str) -> Iterator[Document]:
    """Yields the `text_field` of every JSON object line (None when the field is absent)."""
    source = os.path.basename(path)
    for number, line in _decoded_lines(path):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise CorpusError(f"{path}:{number}: malformed JSON ({exc.msg} at column {exc.colno})") from None
        if not isinstance(record, dict):
            raise CorpusError(f"{path}:{number}: expected a JSON object, got {type(record).__name__}")
        text = record.get(text_field)
        if text is not None and not isinstance(text, str):
            raise CorpusError(f"{path}:{number}: field '{text_field}' must be a string, got {type(text).__name__}")
        yield Document(text, source, number)


def read_documents(path: str, jsonl_text_field: str = "text") -> Iterator[Document]:
    """Dispatches on the file extension; unsupported extensions are an error, not skipped."""
    extension = os.path.splitext(path)[1].lower()
    if extension == ".txt":
        return read_txt_documents(path)
    if extension == ".jsonl":
        return read_jsonl_documents(path, jsonl_text_field)
    raise CorpusError(f"{path}: unsupported corpus file type '{extension}' (supported: {', '.join(SUPPORTED_EXTENSIONS)})")
