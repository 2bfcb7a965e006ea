"""A Hugging Face checkpoint's tokenizer files: which kind they are, checked, and their special ids.

The tokenizer is the one transformers (and vLLM, TGI) use: `tokenizer.json` when the checkpoint has
one, `tokenizer.model` only when it has not. Three kinds, each on ops stock TF Serving has:

    byte_level_bpe     `tokenizer.json` with GPT-2's ByteLevel pre-tokenizer or Llama 3's Split
                       expression (optionally after a Digits pre-tokenizer; Llama 3's
                       `ignore_merges` too), or `vocab.json` + `merges.txt` (GPT-2, SmolLM,
                       Llama 3); tokenized by `bpe_graph.py`
    sentencepiece_bpe  a SentencePiece-style `tokenizer.json` (Llama 2, TinyLlama, Mistral as
                       transformers saves them: BPE with byte fallback, '▁' for spaces, a
                       Prepend/Replace normalizer or a Metaspace pre-tokenizer); tokenized by
                       `sentencepiece_bpe_graph.py`
    sentencepiece      `tokenizer.model` alone; tokenized by TF Text's SentencePiece op, which runs
                       the model's own normalizer and byte fallback (sentencepiece_graph.py)

A `tokenizer.model` beside a `tokenizer.json` is not used (`unused_files`): the two can disagree (a
model trained with the `nmt_nfkc` normaliser turns "\nNow" into one '▁Now' piece natively, while
its converted tokenizer.json keeps <0x0A>, 'N', 'ow'), and the ids the checkpoint was trained on
are tokenizer.json's. A `tokenizer.json` whose normalizer, pre-tokenizer, decoder, post-processor
or model options we do not reproduce exactly is refused with the file and field named, rather than
tokenized differently from the checkpoint.

Special ids come from `config.json` (bos_token_id / eos_token_id / pad_token_id) when it has
them, else from the token names in `tokenizer_config.json` / `special_tokens_map.json`, else from
the SentencePiece model, <s> / </s>, or GPT-2's <|endoftext|>. How a prompt is framed follows
transformers (`prompt_framing`). The Tokenizer stage records the result as `special_tokens.json`
beside the files it copies, and that record wins wherever it exists, so a copy of the files never
needs the model's config.
"""

import hashlib
import json
import os
from typing import Dict, List, NamedTuple, Optional, Tuple

import tensorflow as tf

from components.tokenizer import byte_level, special
from components.tokenizer.sentencepiece_bpe_graph import SPACE_SYMBOL, TextSteps

SENTENCEPIECE, BYTE_LEVEL_BPE, SENTENCEPIECE_BPE = "sentencepiece", "byte_level_bpe", "sentencepiece_bpe"
SENTENCEPIECE_FILE, TOKENIZER_JSON, VOCAB_JSON, MERGES_TXT = (
    "tokenizer.model",
    "tokenizer.json",
    "vocab.json",
    "merges.txt",
)
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
    unused_files: Tuple[str, ...] = ()  # tokenizer files present but not used (tokenizer.model beside tokenizer.json)


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
    present = {
        name: _read(directory, name)
        for name in (SENTENCEPIECE_FILE, TOKENIZER_JSON, VOCAB_JSON, MERGES_TXT, *SIDE_FILES)
    }
    present = {name: data for name, data in present.items() if data is not None}
    side = {name: present[name] for name in SIDE_FILES if name in present}
    unused: Tuple[str, ...] = ()
    if TOKENIZER_JSON in present:
        kind = tokenizer_json_kind(present[TOKENIZER_JSON], os.path.join(directory, TOKENIZER_JSON))
        files = {TOKENIZER_JSON: present[TOKENIZER_JSON], **side}
        unused = tuple(name for name in (SENTENCEPIECE_FILE, VOCAB_JSON, MERGES_TXT) if name in present)
    elif SENTENCEPIECE_FILE in present:
        kind, files = SENTENCEPIECE, {SENTENCEPIECE_FILE: present[SENTENCEPIECE_FILE], **side}
    elif VOCAB_JSON in present and MERGES_TXT in present:
        kind, files = BYTE_LEVEL_BPE, {VOCAB_JSON: present[VOCAB_JSON], MERGES_TXT: present[MERGES_TXT], **side}
    else:
        raise FileNotFoundError(
            f"no tokenizer files in {directory} (expected {TOKENIZER_JSON}, {SENTENCEPIECE_FILE}, "
            f"or {VOCAB_JSON} + {MERGES_TXT})"
        )
    tokens = token_ids(kind, files, directory)
    record = _read(directory, SPECIAL_RECORD)
    if record is not None:
        specials = special.SpecialTokens.from_json(
            _json(record, os.path.join(directory, SPECIAL_RECORD)), os.path.join(directory, SPECIAL_RECORD)
        )
    else:
        specials = _special_tokens(directory, kind, files, tokens)
    size = tokens.size
    for field, value in specials._asdict().items():
        for token_id in value if isinstance(value, tuple) else (value,):
            if token_id is not None and not 0 <= token_id < size:
                raise ValueError(
                    f"{directory}: special token {field}={token_id} is outside the vocabulary (size {size})"
                )
    return CheckpointTokenizer(kind, directory, files, specials, unused)


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
    text_steps: Optional[TextSteps] = None  # SentencePiece-style BPE: what it does to text before the model


def token_ids(kind: str, files: Dict[str, bytes], directory: str) -> Vocabulary:
    """Parses and checks the files of `kind` (errors name the file and field)."""
    if kind == SENTENCEPIECE:
        return _sentencepiece_vocabulary(files[SENTENCEPIECE_FILE], os.path.join(directory, SENTENCEPIECE_FILE))
    if kind == SENTENCEPIECE_BPE:
        return _sentencepiece_bpe_json(files[TOKENIZER_JSON], os.path.join(directory, TOKENIZER_JSON))
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
    return ValueError(
        f"{path}: unsupported {field} {json.dumps(value, ensure_ascii=False)[:120]} (supported: "
        "GPT-2-style byte-level BPE and SentencePiece-style BPE with byte fallback)"
    )


def _tokenizer_json(data: bytes, path: str) -> Vocabulary:
    """Checks that a tokenizer.json is GPT-2-style byte-level BPE and returns its vocabulary."""
    spec = _json(data, path)
    model = _bpe_model(spec, path)
    for field, allowed in (("byte_fallback", (False, None)),):
        if model.get(field) not in allowed:
            raise _unsupported(path, f"model.{field}", model.get(field))
    if spec.get("normalizer") is not None:
        raise _unsupported(path, "normalizer", spec["normalizer"])
    digits, expression = _check_pre_tokenizer(spec.get("pre_tokenizer"), path)
    decoder = spec.get("decoder")
    if decoder is not None and decoder.get("type") != "ByteLevel":
        raise _unsupported(path, "decoder", decoder)
    vocab, merges, specials, unk = _bpe_tokens(spec, model, path)
    full = {**vocab, **specials}
    return Vocabulary(
        full, merges, specials, unk, max(full.values()) + 1, digits, expression, bool(model.get("ignore_merges"))
    )


def tokenizer_json_kind(data: bytes, path: str) -> str:
    """SENTENCEPIECE_BPE for a SentencePiece-style tokenizer.json (byte fallback, or a Metaspace
    pre-tokenizer), else BYTE_LEVEL_BPE (each parser refuses what it does not reproduce)."""
    spec = _json(data, path)
    pre = spec.get("pre_tokenizer") or {}
    if (spec.get("model") or {}).get("byte_fallback") or pre.get("type") == "Metaspace":
        return SENTENCEPIECE_BPE
    return BYTE_LEVEL_BPE


def _bpe_model(spec: dict, path: str) -> dict:
    """The tokenizer.json's model, checked to be a BPE without options we do not reproduce."""
    model = spec.get("model") or {}
    if model.get("type") != "BPE":
        raise _unsupported(path, "model.type", model.get("type"))
    for field, allowed in (
        ("dropout", (None,)),
        ("continuing_subword_prefix", (None, "")),
        ("end_of_word_suffix", (None, "")),
    ):
        if model.get(field) not in allowed:
            raise _unsupported(path, f"model.{field}", model.get(field))
    if not isinstance(model.get("vocab"), dict):
        raise ValueError(f"{path}: model.vocab is missing or not an object")
    return model


def _bpe_tokens(spec: dict, model: dict, path: str):
    """(vocab, merges, special added tokens content -> id, unk id) of a BPE tokenizer.json."""
    vocab = model["vocab"]
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
    return vocab, merges, specials, unk


def _sentencepiece_bpe_json(data: bytes, path: str) -> Vocabulary:
    """Checks a SentencePiece-style tokenizer.json (see module docstring) and returns its vocabulary."""
    spec = _json(data, path)
    model = _bpe_model(spec, path)
    if model.get("byte_fallback") is not True:
        raise _unsupported(path, "model.byte_fallback", model.get("byte_fallback"))
    if model.get("ignore_merges"):
        raise _unsupported(path, "model.ignore_merges", True)
    normalizer = _normalizer_steps(spec.get("normalizer"), path)
    metaspace = _metaspace(spec.get("pre_tokenizer"), path)
    strip = _sentencepiece_decoder(spec.get("decoder"), path)
    vocab, merges, specials, unk = _bpe_tokens(spec, model, path)
    full = {**vocab, **specials}
    steps = TextSteps(
        normalizer,
        metaspace is not None,
        bool(metaspace and metaspace[0]),
        bool(metaspace and metaspace[1]),
        strip,
        bool(metaspace and metaspace[2]),
    )
    return Vocabulary(full, merges, specials, unk, max(full.values()) + 1, text_steps=steps)


def _normalizer_steps(normalizer: Optional[dict], path: str) -> tuple:
    """A normalizer of Replace (one character by another) and Prepend steps, as TextSteps.normalizer."""
    if normalizer is None:
        return ()
    steps, field = [normalizer], "normalizer"
    if normalizer.get("type") == "Sequence":
        steps, field = list(normalizer.get("normalizers") or []), "normalizer.normalizers"
    found = []
    for index, step in enumerate(steps):
        where = f"{field}[{index}]" if field != "normalizer" else field
        pattern = (step.get("pattern") or {}).get("String") if step.get("type") == "Replace" else None
        if step.get("type") == "Prepend" and isinstance(step.get("prepend"), str) and step["prepend"]:
            found.append(("prepend", step["prepend"]))
        elif (
            isinstance(pattern, str)
            and len(pattern) == 1
            and isinstance(step.get("content"), str)
            and len(step["content"]) == 1
        ):
            found.append(("replace", pattern, step["content"]))
        else:
            raise _unsupported(path, where, step)
    return tuple(found)


def _metaspace(pre: Optional[dict], path: str) -> Optional[Tuple[bool, bool, bool]]:
    """None without a pre-tokenizer, else a Metaspace's (prepends '▁', splits at '▁', prepends
    only at the start of the input: prepend_scheme `first`)."""
    if pre is None:
        return None
    if pre.get("type") != "Metaspace" or pre.get("replacement", SPACE_SYMBOL) != SPACE_SYMBOL:
        raise _unsupported(path, "pre_tokenizer", pre)
    scheme = pre.get("prepend_scheme")
    if scheme is None:  # the format before prepend_scheme: add_prefix_space
        scheme = "always" if pre.get("add_prefix_space", True) else "never"
    if scheme not in ("always", "first", "never"):
        raise _unsupported(path, "pre_tokenizer.prepend_scheme", scheme)
    return scheme != "never", bool(pre.get("split", True)), scheme == "first"


SENTENCEPIECE_DECODER = [
    {"type": "Replace", "pattern": {"String": SPACE_SYMBOL}, "content": " "},
    {"type": "ByteFallback"},
    {"type": "Fuse"},
]
STRIP_ONE_SPACE = {"type": "Strip", "content": " ", "start": 1, "stop": 0}


def _sentencepiece_decoder(decoder: Optional[dict], path: str) -> bool:
    """Checks the decoder is Llama's (piece_decoding.py); returns whether it strips one space."""
    steps = (decoder or {}).get("decoders") if (decoder or {}).get("type") == "Sequence" else None
    if steps == SENTENCEPIECE_DECODER + [STRIP_ONE_SPACE]:
        return True
    if steps == SENTENCEPIECE_DECODER:
        return False
    raise _unsupported(path, "decoder", decoder)


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


NAMED_ROLES = ("bos", "eos", "unk", "sep", "pad", "cls", "mask")


def token_names(files: Dict[str, bytes], directory: str) -> Dict[str, str]:
    """{role: token} for the special tokens the tokenizer files name (`bos_token`, ... in
    tokenizer_config.json, which wins, or special_tokens_map.json): what transformers calls them."""
    names: Dict[str, str] = {}
    for name in reversed(SIDE_FILES):  # tokenizer_config.json wins over special_tokens_map.json
        if name in files:
            side = _json(files[name], os.path.join(directory, name))
            for role in NAMED_ROLES:
                token = _token_name(side.get(f"{role}_token"))
                if token is not None:
                    names[role] = token
    return names


def _special_tokens(directory: str, kind: str, files: Dict[str, bytes], tokens: Vocabulary) -> special.SpecialTokens:
    """bos/eos/pad ids as the checkpoint defines them (see module docstring)."""
    config_path = os.path.join(directory, CONFIG_JSON)
    config_data = _read(directory, CONFIG_JSON)
    config = _json(config_data, config_path) if config_data is not None else {}
    names = token_names(files, directory)

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
    elif kind == SENTENCEPIECE_BPE:
        bos = tokens.vocab.get("<s>") if bos is None else bos
        eos = tokens.vocab.get("</s>") if eos is None else eos
    elif eos is None and "<|endoftext|>" in tokens.vocab:
        eos = tokens.vocab["<|endoftext|>"]
    prefix, suffix = prompt_framing(kind, files, bos, eos, directory, str(config.get("model_type") or ""))
    return special.for_checkpoint(bos, eos, pad, unk, directory, prefix, suffix)


# transformers' tokenizer classes that frame a text from add_bos_token / add_eos_token (their
# defaults), whatever the tokenizer.json's post-processor says.
_FLAG_FRAMED_CLASSES = {
    "LlamaTokenizer": (True, False),
    "CodeLlamaTokenizer": (True, False),
    "GemmaTokenizer": (True, False),
}
# The class transformers picks by config.json's model_type when tokenizer_config.json names none.
_CLASS_OF_MODEL_TYPE = {
    "llama": "LlamaTokenizer",
    "mistral": "LlamaTokenizer",
    "mixtral": "LlamaTokenizer",
    "gemma": "GemmaTokenizer",
}


def prompt_framing(
    kind: str, files: Dict[str, bytes], bos: Optional[int], eos: Optional[int], directory: str, model_type: str = ""
) -> Tuple[Tuple[int, ...], Tuple[int, ...]]:
    """(ids before, ids after) one text, as transformers' tokenizer for these files adds them (its
    class: tokenizer_config.json's `tokenizer_class`, else the one config.json's `model_type` maps to):
    Llama's tokenizer classes (and a SentencePiece `tokenizer.model` alone, which transformers
    loads with LlamaTokenizer) follow `add_bos_token` / `add_eos_token` in tokenizer_config.json
    (default: <s> before, nothing after); every other class applies the tokenizer.json's
    post-processor (GPT-2's ByteLevel adds nothing; TemplateProcessing adds its special tokens);
    GPT-2's vocab.json + merges.txt add nothing. (Checked with transformers 4.57: GPT2TokenizerFast
    ignores add_bos_token; PreTrainedTokenizerFast ignores both flags.)"""
    config_path = os.path.join(directory, SIDE_FILES[0])
    config = _json(files[SIDE_FILES[0]], config_path) if SIDE_FILES[0] in files else {}
    name = str(config.get("tokenizer_class") or _CLASS_OF_MODEL_TYPE.get(model_type, ""))
    name = name[: -len("Fast")] if name.endswith("Fast") else name
    defaults = _FLAG_FRAMED_CLASSES.get(name) or ((True, False) if kind == SENTENCEPIECE else None)
    if defaults is None and TOKENIZER_JSON not in files:
        return (), ()  # vocab.json + merges.txt: GPT2TokenizerFast adds nothing, whatever add_bos_token says
    if defaults is not None:
        add_bos, add_eos = (
            bool(config.get(flag, default)) for flag, default in zip(("add_bos_token", "add_eos_token"), defaults)
        )
        for flag, wanted, token_id in (("add_bos_token", add_bos, bos), ("add_eos_token", add_eos, eos)):
            if wanted and token_id is None:
                raise ValueError(f"{config_path}: {flag} is true but the tokenizer has no such token")
        return ((bos,) if add_bos else ()), ((eos,) if add_eos else ())
    path = os.path.join(directory, TOKENIZER_JSON)
    return _post_processor_framing(_json(files[TOKENIZER_JSON], path).get("post_processor"), path, "post_processor")


def _post_processor_framing(processor: Optional[dict], path: str, field: str):
    """(ids before, ids after) a single text from a tokenizer.json post-processor."""
    if processor is None or processor.get("type") == "ByteLevel":
        return (), ()
    if processor.get("type") == "Sequence":
        before, after = (), ()
        for index, step in enumerate(processor.get("processors") or []):
            more_before, more_after = _post_processor_framing(step, path, f"{field}.processors[{index}]")
            before, after = before + more_before, more_after + after
        return before, after
    if processor.get("type") != "TemplateProcessing":
        raise _unsupported(path, field, processor)
    special_tokens = processor.get("special_tokens") or {}
    before, after, seen_text = [], [], False
    for item in processor.get("single") or []:
        if "Sequence" in item and item["Sequence"].get("id") == "A" and not seen_text:
            seen_text = True
        elif "SpecialToken" in item and item["SpecialToken"].get("id") in special_tokens:
            ids = [int(i) for i in special_tokens[item["SpecialToken"]["id"]].get("ids") or []]
            (after if seen_text else before).extend(ids)
        else:
            raise _unsupported(path, f"{field}.single", processor.get("single"))
    if not seen_text:
        raise _unsupported(path, f"{field}.single", processor.get("single"))
    return tuple(before), tuple(after)
