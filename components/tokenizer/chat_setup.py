"""The chat template a run's tokenizer carries, made by the Tokenizer stage for conversation data.

- A learned SentencePiece model gets the default template (`chat_template.DEFAULT_TEMPLATE`) and
  its two special tokens, appended to the vocabulary as control pieces: SentencePiece never
  produces a control piece from text, so a content that spells `<|im_end|>` stays text, and the
  ids of every existing piece are unchanged (a reused production model gets the same ids again).
- A checkpoint's tokenizer uses the checkpoint's own template (`read_checkpoint_template`); its
  special tokens are the tokenizer's added tokens, the template variables its named tokens
  (`template_variables`: bos_token, eos_token, ... as transformers fills them), and decoding
  stops at the template's end-of-turn token and at the ids of `generation_config.json`'s
  `eos_token_id` (a list for Llama 3) and the tokenizer's eos.

The result is a `ChatSpec`; its files (`ChatSpec.files`) travel with the tokenizer's own.
"""

import json
import os
import struct
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from components.tokenizer import chat_template
from components.tokenizer.chat_template import ChatSpec, ChatTemplateError

_CONTROL_PIECE_TYPE = 3  # sentencepiece_model.proto: ModelProto.SentencePiece.Type.CONTROL


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _control_piece(text: str) -> bytes:
    """One serialized `ModelProto.pieces` entry (field 1): piece, score 0, type CONTROL."""
    piece = text.encode("utf-8")
    message = (
        b"\x0a"
        + _varint(len(piece))
        + piece
        + b"\x15"
        + struct.pack("<f", 0.0)
        + b"\x18"
        + _varint(_CONTROL_PIECE_TYPE)
    )
    return b"\x0a" + _varint(len(message)) + message


def with_control_pieces(proto: bytes, tokens: Sequence[str]) -> bytes:
    """The SentencePiece model `proto` with `tokens` appended as control pieces (after every
    existing piece; a token it already has is left where it is). Appending a repeated field's
    entries at the end of a serialized message appends them to that field, so nothing else moves."""
    import sentencepiece as spm

    processor = spm.SentencePieceProcessor(model_proto=proto)
    known = {processor.id_to_piece(index) for index in range(processor.get_piece_size())}
    return proto + b"".join(_control_piece(token) for token in tokens if token not in known)


def piece_ids(proto: bytes, tokens: Iterable[str]) -> Dict[str, int]:
    """{token: id} of pieces of the SentencePiece model `proto`."""
    import sentencepiece as spm

    processor = spm.SentencePieceProcessor(model_proto=proto)
    ids = {}
    for token in tokens:
        index = processor.piece_to_id(token)
        if processor.id_to_piece(index) != token:
            raise ChatTemplateError(f"the tokenizer has no piece {token!r}")
        ids[token] = index
    return ids


def learned_chat(proto: bytes, eos_id: int) -> Tuple[bytes, ChatSpec]:
    """(the learned model with the default template's special tokens, its ChatSpec)."""
    extended = with_control_pieces(proto, chat_template.DEFAULT_SPECIAL_TOKENS)
    spec = chat_template.chat_spec(
        chat_template.DEFAULT_TEMPLATE,
        piece_ids(extended, chat_template.DEFAULT_SPECIAL_TOKENS),
        {},
        [eos_id],
        "the default chat template",
    )
    return extended, spec


def generation_eos_ids(directory: str) -> List[int]:
    """`eos_token_id` of the checkpoint's generation_config.json (an id or a list), or []."""
    import tensorflow as tf

    path = os.path.join(directory, "generation_config.json")
    if not tf.io.gfile.exists(path):
        return []
    with tf.io.gfile.GFile(path) as handle:
        try:
            value = json.load(handle).get("eos_token_id")
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path} is not valid JSON: {exc}") from None
    values = value if isinstance(value, list) else [] if value is None else [value]
    if not all(isinstance(item, int) for item in values):
        raise ValueError(f"{path}: eos_token_id is {value!r}, not an id or a list of ids")
    return list(values)


def checkpoint_chat(
    directory: str, special_ids: Dict[str, int], variables: Dict[str, str], tokenizer_eos_id: int
) -> Optional[ChatSpec]:
    """The ChatSpec of the checkpoint's template (module docstring), or None when it has none.
    `special_ids`: the tokenizer's added tokens (token -> id); `variables`: bos_token etc."""
    source = chat_template.read_checkpoint_template(directory)
    if source is None:
        return None
    return chat_template.chat_spec(
        source.text, special_ids, variables, generation_eos_ids(directory) + [tokenizer_eos_id], source.origin
    )


def template_variables(tokenizer, directory: str) -> Dict[str, str]:
    """The special tokens a template sees by name, as transformers passes them: the tokens the
    tokenizer files name (`hf_files.token_names`: tokenizer_config.json's bos_token, ... whatever
    config.json's ids say), and where the files name no bos, eos or unk token, the token of that
    id (the defaults of transformers' Llama and GPT-2 tokenizer classes). A pad token the files do
    not name is undefined, as in transformers, whose tokenizers have no default pad token."""
    from components.tokenizer import hf_files

    vocabulary = hf_files.token_ids(tokenizer.kind, tokenizer.files, directory)
    by_id = {index: token for token, index in vocabulary.vocab.items()}
    special = tokenizer.special
    names = {
        "bos": by_id.get(special.bos_id),
        "eos": by_id.get(special.eos_id),
        "unk": by_id.get(special.unk_id) if special.unk_id is not None else None,
    }
    names.update(hf_files.token_names(tokenizer.files, directory))
    return chat_template.default_variables(names)


def checkpoint_chat_of(tokenizer, directory: str) -> Optional[ChatSpec]:
    """`checkpoint_chat` for a loaded checkpoint tokenizer (`loaded.LoadedTokenizer`): its special
    tokens, and its named tokens as the template variables (`template_variables`). A named token
    that is not in the vocabulary stays text where the template writes it (transformers would
    give it a new id, one the checkpoint's embedding has no row for)."""
    from components.tokenizer import hf_files

    vocabulary = hf_files.token_ids(tokenizer.kind, tokenizer.files, directory)
    variables = template_variables(tokenizer, directory)
    special_ids = dict(vocabulary.special_ids)
    for token in variables.values():
        if token in vocabulary.vocab:
            special_ids.setdefault(token, vocabulary.vocab[token])
    return checkpoint_chat(directory, special_ids, variables, tokenizer.special.eos_id)
