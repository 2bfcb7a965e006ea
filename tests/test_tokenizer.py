"""The tokenizer, directly and through the saved TF Transform graph."""
import hypothesis.strategies as st
import numpy as np
import pytest
import tensorflow as tf
import tensorflow_transform as tft
from hypothesis import given, settings

from components.transform import tokenizer

SCRIPTS = [
    "plain ASCII, with punctuation!?",
    "  leading and trailing whitespace \n\n\ttabs\r\n",
    "中文文本，日本語のテキスト",
    "emoji 🙂👍🏽 and ZWJ 👩‍👩‍👧",
    "combining e\u0301 and n\u0303",
    "עברית ועربية (RTL)",
    "digits 0123456789 and ½",
    "",
]


@pytest.mark.parametrize("text", SCRIPTS)
def test_round_trip_is_lossless(text):
    ids = tokenizer.tokenize(tf.constant([text]))
    assert tokenizer.detokenize(ids).numpy()[0].decode("utf-8") == text
    assert ids.row_lengths().numpy()[0] == len(text.encode("utf-8"))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.text(), min_size=1, max_size=4))
def test_round_trip_property(texts):
    ids = tokenizer.tokenize(tf.constant(texts))
    values = ids.flat_values.numpy()
    assert np.all((values >= tokenizer.BYTE_OFFSET) & (values < tokenizer.VOCAB_SIZE))
    decoded = [value.decode("utf-8") for value in tokenizer.detokenize(ids).numpy()]
    assert decoded == texts


def test_detokenize_drops_special_tokens():
    ids = tf.ragged.constant([[tokenizer.EOS_ID, ord("h") + tokenizer.BYTE_OFFSET, tokenizer.PAD_ID, ord("i") + tokenizer.BYTE_OFFSET]])
    assert tokenizer.detokenize(ids).numpy().tolist() == [b"hi"]


def test_transform_graph_tokenizes_like_the_module(transform_artifacts):
    output_dir, _, documents = transform_artifacts
    layer = tft.TFTransformOutput(output_dir).transform_features_layer()
    texts = tf.constant(SCRIPTS + documents[:3])
    transformed = layer({"text": tf.reshape(texts, [-1, 1])})
    expected = tokenizer.tokenize(texts)
    np.testing.assert_array_equal(transformed["token_ids"].flat_values.numpy(), expected.flat_values.numpy())
    np.testing.assert_array_equal(transformed["num_tokens"].numpy(), expected.row_lengths().numpy())
    assert [t.decode("utf-8") for t in tokenizer.detokenize(transformed["token_ids"]).numpy()] == SCRIPTS + documents[:3]
