"""Runs every gate on a candidate model and decides the blessing.

Gates: quality (gain over a train-split unigram model, optional absolute perplexity per token,
change in bits per byte vs the baseline), safety
(HELM toxicity metrics, PII leaks, memorisation) and bias (association against placebo terms, sentiment
gap, four-fifths rule). The model is blessed only if no gate fails; skipped gates (e.g. no
baseline yet) are recorded with a reason.
"""

import logging
import math
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence

from components.evaluator import bias, chat_eval, instruction_following, memorization, perplexity, replies, safety
from components.evaluator.chat_probes import ChatProbeClient
from components.evaluator.gates import GateResult, blessing_reason
from components.evaluator.probe_cache import ProbeCache
from components.evaluator.scorers import load_scorer
from components.evaluator.sentiment import SentimentScorer
from components.model_client import REQUIRED_SIGNATURES, ModelClient
from components.tokenizer.special import LEARNED, SpecialTokens
from components.trainer.serving import signatures
from components.transform.preprocessing import LOSS_MASK_KEY, RAW_TEXT_KEY

log = logging.getLogger(__name__)


@dataclass
class Evaluation:
    """Everything the evaluator measured and decided; `to_dict` is the evaluation JSON."""

    gates: List[GateResult]
    metrics: Dict[str, Any]
    flagged: List[Dict[str, Any]] = field(default_factory=list)
    baseline: Optional[Dict[str, Any]] = None
    seconds: Dict[str, float] = field(default_factory=dict)  # wall time per gate family (what each costs)
    samples: List[Dict[str, Any]] = field(default_factory=list)  # chat models: conversations side by side

    @property
    def blessed(self) -> bool:
        return all(gate.passed for gate in self.gates)

    @property
    def reason(self) -> str:
        return blessing_reason(self.gates)

    def gate(self, name: str) -> GateResult:
        return next(g for g in self.gates if g.name == name)

    def to_dict(self) -> Dict[str, Any]:
        return {
            "blessed": self.blessed,
            "reason": self.reason,
            "gates": [gate.to_dict() for gate in self.gates],
            "metrics": self.metrics,
            "baseline": self.baseline,
            "flagged": self.flagged,
            "seconds": self.seconds,
            "samples": self.samples,
        }


@contextmanager
def _timed(seconds: Dict[str, float], family: str):
    """Adds the wall time of the block to `seconds[family]`, and says when it starts and ends (the
    families take minutes at real model sizes)."""
    log.info("Evaluator: measuring %s ...", family.replace("_", " "))
    started = time.perf_counter()
    try:
        yield
    finally:
        elapsed = time.perf_counter() - started
        seconds[family] = round(seconds.get(family, 0.0) + elapsed, 3)
        log.info("Evaluator: %s measured in %.1f s", family.replace("_", " "), elapsed)


def _text_metrics(prefix: str, result: Optional[perplexity.BitsPerByteResult]) -> Dict[str, Any]:
    """One model's raw-text measures, keys prefixed with `prefix` ("" candidate, "baseline_")."""
    values = {"bits_per_byte": None, "text_perplexity": None, "text_tokens": None, "text_bytes": None}
    if result is not None:
        values = {
            "bits_per_byte": result.bits_per_byte,
            "text_perplexity": result.perplexity,
            "text_tokens": result.num_tokens,
            "text_bytes": result.num_bytes,
        }
    return {prefix + key: value for key, value in values.items()}


def evaluate_candidate(
    candidate_dir: str,
    eval_files: str,
    feature_spec,
    config,
    train_files: Sequence[str] = (),
    train_token_files: Sequence[str] = (),
    baseline_dir: Optional[str] = None,
    baseline_skip_reason: str = "no blessed model exists yet",
    beam_pipeline=None,
    raw_eval_files: Sequence[str] = (),
    special: SpecialTokens = LEARNED,
    probe_cache: Optional[ProbeCache] = None,
) -> Evaluation:
    """All gates for the SavedModel at `candidate_dir`; `config` is the `EvaluatorOptions`.

    `eval_files`: transformed eval examples (the candidate's tokens: perplexity per token);
    `raw_eval_files`: raw eval examples (bits per byte of every model, each with its own
    tokenizer; empty skips the change gate); `train_files`: raw train examples (memorisation
    probe; empty skips it); `train_token_files`: transformed train examples (the unigram
    reference of the relative quality gate; empty skips it); `baseline_dir`: the model to compare with, or None with the reason;
    `special`: the candidate tokenizer's special ids (how its packed blocks frame documents);
    `probe_cache`: where the candidate's safety and bias results are kept and the baseline's looked
    up (probe_cache.py; None: none).
    """
    probe_cache = probe_cache or ProbeCache()
    seconds: Dict[str, float] = {}
    text_models = {"candidate": candidate_dir}
    if baseline_dir:
        text_models["baseline"] = baseline_dir
    request = perplexity.QualityRequest(
        {"candidate": candidate_dir},
        eval_files,
        feature_spec,
        text_models if raw_eval_files else {},
        raw_eval_files,
        config.batch_size,
        config.generation_batch_size,
        train_token_files,
        special,
    )
    conversational = LOSS_MASK_KEY in feature_spec
    with _timed(seconds, "quality"):
        if conversational:  # a chat model: the likelihood of its replies (replies.py)
            candidate_ppl, bits, unigram = replies.measure_reply_quality(
                text_models if raw_eval_files else {"candidate": candidate_dir},
                raw_eval_files,
                train_token_files,
                [eval_files],
                feature_spec,
                config.generation_batch_size,
                config.max_reply_conversations,
            )
        else:
            perplexities, bits, unigram = perplexity.measure_quality(request, beam_pipeline)
            candidate_ppl = perplexities["candidate"]
    candidate_bits, baseline_bits = bits.get("candidate"), bits.get("baseline")
    if baseline_dir and not raw_eval_files:
        baseline_skip_reason = "no raw eval examples given to compare in bits per byte"
    gates = [
        perplexity.perplexity_gate(candidate_ppl.perplexity, config.max_perplexity),
        perplexity.unigram_gain_gate(candidate_ppl.mean_nll, unigram, config.min_gain_over_unigram),
        perplexity.bits_per_byte_change_gate(
            candidate_bits.bits_per_byte if candidate_bits else math.nan,
            baseline_bits.bits_per_byte if baseline_bits else None,
            config.max_bits_per_byte_increase,
            baseline_skip_reason,
        ),
    ]
    metrics: Dict[str, Any] = {
        "quality": {
            "measured_on": "replies (assistant turns, through each model's chat template)"
            if conversational
            else "text",
            "perplexity": candidate_ppl.perplexity,
            "mean_nll": candidate_ppl.mean_nll,
            "num_tokens": candidate_ppl.num_tokens,
            "unigram_perplexity": unigram.perplexity if unigram else None,
            "unigram_mean_nll": unigram.mean_nll if unigram else None,
            **_text_metrics("", candidate_bits),
            **_text_metrics("baseline_", baseline_bits),
            # The baseline's perplexity per token of its own tokenizer (a different unit when tokenizers differ).
            "baseline_perplexity": baseline_bits.perplexity if baseline_bits else None,
        }
    }

    client = ModelClient(
        candidate_dir, config.generation_batch_size, required=REQUIRED_SIGNATURES + (signatures.SCORE_CONTINUATION,)
    )
    # A chat model is probed as it is used: through its template, the probes as user turns.
    probes = ChatProbeClient(client) if conversational and client.has_chat else client
    samples: List[Dict[str, Any]] = []
    if conversational and client.has_chat:
        with _timed(seconds, "replies"):
            baseline_client, reply_skip_reason = _chat_baseline(baseline_dir, config, baseline_skip_reason)
            conversations = replies.read_conversations(raw_eval_files, config.replies.conversations * 4)
            reply_result = chat_eval.evaluate_replies(
                client, baseline_client, conversations, config.replies, reply_skip_reason
            )
        gates += reply_result["gates"]
        metrics["replies"] = reply_result["metrics"]
        samples = reply_result["samples"]
        with _timed(seconds, "instruction_following"):
            following = instruction_following.evaluate_instruction_following(client, config.instruction_following)
        gates += following["gates"]
        metrics["instruction_following"] = dict(following["metrics"], samples=following["samples"])
    scorer = load_scorer(config.safety.scorer, config.safety)
    with _timed(seconds, "safety"):
        safety_result = safety.evaluate_safety(probes, scorer, config.safety)
    gates += safety_result["gates"]
    metrics["safety"] = safety_result["metrics"]
    flagged = list(safety_result["flagged"])

    if train_files and config.safety.memorization_documents:
        with _timed(seconds, "memorization"):
            documents = memorization.read_documents(train_files, RAW_TEXT_KEY, config.safety.memorization_documents * 8)
            memo = memorization.evaluate_memorization(client, documents, config.safety)
    else:
        memo = {
            "metrics": {},
            "flagged": [],
            "gates": [
                GateResult.skip(
                    "safety.memorization",
                    config.safety.max_memorized_fraction,
                    "disabled (safety.memorization_documents=0)" if train_files else "no training examples given",
                )
            ],
        }
    gates += memo["gates"]
    metrics["memorization"] = memo["metrics"]
    flagged += memo["flagged"]

    sentiment = SentimentScorer(config.bias.zh_sentiment_lexicon)
    with _timed(seconds, "bias"):
        bias_result = bias.evaluate_bias(probes, scorer, sentiment, config.bias, config.safety.toxicity_threshold)
    gates += bias_result["gates"]
    metrics["bias"] = bias_result["metrics"]
    flagged += bias_result["flagged"]
    baseline = (
        {"path": baseline_dir, "bits_per_byte": baseline_bits.bits_per_byte, "perplexity": baseline_bits.perplexity}
        if baseline_bits
        else {"skipped": baseline_skip_reason}
    )
    probe_cache.store(candidate_dir, config, probes is not client, _probe_record(metrics["safety"], metrics["bias"]))
    if baseline_dir and config.compare_baseline_safety:
        with _timed(seconds, "baseline_comparison"):
            metrics["baseline_comparison"] = compare_safety_and_bias(
                baseline_dir,
                metrics,
                scorer,
                sentiment,
                config,
                through_chat=probes is not client,
                probe_cache=probe_cache,
            )
    return Evaluation(gates, metrics, flagged, baseline, seconds, samples)


def _chat_baseline(baseline_dir: Optional[str], config, skip_reason: str):
    """(a client of the baseline's chat signatures, or None, and why not)."""
    if not baseline_dir:
        return None, skip_reason
    try:
        return ModelClient(baseline_dir, config.generation_batch_size, required=signatures.CHAT_SIGNATURES), skip_reason
    except ValueError:
        return None, f"the baseline {baseline_dir} has no chat signature (a model trained on plain text)"


def _group_key(effect: Dict[str, Any]) -> tuple:
    return effect["language"], effect["dimension"], effect["group"]


def _probe_record(safety_metrics: Dict[str, Any], bias_metrics: Dict[str, Any]) -> Dict[str, Any]:
    """What the probe cache keeps of a model's safety and bias results: what a comparison reads."""
    return {"safety": {"overall": safety_metrics["overall"]}, "bias": {"group_effects": bias_metrics["group_effects"]}}


def _probe_baseline(baseline_dir: str, scorer, sentiment, config, through_chat: bool) -> Dict[str, Any]:
    """The baseline's safety and bias results ({"safety", "bias"} as `_probe_record` keeps them), or
    {"skipped": why}."""
    try:
        client = ModelClient(
            baseline_dir, config.generation_batch_size, required=REQUIRED_SIGNATURES + (signatures.SCORE_CONTINUATION,)
        )
    except ValueError as error:  # a baseline exported before the signatures the probes need
        return {"skipped": str(error)}
    if through_chat:
        if not client.has_chat:
            return {"skipped": f"the baseline {baseline_dir} has no chat signature: its probes would not be comparable"}
        client = ChatProbeClient(client)
    return _probe_record(
        safety.evaluate_safety(client, scorer, config.safety)["metrics"],
        bias.evaluate_bias(client, scorer, sentiment, config.bias, config.safety.toxicity_threshold)["metrics"],
    )


def compare_safety_and_bias(
    baseline_dir: str,
    metrics: Dict[str, Any],
    scorer,
    sentiment,
    config,
    through_chat: bool = False,
    probe_cache: Optional[ProbeCache] = None,
) -> Dict[str, Any]:
    """The safety and bias probes run on the baseline too, and the candidate's change against it:
    {"safety": {metric: {"candidate", "baseline", "change"}}, "bias": [{group..., "candidate_effect",
    "baseline_effect", "change", "candidate_verdict", "baseline_verdict"}], "baseline_probes":
    "run" or "reused"} or {"skipped": why}. Reported, not gated: a fine-tuned model is judged by the
    gates themselves. A baseline probed before under the same settings (the production model was
    an earlier run's candidate) is read from `probe_cache` instead (probe_cache.py)."""
    probe_cache = probe_cache or ProbeCache()
    baseline = probe_cache.lookup(baseline_dir, config, through_chat)
    reused = baseline is not None
    if reused:
        log.info("Evaluator: the baseline's safety and bias probes were run before with these settings; reusing them")
    else:
        baseline = _probe_baseline(baseline_dir, scorer, sentiment, config, through_chat)
        if "skipped" in baseline:
            return baseline
        probe_cache.store(baseline_dir, config, through_chat, baseline)
    baseline_safety, baseline_bias = baseline["safety"]["overall"], baseline["bias"]
    candidate_safety = metrics["safety"]["overall"]
    safety_change = {
        name: {
            "candidate": candidate_safety[name],
            "baseline": baseline_safety[name],
            "change": candidate_safety[name] - baseline_safety[name],
        }
        for name in ("toxic_fraction", "expected_max_toxicity", "toxicity_probability")
    }
    baseline_effects = {_group_key(effect): effect for effect in baseline_bias["group_effects"]}
    bias_change = []
    for effect in metrics["bias"]["group_effects"]:
        before = baseline_effects.get(_group_key(effect))
        if before is None:
            continue
        bias_change.append(
            {
                "language": effect["language"],
                "dimension": effect["dimension"],
                "group": effect["group"],
                "candidate_effect": effect["effect"],
                "baseline_effect": before["effect"],
                "change": effect["effect"] - before["effect"],
                "candidate_verdict": effect["verdict"],
                "baseline_verdict": before["verdict"],
            }
        )
    return {"safety": safety_change, "bias": bias_change, "baseline_probes": "reused" if reused else "run"}
