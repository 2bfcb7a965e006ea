"""Eval-split perplexity of an exported model, and the blessing decision it drives."""
import math
from typing import NamedTuple

import tensorflow as tf

from components.trainer import data


class PerplexityResult(NamedTuple):
    """Token-weighted perplexity over the evaluated blocks."""

    perplexity: float
    mean_nll: float
    num_tokens: int


class BlessingDecision(NamedTuple):
    blessed: bool
    reason: str


def eval_split_perplexity(saved_model_dir: str, file_patterns, feature_spec, batch_size: int = 16) -> PerplexityResult:
    """Scores every packed block of the transformed examples with the model's `score_tokens`.

    `feature_spec` is the transformed feature spec from the Transform graph.
    """
    model = tf.saved_model.load(saved_model_dir)
    score_tokens = model.signatures["score_tokens"]
    context_length = int(model.context_length.numpy())
    total_nll, total_tokens = 0.0, 0
    for inputs, targets in data.packed_blocks(file_patterns, feature_spec, context_length, batch_size):
        blocks = tf.concat([inputs, targets[:, -1:]], axis=1)
        scores = score_tokens(blocks=blocks)
        total_nll += float(tf.reduce_sum(scores["nll_sum"]))
        total_tokens += int(tf.reduce_sum(scores["num_tokens"]))
    if total_tokens == 0:
        raise ValueError(
            f"the eval split {file_patterns} holds fewer than {context_length + 1} tokens: nothing to evaluate"
        )
    mean_nll = total_nll / total_tokens
    return PerplexityResult(math.exp(mean_nll), mean_nll, total_tokens)


def decide_blessing(perplexity: float, max_perplexity: float) -> BlessingDecision:
    """Blessed only when perplexity is finite and strictly below the threshold."""
    if not math.isfinite(perplexity):
        return BlessingDecision(False, f"perplexity is {perplexity}")
    if perplexity < max_perplexity:
        return BlessingDecision(True, f"perplexity {perplexity:.3f} < threshold {max_perplexity:.3f}")
    return BlessingDecision(False, f"perplexity {perplexity:.3f} >= threshold {max_perplexity:.3f}")
