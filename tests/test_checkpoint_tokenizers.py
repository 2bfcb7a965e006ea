"""A checkpoint's tokenizer in the TF graph gives the ids Hugging Face `tokenizers` gives.

The fixtures (tests/fixtures/hf/tokenizers/, made by tests/fixtures/make_hf_tokenizers.py) are a
tiny GPT-2-style byte-level BPE in GPT-2's id layout and tiny Llama-style SentencePiece models
with the tokenizer.json transformers converts each to (one normalising as the tokenizer.json does,
two with `nmt_nfkc`, with and without a dummy prefix, which their tokenizer.json does not do);
`tokenizers` loads those tokenizer.json files as the oracle. Special tokens are never parsed from
text in our graphs (bpe_graph.py), which is `tokenizers` with `encode_special_tokens=True`.
"""

import json
import os
import shutil

import pytest
import tensorflow as tf
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer as HfTokenizer
from tokenizers import pre_tokenizers

from components.tokenizer import byte_level, loaded, special
from components.trainer.serving.compat import ops_stock_serving_cannot_load
from tests.conftest import PROJECT_ROOT

FIXTURES = os.path.join(PROJECT_ROOT, "tests", "fixtures", "hf", "tokenizers")
KINDS = ["gpt2_bpe", "llama_sp", "llama_sp_nfkc", "llama_sp_nfkc_noprefix"]
SENTENCEPIECE_STYLE = ("llama_sp", "llama_sp_nfkc", "llama_sp_nfkc_noprefix")

TEXTS = [
    "Hello world, it's a test. We'll see; they've gone, I'm here, you'd know, it'd be 'quoted'.",
    "def tokenize(text: str) -> list:\n    return [t for t in text.split()]  # comment\n",
    "if (x != 0) {\n\treturn a->b[i] + 0x1F;\n}\n",
    "runs  of   spaces    and\n\nnewlines\n\n\n  indented",
    "trailing spaces   ",
    "\n\n  x",
    "   leading spaces",
    "tabs\tand\t\tmore\t \tmixed \t",
    " \n \n",
    "a \u00a0b\u3000c\u2003d\u2028e\u0085f\x0bg\x0ch\ri",  # Unicode whitespace that is not ASCII
    "東京は日本の首都です。中文文本，한국어 텍스트",
    "emoji 🙂👍🏽 flags 🇯🇵🇫🇷 ZWJ 👩‍👩‍👧 👨🏾‍💻",
    "combining e\u0301 n\u0303 a\u0308\u0301 and precomposed é ñ",
    "Ｆｕｌｌ-width ＡＢＣ and ligature \ufb01",
    "digits 0123456789 3.14159 1,000,000 ½",
    "'s 't 're 've 'm 'll 'd  's  'sx x's",
    "mixed: naïve café—“quotes”…",
    "<|endoftext|> and <s> </s> as plain text",
    "NUL \x00 bell \x07 DEL \x7f",
    "KING HENRY:\nNow",
    "春眠不觉晓",
    'Wow! "Quoted" #1',
    "a" * 200 + " " + "9" * 50,
    "",
    " ",
    "x",
]


def _hf(kind: str) -> HfTokenizer:
    tokenizer = HfTokenizer.from_file(os.path.join(FIXTURES, kind, "tokenizer.json"))
    tokenizer.encode_special_tokens = True
    return tokenizer


class Graph:
    """One kind's graph module, traced once for any batch of strings."""

    def __init__(self, directory: str):
        self.tokenizer = loaded.load(directory)
        module = self.tokenizer.graph()
        self.tokenize = tf.function(module.tokenize, input_signature=[tf.TensorSpec([None], tf.string)])
        self.detokenize = tf.function(
            module.detokenize, input_signature=[tf.RaggedTensorSpec([None, None], tf.int64, ragged_rank=1)]
        )

    def ids(self, texts):
        return self.tokenize(tf.constant(texts, tf.string)).to_list()

    def texts(self, token_ids):
        ragged = (
            tf.ragged.constant(token_ids, dtype=tf.int64, ragged_rank=1)
            if token_ids
            else tf.RaggedTensor.from_row_lengths(tf.zeros([0], tf.int64), tf.zeros([0], tf.int64))
        )
        return [t.decode("utf-8") for t in self.detokenize(ragged).numpy()]


@pytest.fixture(scope="module", params=KINDS)
def kind(request):
    return request.param, Graph(os.path.join(FIXTURES, request.param)), _hf(request.param)


def _mismatches(graph, hf, texts):
    ours = graph.ids(texts)
    theirs = [hf.encode(text, add_special_tokens=False).ids for text in texts]
    return [(text, a, b) for text, a, b in zip(texts, ours, theirs) if a != b]


def test_ids_equal_hugging_face_tokenizers_on_the_text_set(kind):
    _, graph, hf = kind
    assert _mismatches(graph, hf, TEXTS) == []


def test_decode_of_encode_is_the_text(kind):
    name, graph, hf = kind
    # A checkpoint's SentencePiece model reads '▁' as a space (Hugging Face's decode agrees), so
    # texts with it cannot round-trip there; the text set has none.
    decoded = graph.texts(graph.ids(TEXTS))
    assert decoded == TEXTS
    assert decoded == [hf.decode(hf.encode(text, add_special_tokens=False).ids) for text in TEXTS]


TEXT = st.text(st.characters(blacklist_categories=["Cs"]), max_size=40)
SPACEY = st.lists(
    st.sampled_from([" ", "  ", "\n", "\t", "a", "'s", "9", "é", "東", "👍🏽", "\u3000", "!", "\x00"]), max_size=20
).map("".join)


@settings(max_examples=150, deadline=None)
@given(texts=st.lists(st.one_of(TEXT, SPACEY), min_size=1, max_size=6))
def test_ids_and_round_trip_on_arbitrary_text(kind, texts):
    name, graph, hf = kind
    assert _mismatches(graph, hf, texts) == []
    if name in SENTENCEPIECE_STYLE:
        texts = [t for t in texts if "\u2581" not in t]
    assert graph.texts(graph.ids(texts)) == texts


@settings(max_examples=80, deadline=None)
@given(sequences=st.lists(st.lists(st.integers(0, 511), max_size=12), min_size=1, max_size=6))
def test_detokenize_equals_hugging_face_decode_on_any_ids(kind, sequences):
    """Any ids, including byte tokens that are not valid UTF-8 together (a generation cut
    mid-character): the same text as `tokenizers`' decoder, special tokens skipped."""
    name, graph, hf = kind
    if name in SENTENCEPIECE_STYLE:  # <unk> (0) is never produced by byte fallback; <s>, </s> are special
        sequences = [[i for i in ids if i >= 1] for ids in sequences]
    assert graph.texts(sequences) == hf.decode_batch(sequences, skip_special_tokens=True)


def test_vocab_and_merges_files_tokenize_as_the_tokenizer_json(tmp_path):
    source = os.path.join(FIXTURES, "gpt2_bpe")
    for name in ("vocab.json", "merges.txt", "tokenizer_config.json"):
        shutil.copy(os.path.join(source, name), tmp_path / name)
    from_files = Graph(str(tmp_path))
    assert from_files.tokenizer.kind == loaded.BYTE_LEVEL_BPE
    assert from_files.ids(TEXTS) == Graph(source).ids(TEXTS)


def test_special_tokens_are_text_and_decode_to_nothing():
    graph = Graph(os.path.join(FIXTURES, "gpt2_bpe"))
    eos = graph.tokenizer.special.eos_id
    assert eos not in graph.ids(["<|endoftext|>"])[0]
    assert graph.texts([[eos] + graph.ids(["hi"])[0] + [eos]]) == ["hi"]


def test_each_kind_has_its_checkpoints_special_ids():
    gpt2 = loaded.load(os.path.join(FIXTURES, "gpt2_bpe")).special
    llama = loaded.load(os.path.join(FIXTURES, "llama_sp")).special
    # GPT-2: <|endoftext|> between documents, nothing added to a prompt; Llama: <s> ... </s>, <s> before a prompt.
    assert gpt2 == special.SpecialTokens(
        bos_id=511,
        eos_id=511,
        pad_id=511,
        document_prefix=(511,),
        document_suffix=(),
        prompt_prefix=(),
        prompt_suffix=(),
        unk_id=None,
    )
    assert llama == special.SpecialTokens(
        bos_id=1,
        eos_id=2,
        pad_id=0,
        document_prefix=(1,),
        document_suffix=(2,),
        prompt_prefix=(1,),
        prompt_suffix=(),
        unk_id=0,
    )
    assert gpt2.document_forbidden_ids() == {511} and llama.document_forbidden_ids() == {0, 1, 2}
    assert special.LEARNED.document_forbidden_ids() == {0, 1, 2}  # [PAD], [EOS], [UNK]


def test_config_json_ids_win_and_the_record_travels_with_the_files(tmp_path):
    checkpoint = tmp_path / "checkpoint"
    shutil.copytree(os.path.join(FIXTURES, "llama_sp"), checkpoint)
    (checkpoint / "config.json").write_text(json.dumps({"bos_token_id": 1, "eos_token_id": [2, 1], "pad_token_id": 3}))
    tokenizer = loaded.load(str(checkpoint))
    assert tokenizer.special == special.SpecialTokens(1, 2, 3, (1,), (2,), (1,), (), 0)
    tokenizer.write(str(tmp_path / "copy"))
    copied = loaded.load(str(tmp_path / "copy"))  # no config.json there: special_tokens.json says it
    assert copied.special == tokenizer.special and copied.sha256 == tokenizer.sha256
    assert sorted(os.listdir(tmp_path / "copy")) == ["special_tokens.json", "tokenizer.json", "tokenizer_config.json"]


def test_a_special_record_from_before_prompt_framing_frames_prompts_as_documents():
    old = {"bos_id": 0, "eos_id": 0, "pad_id": 0, "document_prefix": [0], "document_suffix": []}
    assert special.SpecialTokens.from_json(old, "old") == special.SpecialTokens(0, 0, 0, (0,), (), (0,), (), None)


def test_byte_token_ids_are_the_byte_pieces():
    llama = loaded.load(os.path.join(FIXTURES, "llama_sp"))
    assert llama.byte_token_ids() == list(range(3, 259))
    gpt2 = loaded.load(os.path.join(FIXTURES, "gpt2_bpe"))
    vocab = json.load(open(os.path.join(FIXTURES, "gpt2_bpe", "vocab.json"), encoding="utf-8"))
    assert gpt2.byte_token_ids() == sorted(vocab[c] for c in byte_level.byte_to_char())


def _tokenizer_json(tmp_path, edit):
    spec = json.load(open(os.path.join(FIXTURES, "gpt2_bpe", "tokenizer.json"), encoding="utf-8"))
    edit(spec)
    (tmp_path / "tokenizer.json").write_text(json.dumps(spec))
    return str(tmp_path)


OTHER_SPLIT = {
    "type": "Sequence",
    "pretokenizers": [
        {
            "type": "Split",
            "pattern": {"Regex": "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}"},  # cut short
            "behavior": "Isolated",
            "invert": False,
        },
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False},
    ],
}


@pytest.mark.parametrize(
    "edit, field",
    [
        (lambda s: s.update(pre_tokenizer=OTHER_SPLIT), "pre_tokenizer.pretokenizers[0]"),
        (lambda s: s.update(normalizer={"type": "NFC"}), "normalizer"),
        (lambda s: s["model"].update(type="WordPiece"), "model.type"),
        (lambda s: s["pre_tokenizer"].update(add_prefix_space=True), "pre_tokenizer.add_prefix_space"),
        (lambda s: s["added_tokens"].append({"id": 511, "content": "<x>", "special": False}), "added_tokens[1]"),
    ],
)
def test_an_unsupported_tokenizer_json_is_refused_naming_the_file_and_field(tmp_path, edit, field):
    directory = _tokenizer_json(tmp_path, edit)
    with pytest.raises(ValueError) as error:
        loaded.load(directory)
    message = str(error.value)
    assert os.path.join(directory, "tokenizer.json") in message and field in message and "\n" not in message


def test_the_gpt2_split_form_of_the_pre_tokenizer_is_accepted(tmp_path):
    split = {
        "type": "Sequence",
        "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": byte_level.GPT2_PATTERN}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False},
        ],
    }
    directory = _tokenizer_json(tmp_path, lambda s: s.update(pre_tokenizer=split))
    assert Graph(directory).ids(TEXTS) == Graph(os.path.join(FIXTURES, "gpt2_bpe")).ids(TEXTS)


def test_tokenizer_json_wins_over_tokenizer_model():
    """transformers uses tokenizer.json; the nmt_nfkc fixtures' tokenizer.model tokenizes otherwise."""
    for name in SENTENCEPIECE_STYLE:
        tokenizer = loaded.load(os.path.join(FIXTURES, name))
        assert (tokenizer.kind, tokenizer.unused_files) == (loaded.SENTENCEPIECE_BPE, ("tokenizer.model",))
        assert set(tokenizer.files) == {"tokenizer.json", "tokenizer_config.json"}
    from components.tokenizer.sentencepiece_graph import CheckpointSentencePieceGraph

    for name in ("llama_sp_nfkc", "llama_sp_nfkc_noprefix"):
        with open(os.path.join(FIXTURES, name, "tokenizer.model"), "rb") as handle:
            native = CheckpointSentencePieceGraph(handle.read())
        hf = _hf(name)
        native_ids = native.tokenize(tf.constant(["KING HENRY:\nNow"])).to_list()[0]
        assert native_ids != hf.encode("KING HENRY:\nNow", add_special_tokens=False).ids
        newline = hf.token_to_id("<0x0A>")
        assert newline in hf.encode("KING HENRY:\nNow", add_special_tokens=False).ids and newline not in native_ids


def test_a_tokenizer_model_alone_is_still_read_natively(tmp_path):
    for name in ("tokenizer.model", "tokenizer_config.json"):
        shutil.copy(os.path.join(FIXTURES, "llama_sp", name), tmp_path / name)
    tokenizer = loaded.load(str(tmp_path))
    assert tokenizer.kind == loaded.SENTENCEPIECE and tokenizer.special.prompt_prefix == (1,)
    # Identity normalisation: the native model and its tokenizer.json agree.
    assert Graph(str(tmp_path)).ids(TEXTS) == Graph(os.path.join(FIXTURES, "llama_sp")).ids(TEXTS)


def _sentencepiece_json(tmp_path, edit, source="llama_sp_nfkc_noprefix"):
    spec = json.load(open(os.path.join(FIXTURES, source, "tokenizer.json"), encoding="utf-8"))
    edit(spec)
    (tmp_path / "tokenizer.json").write_text(json.dumps(spec, ensure_ascii=False), encoding="utf-8")
    shutil.copy(os.path.join(FIXTURES, source, "tokenizer_config.json"), tmp_path / "tokenizer_config.json")
    hf = HfTokenizer.from_file(str(tmp_path / "tokenizer.json"))
    hf.encode_special_tokens = True
    return Graph(str(tmp_path)), hf


@pytest.mark.parametrize("scheme, split", [("first", False), ("always", True), ("never", True)])
def test_a_metaspace_pre_tokenizer_is_reproduced(tmp_path, scheme, split):
    decoder = {
        "type": "Sequence",
        "decoders": [
            {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
            {"type": "ByteFallback"},
            {"type": "Fuse"},
        ]
        + ([{"type": "Strip", "content": " ", "start": 1, "stop": 0}] if scheme != "never" else []),
    }
    graph, hf = _sentencepiece_json(
        tmp_path,
        lambda spec: spec.update(
            pre_tokenizer={"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": scheme, "split": split},
            decoder=decoder,
        ),
    )
    assert _mismatches(graph, hf, TEXTS) == []
    assert graph.texts(graph.ids(TEXTS)) == [hf.decode(hf.encode(t, add_special_tokens=False).ids) for t in TEXTS]


def _merge_list_tokenizer(tmp_path, pieces):
    """A SentencePiece-style tokenizer.json over the letters a-c with `pieces` (in rank order) and,
    as transformers' converter writes them, a merge for every split of each piece into two tokens."""

    def edit(spec):
        vocab = {token: index for token, index in spec["model"]["vocab"].items() if index < 259}
        for token in ["a", "b", "c"] + [p for p in pieces if len(p) > 1]:
            vocab.setdefault(token, len(vocab))
        merges = [
            [piece[:cut], piece[cut:]]
            for piece in pieces
            for cut in range(1, len(piece))
            if piece[:cut] in vocab and piece[cut:] in vocab
        ]
        spec["model"].update(vocab=vocab, merges=merges)
        spec["added_tokens"] = [t for t in spec["added_tokens"] if t["id"] < 259]

    return _sentencepiece_json(tmp_path, edit)


def test_merges_that_use_later_tokens_follow_tokenizers_order(tmp_path):
    """A converted SentencePiece merge list may use a piece made by a later merge: `tokenizers`
    then merges the pair that makes ahead of the other occurrences of the pair that made it, and
    merging every occurrence of a pair at once would give other ids ([a, bcbc] instead of [abc, bc])."""
    graph, hf = _merge_list_tokenizer(tmp_path, ["bcbc", "abc", "bc"])
    assert hf.encode("abcbc", add_special_tokens=False).tokens == ["abc", "bc"]
    assert _mismatches(graph, hf, ["abcbc", "bcbc abcbcbc", "aabcbcabc", "abcabcbcbc"]) == []


_PIECES = st.lists(st.text("abc", min_size=2, max_size=5), min_size=1, max_size=12, unique=True)


@settings(max_examples=12, deadline=None)
@given(pieces=_PIECES, texts=st.lists(st.text("abc ", max_size=24), min_size=1, max_size=4))
def test_any_merge_order_gives_tokenizers_ids(tmp_path_factory, pieces, texts):
    graph, hf = _merge_list_tokenizer(tmp_path_factory.mktemp("merges"), pieces)
    assert _mismatches(graph, hf, texts) == []


@pytest.mark.parametrize(
    "edit, field",
    [
        (lambda s: s.update(normalizer={"type": "NFKC"}), "normalizer"),
        (
            lambda s: s.update(
                normalizer={
                    "type": "Sequence",
                    "normalizers": [
                        {"type": "Prepend", "prepend": "\u2581"},
                        {"type": "Replace", "pattern": {"Regex": " +"}, "content": "\u2581"},
                    ],
                }
            ),
            "normalizer.normalizers[1]",
        ),
        (
            lambda s: s.update(pre_tokenizer={"type": "Metaspace", "replacement": "_", "prepend_scheme": "always"}),
            "pre_tokenizer",
        ),
        (lambda s: s.update(decoder={"type": "Metaspace", "replacement": "\u2581"}), "decoder"),
        (lambda s: s["model"].update(ignore_merges=True), "model.ignore_merges"),
        (lambda s: s["model"].update(byte_fallback=False), "model.byte_fallback"),
    ],
)
def test_an_unsupported_sentencepiece_style_tokenizer_json_is_refused_naming_the_field(tmp_path, edit, field):
    with pytest.raises(ValueError) as error:
        _sentencepiece_json(tmp_path, edit)
    message = str(error.value)
    assert str(tmp_path / "tokenizer.json") in message and field in message and "\n" not in message


def test_a_tokenizer_json_without_all_byte_tokens_is_refused(tmp_path):
    def edit(spec):
        del spec["model"]["vocab"]["<0x0A>"]

    with pytest.raises(ValueError, match="lacks 1 of the 256 byte-fallback tokens \\(e.g. <0x0A>\\)"):
        _sentencepiece_json(tmp_path, edit, "llama_sp").ids(["x"])


LLAMA3_TEXTS = TEXTS + [
    "x.\n \n  y",
    "Hello\n\n\nWorld\n",
    "it's IT'S We'LL",
    "12345678 9",
    "(abc) [x]\n\n",
    " \tabc",
    "a\r\n\r\nb  \n",
    "end.\n",
    "  \n",
    "\u3000x \u00a0y",
    "xyz xyz",
]


def _llama3_style(spec):
    spec["pre_tokenizer"] = {
        "type": "Sequence",
        "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": byte_level.LLAMA3_PATTERN}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False},
        ],
    }
    spec["model"]["ignore_merges"] = True
    vocab = spec["model"]["vocab"]
    # Merges across the words where Llama 3 and GPT-2 split differently, and a token no merge makes.
    for left, right in ((".", "Ċ"), ("Ġ", "Ċ"), ("Ċ", "Ċ"), ("Ġ", "Ġ")):
        vocab[left + right] = len(vocab)
        spec["model"]["merges"].append([left, right])
    vocab["xyz"] = len(vocab)


@pytest.fixture(scope="module")
def llama3(tmp_path_factory):
    """Llama 3's pre-tokenizer and ignore_merges on the fixture's vocabulary and merges, with `tokenizers` as oracle."""
    directory = _tokenizer_json(tmp_path_factory.mktemp("llama3"), _llama3_style)
    hf = HfTokenizer.from_file(os.path.join(directory, "tokenizer.json"))
    hf.encode_special_tokens = True
    return Graph(directory), hf


def test_llama3_pre_tokenizer_and_ignore_merges_are_reproduced(llama3, tmp_path):
    graph, hf = llama3
    module = graph.tokenizer.graph()  # its graph (with the whole-word lookup) loads in stock TF Serving
    tf.saved_model.save(
        module,
        str(tmp_path),
        signatures=tf.function(
            lambda texts: {"ids": module.tokenize(texts).flat_values},
            input_signature=[tf.TensorSpec([None], tf.string)],
        ),
    )
    assert ops_stock_serving_cannot_load(str(tmp_path)) == set()
    assert _mismatches(graph, hf, LLAMA3_TEXTS) == []
    assert graph.texts(graph.ids(LLAMA3_TEXTS)) == LLAMA3_TEXTS
    # With GPT-2's pre-tokenizer or without ignore_merges, the same vocabulary gives other ids.
    for pre_tokenizer, ignore_merges in ((pre_tokenizers.ByteLevel(add_prefix_space=False), True), (None, False)):
        other = json.loads(hf.to_str())
        other["model"]["ignore_merges"] = ignore_merges
        other = HfTokenizer.from_str(json.dumps(other))
        if pre_tokenizer is not None:
            other.pre_tokenizer = pre_tokenizer
        assert [other.encode(t).ids for t in LLAMA3_TEXTS] != [hf.encode(t).ids for t in LLAMA3_TEXTS]


@settings(max_examples=100, deadline=None)
@given(
    texts=st.lists(
        st.one_of(
            TEXT, SPACEY, st.lists(st.sampled_from(["\n", "\r", " ", ".", "a", "'S", "1234"]), max_size=12).map("".join)
        ),
        min_size=1,
        max_size=6,
    )
)
def test_llama3_style_on_arbitrary_text(llama3, texts):
    graph, hf = llama3
    assert _mismatches(graph, hf, texts) == []
    assert graph.texts(graph.ids(texts)) == texts


DIGIT_TEXTS = TEXTS + ["v1.2.3 and 2024-01-01, 10,000 items at 3.5%", " 12  345\n 6", "x1y22z333 ٣٤ ½ Ⅻ ²", "a 123 12"]


@pytest.mark.parametrize("individual", [True, False], ids=["individual_digits", "digit_runs"])
def test_a_digits_pre_tokenizer_before_byte_level_is_reproduced(tmp_path, individual):
    """Digits (as some GPT-2-style tokenizers put before ByteLevel), checked against `tokenizers`
    with the fixture's vocabulary and merges under that pre-tokenizer."""
    steps = {
        "type": "Sequence",
        "pretokenizers": [
            {"type": "Digits", "individual_digits": individual},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        ],
    }

    def edit(spec):
        spec.update(pre_tokenizer=steps)
        for left, right in (("1", "2"), ("Ġ", "1"), ("12", "3")):  # digit merges, which the fixture lacks
            spec["model"]["vocab"][left + right] = len(spec["model"]["vocab"])
            spec["model"]["merges"].append([left, right])

    directory = _tokenizer_json(tmp_path, edit)
    hf = HfTokenizer.from_file(os.path.join(directory, "tokenizer.json"))
    hf.encode_special_tokens = True
    graph = Graph(directory)
    assert _mismatches(graph, hf, DIGIT_TEXTS) == []
    assert graph.texts(graph.ids(DIGIT_TEXTS)) == DIGIT_TEXTS
    # Without the Digits step the same vocabulary gives other ids: the test can tell them apart.
    plain = HfTokenizer.from_str(hf.to_str())
    plain.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    assert [plain.encode(t).ids for t in DIGIT_TEXTS] != [hf.encode(t).ids for t in DIGIT_TEXTS]


def test_missing_and_broken_tokenizer_files_are_one_line_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match=f"no tokenizer files in {tmp_path}"):
        loaded.load(str(tmp_path))
    (tmp_path / "tokenizer.json").write_text("{not json")
    with pytest.raises(ValueError, match=f"{tmp_path / 'tokenizer.json'} is not valid JSON"):
        loaded.load(str(tmp_path))
    (tmp_path / "tokenizer.json").unlink()  # a tokenizer.json would be read first
    (tmp_path / "tokenizer.model").write_bytes(b"not a model")
    with pytest.raises(ValueError, match=f"{tmp_path / 'tokenizer.model'} is not a SentencePiece model"):
        loaded.load(str(tmp_path))


def test_documents_are_framed_by_the_tokenizers_special_ids():
    from components.trainer.model.decoding import prepare_context
    from components.trainer.model.framing import frame_documents

    tokens = tf.ragged.constant([[7, 8], []], dtype=tf.int64)
    llama = loaded.load(os.path.join(FIXTURES, "llama_sp")).special
    gpt2 = loaded.load(os.path.join(FIXTURES, "gpt2_bpe")).special
    assert frame_documents(tokens, llama).to_list() == [[1, 7, 8, 2], [1, 2]]
    assert frame_documents(tokens, gpt2).to_list() == [[511, 7, 8], [511]]
    assert frame_documents(tokens, special.LEARNED).to_list() == [[1, 7, 8], [1]]
    # Prompts as the tokenizer frames a text; an empty GPT-2 prompt starts from bos, as transformers' generate does.
    assert prepare_context(tokens, 1, llama).to_list() == [[1, 8], [1]]
    assert prepare_context(tokens, 1, gpt2).to_list() == [[8], [511]]
    assert prepare_context(tokens, None, gpt2).to_list() == [[7, 8], [511]]
    assert prepare_context(tokens, 1, special.LEARNED).to_list() == [[1, 8], [1]]
    with_eos = llama._replace(prompt_suffix=(2,))
    assert prepare_context(tokens, 1, with_eos).to_list() == [[1, 8, 2], [1, 2]]


@pytest.fixture(scope="module", params=["gpt2_bpe", "llama_sp_nfkc"])
def checkpoint_export(request, tmp_path_factory):
    """A transform graph made with a checkpoint tokenizer and a tiny backbone's export using it."""
    import tensorflow_transform as tft

    from components.trainer.model.backbone import build_backbone
    from components.trainer.options import GenerationOptions, ModelOptions
    from components.trainer.serving import export
    from components.transform.standalone import analyze_and_transform
    from tests.conftest import TINY_MODEL_KWARGS

    root = tmp_path_factory.mktemp(request.param)
    source = os.path.join(FIXTURES, request.param)
    transform_dir = analyze_and_transform(TEXTS[:6], source, str(root / "transform_graph"), str(root / "transformed"))
    tf.keras.utils.set_random_seed(0)
    backbone = build_backbone(ModelOptions(**TINY_MODEL_KWARGS), loaded.load(source).vocab_size)
    export_dir = str(root / "model")
    generation = GenerationOptions(max_new_tokens=6, temperature=0.0, top_k=0)
    export.export_serving_model(backbone, tft.TFTransformOutput(transform_dir), generation, export_dir)
    return request.param, transform_dir, export_dir


def test_transform_and_export_tokenize_with_the_checkpoint_tokenizer(checkpoint_export):
    import tensorflow_transform as tft

    from components.registry.model_registry import tokenizer_sha256
    from components.trainer.training.warm_start import tokenizer_mismatch

    name, transform_dir, export_dir = checkpoint_export
    hf = _hf(name)
    layer = tft.TFTransformOutput(transform_dir).transform_features_layer()
    transformed = layer({"text": tf.reshape(tf.constant(TEXTS), [-1, 1])})["token_ids"].to_list()
    assert transformed == [hf.encode(text, add_special_tokens=False).ids for text in TEXTS]
    assert ops_stock_serving_cannot_load(export_dir) == set()
    source = loaded.load(os.path.join(FIXTURES, name))
    assert loaded.load(loaded.saved_model_dir(export_dir)).sha256 == source.sha256 == tokenizer_sha256(export_dir)
    assert tokenizer_mismatch(export_dir, source.sha256) == ""
    assert "its tokenizer differs" in tokenizer_mismatch(export_dir, "0" * 64)
    model = tf.saved_model.load(export_dir)
    scored = model.signatures["score"](texts=tf.constant(TEXTS[:3]))
    framing = len(source.special.document_prefix)  # prefix + text + end, every token after the first predicted
    assert scored["num_tokens"].numpy().tolist() == [len(ids) + framing for ids in transformed[:3]]
    generated = model.signatures["serving_default"](prompts=tf.constant(["Hello", "x"]))
    assert generated["generations"].shape == [2]
