"""Op allow-list: the transform graph and the serving model load in stock TF Serving 2.16."""

import os

import pytest

from components.trainer.serving.compat import ops_stock_serving_cannot_load, saved_model_op_types


def test_transform_graph_uses_only_serving_safe_ops(transform_artifacts):
    transform_fn = os.path.join(transform_artifacts[0], "transform_fn")
    ops = saved_model_op_types(transform_fn)
    assert {"SentencepieceOp", "SentencepieceTokenizeOp"} <= ops
    assert ops_stock_serving_cannot_load(transform_fn) == set()


def test_serving_model_uses_only_serving_safe_ops(exported_model):
    assert ops_stock_serving_cannot_load(exported_model[1]) == set()


def test_the_check_catches_an_op_stock_serving_lacks(tmp_path):
    import tensorflow as tf
    import tensorflow_text as tf_text

    class ByteSplit(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
        def split(self, texts):
            return tf_text.ByteSplitter().split(texts).flat_values

    tf.saved_model.save(ByteSplit(), str(tmp_path))
    assert ops_stock_serving_cannot_load(str(tmp_path)) == {"TFText>ByteSplitWithOffsets"}


@pytest.mark.parametrize("variant", [{"weight_quantization": "int8"}, {"jit_compile": True}], ids=["int8", "xla"])
def test_the_int8_and_xla_exports_use_only_serving_safe_ops(tiny_backbone, transform_artifacts, tmp_path, variant):
    import tensorflow_transform as tft

    from components.trainer.options import GenerationOptions
    from components.trainer.serving import export

    generation = GenerationOptions(max_new_tokens=8, temperature=0.0, top_k=0, **variant)
    export.export_serving_model(tiny_backbone, tft.TFTransformOutput(transform_artifacts[0]), generation, str(tmp_path))
    assert ops_stock_serving_cannot_load(str(tmp_path)) == set()


def test_the_default_export_writes_the_cache_in_place(exported_model):
    # InplaceUpdate is a core op (in the allow-list above); the XLA export uses a scatter instead.
    assert "InplaceUpdate" in saved_model_op_types(exported_model[1])


HF_TOKENIZERS = os.path.join(os.path.dirname(__file__), "fixtures", "hf", "tokenizers")
ROUND_TRIP = ["Hello  world\n", "\n\n  x", "東京 👩‍👩‍👧 e\u0301", "trailing  ", ""]


@pytest.mark.parametrize("name", ["gpt2_bpe", "llama_sp"])
def test_checkpoint_tokenizer_graphs_use_only_serving_safe_ops(tmp_path, name):
    """A checkpoint's tokenizer (byte-level BPE: regex split, while_loop, binary search; SentencePiece:
    TF Text op) saved in a SavedModel loads in stock TF Serving and round-trips after loading."""
    import tensorflow as tf

    from components.tokenizer import loaded

    module = loaded.load(os.path.join(HF_TOKENIZERS, name)).graph()

    class Served(tf.Module):
        def __init__(self):
            super().__init__()
            self.tokenizer = module

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
        def round_trip(self, texts):
            return self.tokenizer.detokenize(self.tokenizer.tokenize(texts))

    served = Served()
    tf.saved_model.save(served, str(tmp_path))
    assert ops_stock_serving_cannot_load(str(tmp_path)) == set()
    restored = tf.saved_model.load(str(tmp_path))
    assert [t.decode() for t in restored.round_trip(tf.constant(ROUND_TRIP)).numpy()] == ROUND_TRIP
