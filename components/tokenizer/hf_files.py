"""A Hugging Face checkpoint's tokenizer files: which kind they are, checked, and their special ids.

Two kinds are supported, each on ops stock TF Serving has:

    sentencepiece    `tokenizer.model` (Llama 2, TinyLlama, Mistral); tokenized by TF Text's
                     SentencePiece op, which runs the model's own normalizer and byte fallback
    byte_level_bpe   `tokenizer.json` with GPT-2's ByteLevel pre-tokenizer or Llama 3's Split
                     expression (optionally after a Digits pre-tokenizer; Llama 3's
                     `ignore_merges` too), or `vocab.json` + `merges.txt` (GPT-2, SmolLM,
                     Llama 3); tokenized by `bpe_graph.py`

`tokenizer.model` wins when both it and a `tokenizer.json` are present (Llama 2 ships both; they
describe the same tokenizer). A `tokenizer.json` whose normalizer, pre-tokenizer, decoder or model
options we do not reproduce exactly is refused with the file and field named, rather than
tokenized differently from the checkpoint (any other Split expression, a normalizer, ...).

Special ids come from `config.json` (bos_token_id / eos_token_id / pad_token_id) when it has
them, else from the token names in `tokenizer_config.json` / `special_tokens_map.json`, else from
the SentencePiece model or GPT-2's <|endoftext|>. The Tokenizer stage records the result as
`special_tokens.json` beside the files it copies, and that record wins wherever it exists, so a
copy of the files never needs the model's config.
"""
import hashlib
import json
import os
from typing import Dict, List, NamedTuple, Optional, Tuple

import tensorflow as tf

from components.tokenizer import byte_level, special

SENTENCEPIECE, BYTE_LEVEL_BPE = "sentencepiece", "byte_level_bpe"
SENTENCEPIECE_FILE, TOKENIZER_JSON, VOCAB_JSON, MERGES_TXT = "tokenizer.model", "tokenizer.json", "vocab.json", "merges.txt"
SIDE_FILES = ("tokenizer_config.json", "special_tokens_map.json")
SPECIAL_RECORD = "special_tokens.json"
CONFIG_JSON = "config.json"


class CheckpointTokenizer(NamedTuple):
    """What a checkpoint's tokenizer is: its kind, the files that define it (name -> bytes; the
    Tokenizer stage copies exactly these), and its special tokens."""

    kind: str
    directory: str
    files: Dict[str, bytes]
    special: special.SpecialTokens



def files_sha256(files: Dict[str, bytes]) -> Dict[str, str]:
    """sha256 of each file, by name."""
    return {name: hashlib.sha256(data).hexdigest() for name, data in sorted(files.items())}


def combined_sha256(files: Dict[str, bytes]) -> str:
    """One hash naming a set of files: over the sorted (file name, file sha256) pairs."""
    lines = "".join(f"{name} {digest}\n" for name, digest in files_sha256(files).items())
    return hashlib.sha256(lines.encode()).hexdigest()


def _read(directory: str, name: str) -> Optional[bytes]:
    path = os.path.join(directory, name)
    if not tf.io.gfile.exists(path):
        return None
    with tf.io.gfile.GFile(path, "rb") as handle:
        return handle.read()


def _json(data: bytes, path: str):
    try:
        return json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path} is not valid JSON: {exc}") from None


def read(directory: str) -> CheckpointTokenizer:
    """Finds, checks and describes the tokenizer files in `directory` (see module docstring)."""
    if not tf.io.gfile.isdir(directory):
        raise FileNotFoundError(f"checkpoint directory {directory} does not exist")
    present = {name: _read(directory, name) for name in
               (SENTENCEPIECE_FILE, TOKENIZER_JSON, VOCAB_JSON, MERGES_TXT, *SIDE_FILES)}
    present = {name: data for name, data in present.items() if data is not None}
    side = {name: present[name] for name in SIDE_FILES if name in present}
    if SENTENCEPIECE_FILE in present:
        kind, files = SENTENCEPIECE, {SENTENCEPIECE_FILE: present[SENTENCEPIECE_FILE], **side}
    elif TOKENIZER_JSON in present:
        kind, files = BYTE_LEVEL_BPE, {TOKENIZER_JSON: present[TOKENIZER_JSON], **side}
    elif VOCAB_JSON in present and MERGES_TXT in present:
        kind, files = BYTE_LEVEL_BPE, {VOCAB_JSON: present[VOCAB_JSON], MERGES_TXT: present[MERGES_TXT], **side}
    else:
        raise FileNotFoundError(f"no tokenizer files in {directory} (expected {SENTENCEPIECE_FILE}, {TOKENIZER_JSON}, "
                                f"or {VOCAB_JSON} + {MERGES_TXT})")
    tokens = token_ids(kind, files, directory)
    record = _read(directory, SPECIAL_RECORD)
    if record is not None:
        specials = special.SpecialTokens.from_json(_json(record, os.path.join(directory, SPECIAL_RECORD)),
                                                   os.path.join(directory, SPECIAL_RECORD))
    else:
        specials = _special_tokens(directory, kind, files, tokens)
    size = len(tokens.vocab) if kind == BYTE_LEVEL_BPE else tokens.size
    for field, value in specials._asdict().items():
        for token_id in (value if isinstance(value, tuple) else (value,)):
            if not 0 <= token_id < size:
                raise ValueError(f"{directory}: special token {field}={token_id} is outside the vocabulary (size {size})")
    return CheckpointTokenizer(kind, directory, files, specials)


class Vocabulary(NamedTuple):
    """Token strings and ids (byte-level BPE: vocab, merges, special ids; SentencePiece: the piece ids)."""

    vocab: Dict[str, int]
    merges: List[Tuple[str, str]]
    special_ids: Dict[str, int]  # special token content -> id
    unk_id: Optional[int]
    size: int
    digits: str = ""  # byte-level BPE: the Digits pre-tokenizer's expression ('' for none; bpe_graph.py)
    expression: str = byte_level.GPT2_PATTERN  # byte-level BPE: the pre-tokenizer's expression
    ignore_merges: bool = False  # byte-level BPE: a word that is a token stays whole (Llama 3)


def token_ids(kind: str, files: Dict[str, bytes], directory: str) -> Vocabulary:
    """Parses and checks the files of `kind` (errors name the file and field)."""
    if kind == SENTENCEPIECE:
        return _sentencepiece_vocabulary(files[SENTENCEPIECE_FILE], os.path.join(directory, SENTENCEPIECE_FILE))
    if TOKENIZER_JSON in files:
        return _tokenizer_json(files[TOKENIZER_JSON], os.path.join(directory, TOKENIZER_JSON))
    vocab = _json(files[VOCAB_JSON], os.path.join(directory, VOCAB_JSON))
    if not isinstance(vocab, dict) or not all(isinstance(v, int) for v in vocab.values()):
        raise ValueError(f"{os.path.join(directory, VOCAB_JSON)}: expected an object of token -> integer id")
    merges = _merges_txt(files[MERGES_TXT].decode("utf-8"), os.path.join(directory, MERGES_TXT))
    specials = {token: index for token, index in vocab.items() if token == "<|endoftext|>"}
    return Vocabulary(vocab, merges, specials, None, max(vocab.values()) + 1)


def _sentencepiece_vocabulary(proto: bytes, path: str) -> Vocabulary:
    import sentencepiece as spm

    try:
        processor = spm.SentencePieceProcessor(model_proto=proto)
    except RuntimeError as exc:
        raise ValueError(f"{path} is not a SentencePiece model: {exc}") from None
    pieces = {processor.id_to_piece(i): i for i in range(processor.get_piece_size())}
    controls = {processor.id_to_piece(i): i for i in range(processor.get_piece_size()) if processor.is_control(i)}
    unk = processor.unk_id()
    return Vocabulary(pieces, [], controls, unk if unk >= 0 else None, processor.get_piece_size())


def _merges_txt(text: str, path: str) -> List[Tuple[str, str]]:
    merges = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line or (number == 1 and line.startswith("#version")):
            continue
        parts = line.split(" ")
        if len(parts) != 2:
            raise ValueError(f"{path}: line {number} is not a pair of tokens: {line!r}")
        merges.append((parts[0], parts[1]))
    return merges


def _unsupported(path: str, field: str, value) -> ValueError:
    return ValueError(f"{path}: unsupported {field} {json.dumps(value)[:120]} (supported: GPT-2-style byte-level BPE)")


def _tokenizer_json(data: bytes, path: str) -> Vocabulary:
    """Checks that a tokenizer.json is GPT-2-style byte-level BPE and returns its vocabulary."""
    spec = _json(data, path)
    model = spec.get("model") or {}
    if model.get("type") != "BPE":
        raise _unsupported(path, "model.type", model.get("type"))
    if model.get("byte_fallback"):
        raise ValueError(f"{path}: model.byte_fallback is true, a SentencePiece-style tokenizer: it is read from its "
                         f"{SENTENCEPIECE_FILE}, which is not beside it")
    for field, allowed in (("dropout", (None,)), ("continuing_subword_prefix", (None, "")),
                           ("end_of_word_suffix", (None, "")), ("byte_fallback", (False, None))):
        if model.get(field) not in allowed:
            raise _unsupported(path, f"model.{field}", model.get(field))
    if spec.get("normalizer") is not None:
        raise _unsupported(path, "normalizer", spec["normalizer"])
    digits, expression = _check_pre_tokenizer(spec.get("pre_tokenizer"), path)
    decoder = spec.get("decoder")
    if decoder is not None and decoder.get("type") != "ByteLevel":
        raise _unsupported(path, "decoder", decoder)
    vocab = model.get("vocab")
    if not isinstance(vocab, dict):
        raise ValueError(f"{path}: model.vocab is missing or not an object")
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in model.get("merges", [])]
    bad = next((i for i, m in enumerate(merges) if len(m) != 2), None)
    if bad is not None:
        raise ValueError(f"{path}: model.merges[{bad}] is not a pair of tokens")
    specials = {}
    for index, added in enumerate(spec.get("added_tokens") or []):
        if not added.get("special"):
            raise _unsupported(path, f"added_tokens[{index}] (a non-special added token)", added.get("content"))
        specials[added["content"]] = int(added["id"])
    unk = vocab.get(model["unk_token"]) if model.get("unk_token") else None
    full = {**vocab, **specials}
    return Vocabulary(full, merges, specials, unk, max(full.values()) + 1, digits, expression,
                      bool(model.get("ignore_merges")))


def _check_pre_tokenizer(pre: Optional[dict], path: str) -> Tuple[str, str]:
    """GPT-2's: ByteLevel with its regex, or Split(GPT-2's or Llama 3's expression, Isolated) +
    ByteLevel without, either one optionally after a Digits pre-tokenizer. Returns the Digits
    expression ('' for none) and the pre-tokenizer's expression."""
    def plain_byte_level(step, with_regex, field):
        if step.get("type") != "ByteLevel":
            raise _unsupported(path, field, step)
        if step.get("add_prefix_space"):
            raise _unsupported(path, f"{field}.add_prefix_space", True)
        if bool(step.get("use_regex", True)) != with_regex:
            raise _unsupported(path, f"{field}.use_regex", step.get("use_regex", True))

    if pre is None:
        raise _unsupported(path, "pre_tokenizer", None)
    steps, field = [pre], "pre_tokenizer"
    if pre.get("type") == "Sequence":
        steps, field = list(pre.get("pretokenizers") or []), "pre_tokenizer.pretokenizers"
    digits, first = "", 0
    if steps and steps[0].get("type") == "Digits":
        digits = byte_level.DIGIT if steps[0].get("individual_digits") else byte_level.DIGITS
        first = 1
    rest = steps[first:]
    where = f"{field}[{first}]" if field != "pre_tokenizer" else field
    if len(rest) == 1:
        plain_byte_level(rest[0], True, where)
        return digits, byte_level.GPT2_PATTERN
    if len(rest) == 2 and rest[0].get("type") == "Split":
        pattern = (rest[0].get("pattern") or {}).get("Regex")
        supported = (byte_level.GPT2_PATTERN, byte_level.LLAMA3_PATTERN)
        if pattern not in supported or rest[0].get("behavior") != "Isolated" or rest[0].get("invert"):
            raise _unsupported(path, f"{where} (the Split expression)", rest[0].get("pattern"))
        plain_byte_level(rest[1], False, f"{field}[{first + 1}]")
        return digits, pattern
    raise _unsupported(path, "pre_tokenizer", pre)


def _token_name(value) -> Optional[str]:
    if isinstance(value, dict):
        return value.get("content")
    return value if isinstance(value, str) else None


def _config_id(config: dict, field: str, path: str) -> Optional[int]:
    value = config.get(field)
    if isinstance(value, list):  # several eos ids (chat models): the first is the end of a document
        value = value[0] if value else None
    if value is not None and not isinstance(value, int):
        raise ValueError(f"{path}: {field} is {value!r}, not an integer id")
    return value


def _special_tokens(directory: str, kind: str, files: Dict[str, bytes], tokens: Vocabulary) -> special.SpecialTokens:
    """bos/eos/pad ids as the checkpoint defines them (see module docstring)."""
    config_path = os.path.join(directory, CONFIG_JSON)
    config_data = _read(directory, CONFIG_JSON)
    config = _json(config_data, config_path) if config_data is not None else {}
    names: Dict[str, str] = {}
    for name in reversed(SIDE_FILES):  # tokenizer_config.json wins over special_tokens_map.json
        if name in files:
            side = _json(files[name], os.path.join(directory, name))
            for role in ("bos", "eos", "pad", "unk"):
                token = _token_name(side.get(f"{role}_token"))
                if token is not None:
                    names[role] = token

    def resolve(role: str) -> Optional[int]:
        from_config = _config_id(config, f"{role}_token_id", config_path)
        if from_config is not None:
            return from_config
        if role in names:
            if names[role] not in tokens.vocab:
                raise ValueError(f"{directory}: {role}_token {names[role]!r} is not in the vocabulary")
            return tokens.vocab[names[role]]
        return None

    bos, eos, pad = resolve("bos"), resolve("eos"), resolve("pad")
    unk = tokens.unk_id
    if kind == SENTENCEPIECE:
        import sentencepiece as spm

        processor = spm.SentencePieceProcessor(model_proto=files[SENTENCEPIECE_FILE])
        bos = processor.bos_id() if bos is None and processor.bos_id() >= 0 else bos
        eos = processor.eos_id() if eos is None and processor.eos_id() >= 0 else eos
        pad = processor.pad_id() if pad is None and processor.pad_id() >= 0 else pad
    elif eos is None and "<|endoftext|>" in tokens.vocab:
        eos = tokens.vocab["<|endoftext|>"]
    return special.for_checkpoint(bos, eos, pad, unk, directory)
