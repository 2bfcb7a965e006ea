"""Eval-split perplexity of exported models, computed with Beam, and the quality gate it drives.

The Beam pipeline reads the transformed eval shards, packs each shard's token stream into blocks
of `context_length + 1` tokens exactly as the Trainer does (`components.trainer.data`), spreads the
blocks over workers and scores them with the model's `score_tokens` signature; each worker loads
the model once, in `DoFn.setup`. Token-weighted perplexity = exp(sum NLL / sum tokens).

Packing is per shard, so at most one partial block per shard is left unscored (the Trainer's
single-stream packing leaves one per split); with one shard the numbers are identical.
"""
import json
import math
import os
import tempfile
from typing import Dict, Iterable, NamedTuple, Optional

import apache_beam as beam
import numpy as np
import tensorflow as tf

from components.evaluator.gates import GateResult
from components.evaluator.model_client import ModelClient
from components.trainer import data


class PerplexityResult(NamedTuple):
    """Token-weighted perplexity over the evaluated blocks."""

    perplexity: float
    mean_nll: float
    num_tokens: int


class BlessingDecision(NamedTuple):
    blessed: bool
    reason: str


class _PackBlocks(beam.DoFn):
    """One eval shard -> batches ([B, L+1] int64 arrays) of packed blocks."""

    def __init__(self, feature_spec, context_length: int, batch_size: int):
        self._feature_spec = feature_spec
        self._context_length = context_length
        self._batch_size = batch_size

    def process(self, path: str) -> Iterable[np.ndarray]:
        for inputs, targets in data.packed_blocks(path, self._feature_spec, self._context_length, self._batch_size):
            yield tf.concat([inputs, targets[:, -1:]], axis=1).numpy()


class _ScoreBlocks(beam.DoFn):
    """A batch of blocks -> (summed NLL, token count), with the model loaded once per worker."""

    def __init__(self, saved_model_dir: str):
        self._saved_model_dir = saved_model_dir
        self._client: Optional[ModelClient] = None

    def setup(self):
        self._client = ModelClient(self._saved_model_dir)

    def process(self, blocks: np.ndarray):
        yield self._client.score_tokens(blocks)


def _sum_pairs(pairs: Iterable) -> tuple:
    nll, tokens = 0.0, 0
    for pair_nll, pair_tokens in pairs:
        nll, tokens = nll + pair_nll, tokens + pair_tokens
    return nll, tokens


def eval_split_perplexities(
    models: Dict[str, str],
    file_patterns,
    feature_spec,
    batch_size: int = 16,
    beam_pipeline: Optional[beam.Pipeline] = None,
) -> Dict[str, PerplexityResult]:
    """Perplexity of each model in `models` ({name: SavedModel dir}) on the same eval examples.

    `feature_spec` is the Transform graph's transformed feature spec. `beam_pipeline` (not yet
    run) carries the runner options; a DirectRunner pipeline is used when it is None.
    """
    patterns = [file_patterns] if isinstance(file_patterns, str) else list(file_patterns)
    files = sorted(path for pattern in patterns for path in tf.io.gfile.glob(pattern))
    if not files:
        raise FileNotFoundError(f"no transformed examples match {patterns}")
    context_lengths = {name: ModelClient(path).context_length for name, path in models.items()}
    pipeline = beam_pipeline if beam_pipeline is not None else beam.Pipeline()
    with tempfile.TemporaryDirectory(prefix="perplexity-") as scratch:
        with pipeline as p:
            shards = p | "EvalShards" >> beam.Create(files)
            for name, path in models.items():
                (
                    shards
                    | f"Pack[{name}]" >> beam.ParDo(_PackBlocks(feature_spec, context_lengths[name], batch_size))
                    | f"Spread[{name}]" >> beam.Reshuffle()
                    | f"Score[{name}]" >> beam.ParDo(_ScoreBlocks(path))
                    | f"Sum[{name}]" >> beam.CombineGlobally(_sum_pairs)
                    | f"Json[{name}]" >> beam.Map(json.dumps)
                    | f"Write[{name}]" >> beam.io.WriteToText(os.path.join(scratch, name), shard_name_template="")
                )
        results = {}
        for name in models:
            with open(os.path.join(scratch, name), encoding="utf-8") as handle:
                total_nll, total_tokens = json.loads(handle.read())
            if total_tokens == 0:
                raise ValueError(
                    f"the eval split {patterns} holds fewer than {context_lengths[name] + 1} tokens per shard: "
                    "nothing to evaluate"
                )
            mean_nll = total_nll / total_tokens
            results[name] = PerplexityResult(math.exp(mean_nll), mean_nll, total_tokens)
    return results


def eval_split_perplexity(saved_model_dir: str, file_patterns, feature_spec, batch_size: int = 16,
                          beam_pipeline: Optional[beam.Pipeline] = None) -> PerplexityResult:
    """Perplexity of one model; see `eval_split_perplexities`."""
    return eval_split_perplexities({"candidate": saved_model_dir}, file_patterns, feature_spec, batch_size, beam_pipeline)["candidate"]


def decide_blessing(perplexity: float, max_perplexity: float) -> BlessingDecision:
    """Blessed only when perplexity is finite and strictly below the threshold."""
    if not math.isfinite(perplexity):
        return BlessingDecision(False, f"perplexity is {perplexity}")
    if perplexity < max_perplexity:
        return BlessingDecision(True, f"perplexity {perplexity:.3f} < threshold {max_perplexity:.3f}")
    return BlessingDecision(False, f"perplexity {perplexity:.3f} >= threshold {max_perplexity:.3f}")


def perplexity_gate(perplexity: float, max_perplexity: float) -> GateResult:
    """The absolute quality gate."""
    decision = decide_blessing(perplexity, max_perplexity)
    return GateResult("quality.perplexity", perplexity, max_perplexity, decision.blessed, decision.reason, "<")


def perplexity_change_gate(candidate: float, baseline: Optional[float], max_increase: float,
                           skip_reason: str = "") -> GateResult:
    """The change gate: candidate perplexity may exceed the baseline's by at most `max_increase` (relative)."""
    name = "quality.perplexity_change"
    if baseline is None:
        return GateResult.skip(name, max_increase, skip_reason or "no baseline")
    change = candidate / baseline - 1.0 if baseline > 0 else math.inf
    passed = math.isfinite(change) and change <= max_increase
    verb = "<=" if passed else ">"
    reason = (f"perplexity {candidate:.3f} vs baseline {baseline:.3f}: change {change:+.1%} {verb} "
              f"allowed {max_increase:+.1%}")
    return GateResult(name, change, max_increase, passed, reason, "<=")
