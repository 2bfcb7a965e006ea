"""Eval-split quality of exported models, computed with Beam, and the quality gates it drives.

Two measures, computed in one Beam pipeline:

- **Perplexity per token** of the candidate: the transformed eval shards (the candidate's own
  tokens) are packed into blocks of `context_length + 1` tokens exactly as the Trainer does
  (`components.trainer.training.data`) and scored with `score_tokens`. Token-weighted perplexity =
  exp(sum NLL / sum tokens). Packing is per shard, so at most one partial block per shard is left
  unscored (the Trainer's single-stream packing leaves one per split).
- **Bits per byte** of every model (candidate and baseline): the RAW eval text is scored with
  each model's own `score` signature, which tokenizes with that model's tokenizer and covers each
  whole document. Bits per byte = sum over documents of the NLL (in bits) of the document's tokens
  and its closing end-of-document token, divided by the documents' UTF-8 bytes. It does not depend
  on the tokenizer, so a candidate and a baseline with different vocabularies compare on one scale;
  the change gate uses it. Per-token perplexity of each model on the same text comes with it.

- **A unigram reference** learned from the train split in the candidate's own tokens: each
  token's frequency there (add-one-half smoothed over the vocabulary seen in either split) is a
  model that knows which pieces are common and nothing about context. Its NLL per token on the
  eval token stream is the trivial baseline the relative quality gate compares the candidate
  with: a model that did not beat it learned nothing from context, whatever the corpus, script
  or vocabulary.

Each worker process loads a SavedModel once (`model_client.load_saved_model`, in `DoFn.setup`),
and every step that scores with it shares that copy: the candidate's packed and raw-text scoring
and the Evaluator's later probes hold one copy between them. At 1.1B a SavedModel is 4.2 GB in
float32, and three copies of it beside the run's other state did not fit in 24 GiB.
"""

import json
import math
import os
import tempfile
from typing import Any, Dict, Iterable, List, NamedTuple, Optional

import apache_beam as beam
import numpy as np
import tensorflow as tf

from components.evaluator.gates import GateResult
from components.example_gen.examples import document_texts
from components.file_patterns import matching_files
from components.model_client import ModelClient
from components.tokenizer.special import LEARNED, SpecialTokens
from components.trainer.training import data
from components.transform.preprocessing import RAW_TEXT_KEY


class PerplexityResult(NamedTuple):
    """Token-weighted perplexity over the evaluated blocks."""

    perplexity: float
    mean_nll: float
    num_tokens: int


class BitsPerByteResult(NamedTuple):
    """One model's cost of the raw eval text: summed NLL (nats) over its own tokens, and bytes."""

    nll_sum: float
    num_tokens: int
    num_bytes: int

    @property
    def bits_per_byte(self) -> float:
        return self.nll_sum / math.log(2) / self.num_bytes

    @property
    def perplexity(self) -> float:
        """Per token of this model's own tokenizer."""
        return math.exp(self.nll_sum / self.num_tokens)


class UnigramReference(NamedTuple):
    """A train-split unigram model's NLL per token (nats) on the eval token stream."""

    mean_nll: float
    train_tokens: int
    eval_tokens: int

    @property
    def perplexity(self) -> float:
        return math.exp(self.mean_nll)


def unigram_reference(train_counts: np.ndarray, eval_counts: np.ndarray) -> UnigramReference:
    """The unigram cross-entropy of `eval_counts` (token id -> count) under `train_counts`,
    add-one-half smoothed over the ids seen in either split."""
    size = max(len(train_counts), len(eval_counts))
    train = np.pad(np.asarray(train_counts, float), (0, size - len(train_counts)))
    held_out = np.pad(np.asarray(eval_counts, float), (0, size - len(eval_counts)))
    probabilities = (train + 0.5) / (train.sum() + 0.5 * size)
    eval_tokens = held_out.sum()
    mean_nll = float(-(held_out * np.log(probabilities)).sum() / eval_tokens) if eval_tokens else math.nan
    return UnigramReference(mean_nll, int(train.sum()), int(eval_tokens))


class _CountTokens(beam.DoFn):
    """One transformed shard -> its token counts (index = token id), documents framed by the
    tokenizer's special ids as the packed blocks have them."""

    def __init__(self, feature_spec, special: SpecialTokens = LEARNED):
        self._feature_spec = feature_spec
        self._special = special

    def process(self, path: str) -> Iterable[np.ndarray]:
        counts = np.zeros(0, np.int64)
        for batch in data.token_stream(path, self._feature_spec, self._special).batch(65536):
            ids = batch.numpy()
            counts = _add_counts(counts, np.bincount(ids))
        yield counts


def _add_counts(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    size = max(len(a), len(b))
    return np.pad(a, (0, size - len(a))) + np.pad(b, (0, size - len(b)))


def _sum_counts(arrays: Iterable[np.ndarray]) -> np.ndarray:
    total = np.zeros(0, np.int64)
    for counts in arrays:
        total = _add_counts(total, counts)
    return total


class BlessingDecision(NamedTuple):
    blessed: bool
    reason: str


class _PackBlocks(beam.DoFn):
    """One eval shard -> batches ([B, L+1] int64 arrays) of packed blocks."""

    def __init__(self, feature_spec, context_length: int, batch_size: int, special: SpecialTokens = LEARNED):
        self._feature_spec = feature_spec
        self._context_length = context_length
        self._batch_size = batch_size
        self._special = special

    def process(self, path: str) -> Iterable[np.ndarray]:
        for inputs, targets in data.packed_blocks(
            path, self._feature_spec, self._context_length, self._batch_size, special=self._special
        ):
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


class _ScoreTexts(beam.DoFn):
    """A batch of raw texts -> (summed NLL, tokens, UTF-8 bytes) under one model's own tokenizer."""

    def __init__(self, saved_model_dir: str, batch_size: int):
        self._saved_model_dir = saved_model_dir
        self._batch_size = batch_size
        self._client: Optional[ModelClient] = None

    def setup(self):
        self._client = ModelClient(self._saved_model_dir, self._batch_size)

    def process(self, texts: List[str]):
        scores = self._client.score(texts)
        yield (
            float(np.sum(scores.total_nll)),
            int(np.sum(scores.num_tokens)),
            sum(len(t.encode("utf-8")) for t in texts),
        )


def _sum_tuples(tuples: Iterable) -> tuple:
    total = None
    for values in tuples:
        total = values if total is None else tuple(a + b for a, b in zip(total, values))
    return total if total is not None else []  # no input: read back as zeros


class QualityRequest(NamedTuple):
    """What to measure: packed perplexity of `packed_models` on the transformed eval examples, bits
    per byte of `text_models` on the raw eval examples ({name: SavedModel dir} each)."""

    packed_models: Dict[str, str]
    eval_files: Any
    feature_spec: Any
    text_models: Dict[str, str]
    raw_eval_files: Any = ()
    batch_size: int = 16
    text_batch_size: int = 16
    train_files: Any = ()  # transformed train examples: the unigram reference (none when empty)
    special: SpecialTokens = LEARNED  # the tokenizer's document framing (tokenizer/special.py)


def measure_quality(request: QualityRequest, beam_pipeline: Optional[beam.Pipeline] = None):
    """({name: PerplexityResult}, {name: BitsPerByteResult}, UnigramReference or None) for
    `request`, in one Beam pipeline.

    `beam_pipeline` (not yet run) carries the runner options; a DirectRunner pipeline is used when
    it is None.
    """
    pipeline = beam_pipeline if beam_pipeline is not None else beam.Pipeline()
    with tempfile.TemporaryDirectory(prefix="quality-") as scratch:
        with pipeline as p:
            if request.packed_models:
                context_lengths = {
                    name: ModelClient(path).context_length for name, path in request.packed_models.items()
                }
                shards = p | "EvalShards" >> beam.Create(matching_files(request.eval_files, "transformed examples"))
                for name, path in request.packed_models.items():
                    _ = (
                        shards
                        | f"Pack[{name}]"
                        >> beam.ParDo(
                            _PackBlocks(
                                request.feature_spec, context_lengths[name], request.batch_size, request.special
                            )
                        )
                        | f"Spread[{name}]" >> beam.Reshuffle()
                        | f"Score[{name}]" >> beam.ParDo(_ScoreBlocks(path))
                        | f"Sum[{name}]" >> beam.CombineGlobally(_sum_tuples)
                        | f"Json[{name}]" >> beam.Map(json.dumps)
                        | f"Write[{name}]"
                        >> beam.io.WriteToText(os.path.join(scratch, "packed-" + name), shard_name_template="")
                    )
            if request.train_files:
                for split, files in (("train", request.train_files), ("eval", request.eval_files)):
                    _ = (
                        p
                        | f"Shards[{split}]" >> beam.Create(matching_files(files, f"transformed {split} examples"))
                        | f"Count[{split}]" >> beam.ParDo(_CountTokens(request.feature_spec, request.special))
                        | f"SumCounts[{split}]" >> beam.CombineGlobally(_sum_counts)
                        | f"JsonCounts[{split}]" >> beam.Map(lambda counts: json.dumps(counts.tolist()))
                        | f"WriteCounts[{split}]"
                        >> beam.io.WriteToText(os.path.join(scratch, "counts-" + split), shard_name_template="")
                    )
            if request.text_models:
                texts = (
                    p
                    | "RawEvalFiles" >> beam.Create(matching_files(request.raw_eval_files, "raw eval examples"))
                    | "ReadRaw"
                    >> beam.io.ReadAllFromTFRecord(compression_type=beam.io.filesystem.CompressionTypes.GZIP)
                    | "Texts" >> beam.FlatMap(document_texts, RAW_TEXT_KEY)
                    | "BatchTexts" >> beam.BatchElements(min_batch_size=1, max_batch_size=request.text_batch_size)
                )
                for name, path in request.text_models.items():
                    _ = (
                        texts
                        | f"ScoreText[{name}]" >> beam.ParDo(_ScoreTexts(path, request.text_batch_size))
                        | f"SumText[{name}]" >> beam.CombineGlobally(_sum_tuples)
                        | f"JsonText[{name}]" >> beam.Map(json.dumps)
                        | f"WriteText[{name}]"
                        >> beam.io.WriteToText(os.path.join(scratch, "text-" + name), shard_name_template="")
                    )
        perplexities, bits = {}, {}
        for name in request.packed_models:
            total_nll, total_tokens = _read_json(os.path.join(scratch, "packed-" + name)) or (0.0, 0)
            if total_tokens == 0:
                raise ValueError(
                    f"the eval split {request.eval_files} holds fewer than {context_lengths[name] + 1} "
                    "tokens per shard: nothing to evaluate"
                )
            mean_nll = total_nll / total_tokens
            perplexities[name] = PerplexityResult(math.exp(mean_nll), mean_nll, total_tokens)
        for name in request.text_models:
            result = BitsPerByteResult(*(_read_json(os.path.join(scratch, "text-" + name)) or (0.0, 0, 0)))
            if result.num_bytes == 0:
                raise ValueError(f"the raw eval split {request.raw_eval_files} holds no text: nothing to evaluate")
            bits[name] = result
        unigram = None
        if request.train_files:
            unigram = unigram_reference(
                *(
                    np.asarray(_read_json(os.path.join(scratch, "counts-" + split)), np.int64)
                    for split in ("train", "eval")
                )
            )
    return perplexities, bits, unigram


def _read_json(path: str):
    with open(path, encoding="utf-8") as handle:
        return json.loads(handle.read())


def eval_split_perplexities(
    models: Dict[str, str],
    file_patterns,
    feature_spec,
    batch_size: int = 16,
    beam_pipeline: Optional[beam.Pipeline] = None,
) -> Dict[str, PerplexityResult]:
    """Perplexity of each model in `models` ({name: SavedModel dir}) on the same transformed eval
    examples (tokens of one tokenizer: only comparable between models that share it).

    `feature_spec` is the Transform graph's transformed feature spec.
    """
    return measure_quality(QualityRequest(models, file_patterns, feature_spec, {}, (), batch_size), beam_pipeline)[0]


def eval_split_perplexity(
    saved_model_dir: str,
    file_patterns,
    feature_spec,
    batch_size: int = 16,
    beam_pipeline: Optional[beam.Pipeline] = None,
) -> PerplexityResult:
    """Perplexity of one model; see `eval_split_perplexities`."""
    return eval_split_perplexities(
        {"candidate": saved_model_dir}, file_patterns, feature_spec, batch_size, beam_pipeline
    )["candidate"]


def decide_blessing(perplexity: float, max_perplexity: float) -> BlessingDecision:
    """Blessed only when perplexity is finite and strictly below the threshold."""
    if not math.isfinite(perplexity):
        return BlessingDecision(False, f"perplexity is {perplexity}")
    if perplexity < max_perplexity:
        return BlessingDecision(True, f"perplexity {perplexity:.3f} < threshold {max_perplexity:.3f}")
    return BlessingDecision(False, f"perplexity {perplexity:.3f} >= threshold {max_perplexity:.3f}")


def perplexity_gate(perplexity: float, max_perplexity: Optional[float]) -> GateResult:
    """The absolute quality gate; with no threshold the perplexity is reported, not gated (a
    per-token perplexity means one thing for one tokenizer and script, another for the next)."""
    name = "quality.perplexity"
    if max_perplexity is None:
        return GateResult(
            name,
            perplexity,
            0.0,
            math.isfinite(perplexity),
            f"perplexity {perplexity:.3f} reported; not gated (evaluator.max_perplexity unset)",
            "<",
            skipped=math.isfinite(perplexity),
        )
    decision = decide_blessing(perplexity, max_perplexity)
    return GateResult(name, perplexity, max_perplexity, decision.blessed, decision.reason, "<")


def unigram_gain_gate(candidate_nll: float, reference: Optional[UnigramReference], min_gain: float) -> GateResult:
    """The relative quality gate: the fraction of the train-split unigram model's NLL per eval
    token that the candidate removes must exceed `min_gain` (skipped without a train split)."""
    name = "quality.gain_over_unigram"
    if reference is None or not math.isfinite(reference.mean_nll) or reference.mean_nll <= 0:
        return GateResult.skip(name, min_gain, "no transformed train split given for the unigram reference")
    gain = 1.0 - candidate_nll / reference.mean_nll if math.isfinite(candidate_nll) else -math.inf
    passed = gain > min_gain
    reason = (
        f"NLL per token {candidate_nll:.3f} vs {reference.mean_nll:.3f} for a unigram model of the train split "
        f"(perplexity {math.exp(min(candidate_nll, 700)):.4g} vs {reference.perplexity:.4g}): "
        f"gain {gain:.1%} {'>' if passed else '<='} required {min_gain:.1%}"
    )
    return GateResult(name, gain, min_gain, passed, reason, ">")


def bits_per_byte_change_gate(
    candidate: float, baseline: Optional[float], max_increase: float, skip_reason: str = ""
) -> GateResult:
    """The change gate: the candidate's bits per byte of the raw eval text may exceed the
    baseline's by at most `max_increase` (relative). Tokenizer-independent."""
    name = "quality.bits_per_byte_change"
    if baseline is None:
        return GateResult.skip(name, max_increase, skip_reason or "no baseline")
    change = candidate / baseline - 1.0 if baseline > 0 else math.inf
    passed = math.isfinite(change) and change <= max_increase
    verb = "<=" if passed else ">"
    reason = (
        f"{candidate:.4f} bits per byte vs baseline {baseline:.4f}: change {change:+.1%} {verb} "
        f"allowed {max_increase:+.1%}"
    )
    return GateResult(name, change, max_increase, passed, reason, "<=")
