"""TFRecord files of serialized `tf.train.Example`s; the document is the configured bytes feature.

Uncompressed and GZIP files are read by TensorFlow's own reader (any tf.io.gfile filesystem).
TensorFlow cannot read BZIP2 TFRecords, so those are first streamed into a local temporary file.
A corrupt or truncated file ends with one quarantined entry at the record where reading failed;
every record before it is kept.
"""

import bz2
import contextlib
import os
import shutil
import tempfile
from typing import Any, Dict, Iterator

import tensorflow as tf
from google.protobuf.message import DecodeError

from components.example_gen.byte_stream import split_extension
from components.example_gen.formats.fields import record_to_outcome
from components.example_gen.formats.lines import Outcome
from components.example_gen.options import ReadOptions
from components.example_gen.records import (
    CORRUPT_TFRECORD,
    INVALID_UTF8,
    MALFORMED_RECORD,
    RECORD_TOO_LARGE,
    Document,
    Rejection,
)
from components.example_gen.utf8 import decode_utf8


@contextlib.contextmanager
def _readable_by_tensorflow(path: str) -> Iterator[tuple]:
    """(path, compression_type) TensorFlow's TFRecord reader can open."""
    _, compression = split_extension(path)
    if compression != "BZIP2":
        yield path, compression
        return
    with tempfile.TemporaryDirectory() as scratch:
        local = os.path.join(scratch, "records.tfrecord")
        with tf.io.gfile.GFile(path, "rb") as raw, bz2.BZ2File(raw) as stream, open(local, "wb") as out:
            shutil.copyfileobj(stream, out)
        yield local, ""


def _feature_value(feature: tf.train.Feature) -> Any:
    kind = feature.WhichOneof("kind")
    values = getattr(feature, kind).value if kind else []
    return values[0] if len(values) else None


def read_tfrecord(path: str, source: str, options: ReadOptions) -> Iterator[Outcome]:
    """One Document per tf.Example; `line` is the 1-based record number."""
    with _readable_by_tensorflow(path) as (readable, compression):
        records = iter(tf.data.TFRecordDataset(readable, compression_type=compression).as_numpy_iterator())
        number = 0
        while True:
            number += 1
            try:
                raw = next(records)
            except StopIteration:
                return
            except (tf.errors.DataLossError, tf.errors.OutOfRangeError, tf.errors.InvalidArgumentError) as exc:
                yield Rejection(
                    CORRUPT_TFRECORD,
                    source,
                    number,
                    b"",
                    0,
                    f"unreadable from record {number} on: {exc.message.splitlines()[0]}",
                )
                return
            yield _example_to_outcome(raw, source, number, options)


def _example_to_outcome(raw: bytes, source: str, number: int, options: ReadOptions) -> Outcome:
    sample = raw[: options.quarantine_sample_bytes]
    if len(raw) > options.max_record_bytes:
        return Rejection(
            RECORD_TOO_LARGE,
            source,
            number,
            sample,
            len(raw),
            f"record exceeds max_record_bytes={options.max_record_bytes}",
        )
    try:
        example = tf.train.Example.FromString(raw)
    except DecodeError:
        return Rejection(MALFORMED_RECORD, source, number, sample, len(raw), "not a serialized tf.train.Example")
    fields: Dict[str, Any] = {name: _feature_value(feature) for name, feature in example.features.feature.items()}
    repairs = ()
    for name, value in list(fields.items()):
        if isinstance(value, bytes):
            text, repairs_of_field = decode_utf8(value, options.invalid_utf8, f"{source}:{number}")
            if text is None:
                return Rejection(INVALID_UTF8, source, number, sample, len(raw), f"feature '{name}' is not valid UTF-8")
            fields[name] = text
            if name == options.jsonl_text_field:
                repairs = repairs_of_field
    outcome = record_to_outcome(fields, options.jsonl_text_field, source, number, raw, options)
    return outcome._replace(repairs=repairs) if repairs and isinstance(outcome, Document) else outcome
