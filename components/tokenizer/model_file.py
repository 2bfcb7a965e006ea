"""A SentencePiece model file: reading it, checking its id layout, hashing it, finding it.

The same bytes travel through the pipeline unchanged, so one sha256 names a tokenizer everywhere:

    <Tokenizer artifact>/sentencepiece.model                 what the Tokenizer stage wrote
    <transform graph>/transform_fn/assets/sentencepiece.model  what Transform tokenized with
    <exported SavedModel>/assets/sentencepiece.model           what the served model tokenizes with
"""

import hashlib
import os
from typing import NamedTuple

import sentencepiece as spm
import tensorflow as tf

from components.tokenizer import ids

MODEL_FILE_NAME = "sentencepiece.model"
_TRANSFORM_ASSETS = os.path.join("transform_fn", "assets")
# SentencePiece's ModelProto: field 2 is the TrainerSpec, whose field 3 is the model type. Read
# from the wire format because sentencepiece's generated module needs a newer protobuf than TFX's.
_TRAINER_SPEC_FIELD, _MODEL_TYPE_FIELD = 2, 3
_MODEL_TYPES = {1: "unigram", 2: "bpe", 3: "word", 4: "char"}


class TokenizerModel(NamedTuple):
    """A model's bytes and what the pipeline records about it."""

    proto: bytes
    sha256: str
    vocab_size: int
    algorithm: str


def read_model(path: str) -> TokenizerModel:
    """Loads and checks the model at `path` (any tf.io.gfile path); errors name the file."""
    if not tf.io.gfile.exists(path):
        raise FileNotFoundError(f"SentencePiece model file {path} does not exist")
    with tf.io.gfile.GFile(path, "rb") as handle:
        proto = handle.read()
    return describe(proto, path)


def describe(proto: bytes, source: str) -> TokenizerModel:
    """Checks `proto` (see `check_layout`) and returns it with its hash, size and algorithm."""
    try:
        processor = spm.SentencePieceProcessor(model_proto=proto)
    except RuntimeError as exc:
        raise ValueError(f"{source} is not a SentencePiece model: {exc}") from None
    check_layout(processor, source)
    return TokenizerModel(proto, hashlib.sha256(proto).hexdigest(), processor.get_piece_size(), model_type(proto))


def check_layout(processor: spm.SentencePieceProcessor, source: str) -> None:
    """Refuses a model whose special or byte ids differ from `ids` (the trainer and decoder rely on them)."""
    expected = {"pad": ids.PAD_ID, "eos": ids.EOS_ID, "unk": ids.UNK_ID}
    actual = {"pad": processor.pad_id(), "eos": processor.eos_id(), "unk": processor.unk_id()}
    if actual != expected:
        raise ValueError(f"{source}: special token ids {actual}, expected {expected} (see components/tokenizer/ids.py)")
    size = processor.get_piece_size()
    bytes_in_place = size > ids.FIRST_LEARNED_ID and all(
        processor.is_byte(ids.byte_id(value)) for value in range(ids.NUM_BYTES)
    )
    if not bytes_in_place:
        raise ValueError(
            f"{source}: no byte-fallback pieces at ids {ids.FIRST_BYTE_ID}..{ids.FIRST_LEARNED_ID - 1} "
            "(learn it with byte_fallback=true): some text would not round-trip"
        )


def _read_varint(data: bytes, position: int):
    value, shift = 0, 0
    while True:
        byte = data[position]
        position += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, position


def _fields(data: bytes):
    """(field number, wire type, value) of a protobuf message; value is an int or bytes."""
    position = 0
    while position < len(data):
        key, position = _read_varint(data, position)
        number, wire_type = key >> 3, key & 7
        if wire_type == 0:
            value, position = _read_varint(data, position)
        elif wire_type == 1:
            value, position = data[position : position + 8], position + 8
        elif wire_type == 2:
            length, position = _read_varint(data, position)
            value, position = data[position : position + length], position + length
        elif wire_type == 5:
            value, position = data[position : position + 4], position + 4
        else:
            raise ValueError(f"unsupported protobuf wire type {wire_type}")
        yield number, wire_type, value


def model_type(proto: bytes) -> str:
    """The SentencePiece algorithm the model was trained with ('unigram' when unset, its default)."""
    for number, _, value in _fields(proto):
        if number == _TRAINER_SPEC_FIELD:
            for inner, wire_type, inner_value in _fields(value):
                if inner == _MODEL_TYPE_FIELD and wire_type == 0:
                    return _MODEL_TYPES.get(inner_value, f"type {inner_value}")
    return "unigram"


def artifact_model_path(tokenizer_uri: str) -> str:
    """The model file inside a Tokenizer artifact."""
    return os.path.join(tokenizer_uri, MODEL_FILE_NAME)


def transform_graph_model_path(transform_graph_dir: str) -> str:
    """The model file inside a transform graph (written by the tokenizing Transform)."""
    return os.path.join(transform_graph_dir, _TRANSFORM_ASSETS, MODEL_FILE_NAME)


def saved_model_model_path(saved_model_dir: str) -> str:
    """The model file among an exported SavedModel's assets."""
    return os.path.join(saved_model_dir, "assets", MODEL_FILE_NAME)


def copy_model(proto: bytes, path: str) -> None:
    """Writes `proto` to `path`, creating its directory."""
    tf.io.gfile.makedirs(os.path.dirname(path))
    with tf.io.gfile.GFile(path, "wb") as handle:
        handle.write(proto)
