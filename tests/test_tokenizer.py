"""The learned byte-level WordPiece tokenizer, through the graph TF Transform exports."""
import hypothesis.strategies as st
import numpy as np
import pytest
import tensorflow as tf
import tensorflow_transform as tft
from hypothesis import given, settings

from components.transform import tokenizer, vocabulary

SCRIPTS = [
    "plain ASCII, with punctuation!? and ## hashes #",
    "  leading and trailing whitespace \n\n\ttabs\r\n",
    "中文文本，日本語のテキスト",
    "emoji 🙂👍🏽 and ZWJ 👩‍👩‍👧",
    "combining e\u0301 and n\u0303",
    "עברית ועربية (RTL)",
    "digits 0123456789 and ½",
    "a" * 300 + " " + "9" * 100 + "\t" * 70,
    "",
]


class TransformGraphTokenizer:
    """Tokenizes with the saved transform graph and detokenizes with its vocabulary asset."""

    def __init__(self, output_dir):
        output = tft.TFTransformOutput(output_dir)
        self.layer = output.transform_features_layer()
        self.vocabulary_file = output.vocabulary_file_by_name(tokenizer.VOCABULARY_ASSET_NAME)
        self.id_to_piece = tokenizer.id_to_piece_table(self.vocabulary_file)

    def tokenize(self, texts):
        return self.layer({"text": tf.reshape(tf.constant(texts, tf.string), [-1, 1])})

    def round_trip(self, texts):
        ids = self.tokenize(texts)["token_ids"]
        return ids, [t.decode("utf-8") for t in tokenizer.detokenize(ids, self.id_to_piece).numpy()]


@pytest.fixture(scope="module")
def graph_tokenizer(transform_artifacts):
    return TransformGraphTokenizer(transform_artifacts[0])


@pytest.mark.parametrize("text", SCRIPTS)
def test_round_trip_is_lossless_for_every_script(graph_tokenizer, text):
    ids, decoded = graph_tokenizer.round_trip([text])
    assert decoded == [text]
    assert tokenizer.UNK_ID not in ids.flat_values.numpy().tolist()


@settings(max_examples=80, deadline=None)
@given(st.lists(st.text(), min_size=1, max_size=4))
def test_round_trip_property(graph_tokenizer, texts):
    ids, decoded = graph_tokenizer.round_trip(texts)
    assert decoded == texts
    values = ids.flat_values.numpy()
    assert np.all((values >= len(tokenizer.SPECIAL_TOKENS)) & (values < 560))


def test_learned_pieces_compress_the_training_text(graph_tokenizer, transform_artifacts):
    documents = transform_artifacts[2]
    transformed = graph_tokenizer.tokenize(documents[:4])
    total_bytes = sum(len(d.encode("utf-8")) for d in documents[:4])
    assert int(tf.reduce_sum(transformed["num_tokens"])) < total_bytes * 0.75
    assert any(int(t) >= tokenizer.NUM_BASE_TOKENS for t in transformed["token_ids"].flat_values)
    fractions = transformed["byte_token_fraction"].numpy()
    assert np.all((fractions >= 0) & (fractions <= 1))


def test_vocabulary_file_layout(graph_tokenizer):
    with open(graph_tokenizer.vocabulary_file, encoding="utf-8") as handle:
        pieces = handle.read().splitlines()
    assert pieces[: tokenizer.NUM_BASE_TOKENS] == tokenizer.base_vocabulary()
    assert len(pieces) == len(set(pieces)) and 515 < len(pieces) <= 560
    assert all(piece and not any(c.isspace() for c in piece) for piece in pieces)


def test_learning_is_deterministic_and_respects_the_size():
    counts = [("Ġthe", 50), ("Ġcat", 20), ("Ġcats", 15), ("Ġcatalogue", 3), ("the", 9), ("Ġhat", 12)]
    first = vocabulary.learned_pieces(counts, 530)
    assert first == vocabulary.learned_pieces(list(reversed(counts)), 530)
    assert first[: tokenizer.NUM_BASE_TOKENS] == tokenizer.base_vocabulary()
    assert 515 < len(first) <= 530
    assert vocabulary.learned_pieces(counts, 515) == tokenizer.base_vocabulary()


def test_detokenize_drops_special_tokens(graph_tokenizer):
    ids = graph_tokenizer.tokenize(["hi"])["token_ids"]
    eos, pad = (tf.ragged.constant([[token]], dtype=tf.int64) for token in (tokenizer.EOS_ID, tokenizer.PAD_ID))
    with_specials = tf.concat([eos, ids, pad], axis=1)
    assert tokenizer.detokenize(with_specials, graph_tokenizer.id_to_piece).numpy().tolist() == [b"hi"]


def test_two_analyze_runs_learn_byte_identical_vocabularies(tmp_path):
    from components.example_gen.readers import read_txt_documents
    from components.transform.standalone import analyze_and_transform
    from tests.conftest import BUNDLED_TXT

    documents = [d.text for _, d in zip(range(300), read_txt_documents(BUNDLED_TXT))]
    files = []
    for run in ("first", "second"):
        output = tft.TFTransformOutput(analyze_and_transform(documents, 1024, str(tmp_path / run)))
        with open(output.vocabulary_file_by_name(tokenizer.VOCABULARY_ASSET_NAME), "rb") as handle:
            files.append(handle.read())
    assert files[0] == files[1]
    assert len(files[0].splitlines()) > tokenizer.NUM_BASE_TOKENS + 100  # it really learned pieces
