"""The SentencePiece tokenizer: learning, the id layout, the graph ops TF Transform exports, round trips."""

import random

import hypothesis.strategies as st
import numpy as np
import pytest
import sentencepiece as spm
import tensorflow as tf
import tensorflow_transform as tft
from hypothesis import given, settings

from components.tokenizer import ids, learn, model_file
from components.tokenizer.graph import GraphTokenizer
from tests.conftest import FIXTURE_VOCAB_SIZE, PROJECT_ROOT, learn_fixture_tokenizer
from tests.curation_corpora import chinese_poems, dialogue

SCRIPTS = [
    "plain ASCII, with punctuation!? and ## hashes # and <0x41> [EOS] [UNK]",
    "  leading and trailing whitespace \n\n\ttabs\r\n",
    "中文文本，日本語のテキスト，한국어 텍스트",
    "emoji 🙂👍🏽 and ZWJ 👩‍👩‍👧",
    "combining e\u0301 and n\u0303, ligature \ufb01 and full-width ＡＢＣ",  # no normalisation
    "עברית ועربية (RTL)",
    "digits 0123456789 and ½",
    "SentencePiece's own space symbol: ▁ ▁▁x▁",
    "NUL \x00 and control \x07 characters",
    "a" * 300 + " " + "9" * 100 + "\t" * 70,
    "",
]


class TransformGraphTokenizer:
    """Tokenizes with the saved transform graph and detokenizes with the model in its assets."""

    def __init__(self, output_dir):
        self.layer = tft.TFTransformOutput(output_dir).transform_features_layer()
        self.model = model_file.read_model(model_file.transform_graph_model_path(output_dir))
        self.detokenizer = GraphTokenizer(self.model.proto)

    def tokenize(self, texts):
        return self.layer({"text": tf.reshape(tf.constant(texts, tf.string), [-1, 1])})

    def round_trip(self, texts):
        token_ids = self.tokenize(texts)["token_ids"]
        return token_ids, [t.decode("utf-8") for t in self.detokenizer.detokenize(token_ids).numpy()]


@pytest.fixture(scope="module")
def graph_tokenizer(transform_artifacts):
    return TransformGraphTokenizer(transform_artifacts[0])


@pytest.mark.parametrize("text", SCRIPTS)
def test_round_trip_is_lossless_for_every_script(graph_tokenizer, text):
    token_ids, decoded = graph_tokenizer.round_trip([text])
    assert decoded == [text]
    assert ids.UNK_ID not in token_ids.flat_values.numpy().tolist()


CJK = st.characters(min_codepoint=0x4E00, max_codepoint=0x9FFF)


@settings(max_examples=80, deadline=None)
@given(st.lists(st.one_of(st.text(), st.text(CJK), st.text(st.sampled_from("▁ a中\n"))), min_size=1, max_size=4))
def test_round_trip_property(graph_tokenizer, texts):
    """Any Unicode text (CJK, SentencePiece's '▁', surrogate-free code points) comes back exactly."""
    token_ids, decoded = graph_tokenizer.round_trip(texts)
    assert decoded == texts
    values = token_ids.flat_values.numpy()
    assert np.all((values >= ids.FIRST_BYTE_ID) & (values < FIXTURE_VOCAB_SIZE))


def test_graph_ids_are_native_sentencepiece_ids(graph_tokenizer):
    """Without a literal '▁' the graph gives exactly what the sentencepiece library gives."""
    native = spm.SentencePieceProcessor(model_proto=graph_tokenizer.model.proto)
    texts = [text for text in SCRIPTS if "▁" not in text]
    token_ids = graph_tokenizer.tokenize(texts)["token_ids"].to_list()
    assert token_ids == native.encode(texts)


def test_statistics_and_compression(graph_tokenizer, transform_artifacts):
    documents = transform_artifacts[2][:4]
    transformed = graph_tokenizer.tokenize(documents)
    total_bytes = sum(len(d.encode("utf-8")) for d in documents)
    assert int(tf.reduce_sum(transformed["num_tokens"])) < total_bytes * 0.6
    assert any(int(t) >= ids.FIRST_LEARNED_ID for t in transformed["token_ids"].flat_values)
    fractions = transformed["byte_token_fraction"].numpy()
    assert np.all((fractions >= 0) & (fractions <= 1)) and fractions[2] > 0  # the CJK and emoji document
    np.testing.assert_allclose(
        transformed["bytes_per_token"].numpy(),
        [len(d.encode()) / n for d, n in zip(documents, transformed["num_tokens"].numpy())],
        rtol=1e-6,
    )


def test_detokenize_drops_special_tokens(graph_tokenizer):
    token_ids = graph_tokenizer.tokenize(["hi"])["token_ids"]
    eos, pad = (tf.ragged.constant([[token]], dtype=tf.int64) for token in (ids.EOS_ID, ids.PAD_ID))
    with_specials = tf.concat([eos, token_ids, eos, pad], axis=1)
    assert graph_tokenizer.detokenizer.detokenize(with_specials).numpy().tolist() == [b"hi"]


def test_the_model_has_the_documented_layout(tokenizer_model):
    model = model_file.read_model(tokenizer_model)
    processor = spm.SentencePieceProcessor(model_file=tokenizer_model)
    assert model.vocab_size == FIXTURE_VOCAB_SIZE and model.algorithm == "bpe"
    assert [processor.id_to_piece(i) for i in range(3)] == [ids.PAD_PIECE, ids.EOS_PIECE, ids.UNK_PIECE]
    assert processor.id_to_piece(ids.byte_id(0x41)) == "<0x41>"
    assert not processor.is_byte(ids.FIRST_LEARNED_ID)


def _bundled_corpus_chunks():
    import glob
    import json

    chunks = []
    for path in sorted(glob.glob(f"{PROJECT_ROOT}/data/corpus/*")):
        with open(path, encoding="utf-8") as handle:
            if path.endswith(".jsonl"):
                documents = [json.loads(line)["text"] for line in handle if line.strip()]
            else:
                documents = handle.read().split("\n\n")
        chunks += [document for document in documents if document.strip()]
    return chunks


def test_learning_reaches_the_configured_size_on_the_bundled_corpus():
    """The default configuration (4,096 BPE pieces) is reached exactly on data/corpus, and learning
    is deterministic (the order of the sample does not matter)."""
    chunks = _bundled_corpus_chunks()
    first = learn.learn_model(chunks, 4096)
    assert model_file.describe(first, "bundled").vocab_size == 4096
    assert learn.learn_model(list(reversed(chunks)), 4096) == first


def test_unigram_is_an_option(tmp_path):
    model = model_file.read_model(
        learn_fixture_tokenizer(str(tmp_path / "u.model"), vocab_size=400, algorithm="unigram")
    )
    assert (model.algorithm, model.vocab_size) == ("unigram", 400)


def test_a_size_the_sample_cannot_support_is_a_clear_error():
    with pytest.raises(learn.VocabularyTooLarge, match=r"tokenizer.vocab_size=5000 .*at most \d+ pieces"):
        learn.learn_model(["a small sample, a small sample"] * 3, 5000)


def test_an_automatic_vocabulary_is_the_largest_the_sample_supports_and_an_explicit_one_stays_strict():
    speeches = dialogue(60)
    with pytest.raises(learn.VocabularyTooLarge, match=r"tokenizer.vocab_size=4096 .*at most (\d+) pieces") as refused:
        learn.learn(speeches, 4096)
    automatic = learn.learn_largest_model(speeches, 4096)
    assert automatic.vocab_size == refused.value.most < 4096
    assert model_file.describe(automatic.proto, "auto").vocab_size == automatic.vocab_size
    with pytest.raises(learn.VocabularyTooLarge, match="fewer than the smallest vocabulary"):
        learn.learn_largest_model(["a tiny sample"], 4096)


def _many_character_text(distinct: int, documents: int, seed: int = 0):
    """Chinese-like text over `distinct` CJK characters with Zipf frequencies (like real text)."""
    rng = random.Random(seed)
    characters = [chr(0x4E00 + index) for index in range(distinct)]
    weights = [1 / (rank + 1) for rank in range(distinct)]
    return ["".join(rng.choices(characters, weights, k=200)) + "。" for _ in range(documents)]


@pytest.mark.parametrize("vocab_size", [512, 4096])
def test_a_sample_with_more_distinct_characters_than_the_vocabulary_learns_and_round_trips(vocab_size):
    """At SentencePiece's coverage (0.9995) this sample needs about 5,000 single-character pieces:
    SentencePiece alone refuses ('Vocabulary size is smaller than required_chars'); the rare
    characters are left to byte fallback instead."""
    texts = _many_character_text(6000, 400) + chinese_poems(50)
    assert len(set("".join(texts))) > vocab_size
    learned = learn.learn(texts, vocab_size)
    assert learned.vocab_size == vocab_size and learned.rare_characters > 0
    processor = spm.SentencePieceProcessor(model_proto=learned.proto)
    for text in (texts[0], texts[-1], "龘"):
        assert processor.decode(processor.encode(text)) == text


def test_sentencepiece_errors_become_errors_that_name_a_setting(monkeypatch):
    def refuse(**_):
        raise RuntimeError("Internal: src/trainer_interface.cc(661) something SentencePiece-internal")

    monkeypatch.setattr(spm.SentencePieceTrainer, "train", refuse)
    with pytest.raises(
        learn.TokenizerLearningError, match=r"could not learn 512 pieces .*: change tokenizer.vocab_size"
    ):
        learn.learn(["some text"], 512)


def test_a_model_without_byte_fallback_is_refused(tmp_path):
    path = str(tmp_path / "plain")
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(_bundled_corpus_chunks()[:200]),
        model_prefix=path,
        vocab_size=250,
        model_type="bpe",
        pad_id=0,
        eos_id=1,
        unk_id=2,
        bos_id=-1,
        minloglevel=2,
    )
    with pytest.raises(ValueError, match=rf"{path}.model: no byte-fallback pieces"):
        model_file.read_model(path + ".model")
    with pytest.raises(FileNotFoundError, match=r"missing.model does not exist"):
        model_file.read_model(str(tmp_path / "missing.model"))
    (tmp_path / "junk.model").write_bytes(b"junk")
    with pytest.raises(ValueError, match="junk.model is not a SentencePiece model"):
        model_file.read_model(str(tmp_path / "junk.model"))
