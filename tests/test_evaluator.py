"""The evaluator: perplexity on packed eval blocks and the blessing decision, both directions."""
import math

import pytest
import tensorflow as tf
import tensorflow_transform as tft

from components.evaluator.perplexity import decide_blessing, eval_split_perplexity
from tests.conftest import FIXTURE_VOCAB_SIZE


@pytest.mark.parametrize(
    "perplexity, threshold, blessed",
    [(5.0, 12.0, True), (11.999, 12.0, True), (12.0, 12.0, False), (40.0, 12.0, False), (math.nan, 12.0, False), (math.inf, 12.0, False)],
)
def test_blessing_decision(perplexity, threshold, blessed):
    decision = decide_blessing(perplexity, threshold)
    assert decision.blessed is blessed
    assert str(threshold)[:2] in decision.reason or "perplexity is" in decision.reason


def test_untrained_model_is_near_uniform_and_is_blocked_by_a_real_threshold(exported_model, transform_artifacts):
    """A random model's perplexity is close to the vocabulary size: blocked at 12, passed at 1000."""
    model_dir = exported_model[1]
    output_dir, examples, documents = transform_artifacts
    spec = tft.TFTransformOutput(output_dir).transformed_feature_spec()
    result = eval_split_perplexity(model_dir, examples, spec, batch_size=4)
    output = tft.TFTransformOutput(output_dir)
    transformed = output.transform_features_layer()({"text": tf.reshape(tf.constant(documents), [-1, 1])})
    total_tokens = int(tf.reduce_sum(transformed["num_tokens"])) + len(documents)  # + one EOS each
    assert result.num_tokens == (total_tokens // 33) * 32  # whole packed blocks of context 32
    vocab_size = FIXTURE_VOCAB_SIZE
    assert vocab_size / 4 < result.perplexity < vocab_size * 4
    assert not decide_blessing(result.perplexity, 12.0).blessed
    assert decide_blessing(result.perplexity, 1000.0).blessed


def test_missing_eval_examples_are_a_clear_error(exported_model, tmp_path, transform_artifacts):
    output_dir, _, _ = transform_artifacts
    spec = tft.TFTransformOutput(output_dir).transformed_feature_spec()
    with pytest.raises(FileNotFoundError, match="no transformed examples"):
        eval_split_perplexity(exported_model[1], str(tmp_path / "none*"), spec)
