"""Runs every gate family on a candidate model and decides the blessing.

Families, in report order: quality (gain over a train-split unigram model, optional absolute
perplexity per token, change in bits per byte vs the baseline), replies and instruction following
(chat models), safety (HELM toxicity metrics, PII leaks), memorisation, bias (association against
placebo terms, sentiment gap, four-fifths rule) and the baseline comparison (reported, not gated).
Each returns a `FamilyResult` (gates.py); `Evaluation` composes them into evaluation.json. The
model is blessed only if no gate fails; skipped gates (e.g. no baseline yet) are recorded with a
reason.
"""

import dataclasses
import logging
import math
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence

from components.evaluator.gates import FamilyResult, GateResult, blessing_reason
from components.evaluator.metrics import perplexity, replies
from components.evaluator.metrics.sentiment import SentimentScorer
from components.evaluator.probes import bias, chat_eval, instruction_following, memorization, safety
from components.evaluator.probes.chat_probes import ChatProbeClient
from components.evaluator.probes.probe_cache import ProbeCache
from components.evaluator.scorers import load_scorer
from components.model_client import REQUIRED_SIGNATURES, ModelClient
from components.tokenizer.special import LEARNED, SpecialTokens
from components.trainer.serving import signatures
from components.transform.preprocessing import LOSS_MASK_KEY, RAW_TEXT_KEY

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class EvaluationInputs:
    """What `evaluate_candidate` evaluates, built by component.py; `config` is the `EvaluatorOptions`.

    `eval_files`: transformed eval examples (the candidate's tokens: perplexity per token);
    `raw_eval_files`: raw eval examples (bits per byte of every model, each with its own
    tokenizer; empty skips the change gate); `train_files`: raw train examples (memorisation
    probe; empty skips it); `train_token_files`: transformed train examples (the unigram
    reference of the relative quality gate; empty skips it); `baseline_dir`: the model to compare
    with, or None with the reason; `special`: the candidate tokenizer's special ids (how its packed
    blocks frame documents); `probe_cache`: where the candidate's safety and bias results are kept
    and the baseline's looked up (probes/probe_cache.py; None: none).
    """

    candidate_dir: str
    eval_files: str
    feature_spec: Dict[str, Any]
    config: Any
    train_files: Sequence[str] = ()
    train_token_files: Sequence[str] = ()
    baseline_dir: Optional[str] = None
    baseline_skip_reason: str = "no blessed model exists yet"
    beam_pipeline: Any = None
    raw_eval_files: Sequence[str] = ()
    special: SpecialTokens = LEARNED
    probe_cache: Optional[ProbeCache] = None

    @property
    def conversational(self) -> bool:
        """A chat model's examples (with a loss mask): its replies are measured, through its template."""
        return LOSS_MASK_KEY in self.feature_spec

    @property
    def skip_reason(self) -> str:
        """Why the comparisons with the baseline are skipped, when they are."""
        if self.baseline_dir and not self.raw_eval_files:
            return "no raw eval examples given to compare in bits per byte"
        return self.baseline_skip_reason


@dataclass
class Evaluation:
    """Every gate family's result and the baseline compared with; `to_dict` is the evaluation JSON."""

    families: List[FamilyResult]
    baseline: Optional[Dict[str, Any]] = None

    @property
    def gates(self) -> List[GateResult]:
        return [gate for family in self.families for gate in family.gates]

    @property
    def metrics(self) -> Dict[str, Any]:
        return {family.name: family.metrics for family in self.families}

    @property
    def flagged(self) -> List[Dict[str, Any]]:
        return [item for family in self.families for item in family.flagged]

    @property
    def seconds(self) -> Dict[str, float]:
        """Wall time per family that ran (what each costs)."""
        return {family.name: family.seconds for family in self.families if family.seconds is not None}

    @property
    def samples(self) -> List[Dict[str, Any]]:
        """Chat models: conversations side by side."""
        return [sample for family in self.families for sample in family.samples]

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


def _timed(name: str, measure: Callable[..., FamilyResult], *args) -> FamilyResult:
    """`measure(*args)` with its wall time, saying when it starts and ends (the families take
    minutes at real model sizes)."""
    what = name.replace("_", " ")
    log.info("Evaluator: measuring %s ...", what)
    started = time.perf_counter()
    result = measure(*args)
    elapsed = time.perf_counter() - started
    scored = ", ".join(f"{count} {unit}" for unit, count in result.scored.items())
    log.info("Evaluator: %s measured in %.1f s%s", what, elapsed, f" ({scored} scored)" if scored else "")
    return dataclasses.replace(result, seconds=round(elapsed, 3))


def evaluate_candidate(inputs: EvaluationInputs) -> Evaluation:
    """Every gate family on the SavedModel at `inputs.candidate_dir`, in report order."""
    config = inputs.config
    probe_cache = inputs.probe_cache or ProbeCache()
    quality = _timed("quality", _quality, inputs)
    required = REQUIRED_SIGNATURES + (signatures.SCORE_CONTINUATION,)
    client = ModelClient(inputs.candidate_dir, config.generation_batch_size, required=required)
    # A chat model is probed as it is used: through its template, the probes as user turns.
    through_chat = inputs.conversational and client.has_chat
    probes = ChatProbeClient(client) if through_chat else client
    families = [quality]
    if through_chat:
        families.append(_timed("replies", _replies, inputs, client))
        following = instruction_following.evaluate_instruction_following
        families.append(_timed("instruction_following", following, client, config.instruction_following))
    scorer = load_scorer(config.safety.scorer, config.safety)
    safety_result = _timed("safety", safety.evaluate_safety, probes, scorer, config.safety)
    families += [safety_result, _memorization(inputs, client)]
    sentiment = SentimentScorer(config.bias.zh_sentiment_lexicon)
    threshold = config.safety.toxicity_threshold
    bias_result = _timed("bias", bias.evaluate_bias, probes, scorer, sentiment, config.bias, threshold)
    families.append(bias_result)
    probed = _probe_record(safety_result.metrics, bias_result.metrics)
    probe_cache.store(inputs.candidate_dir, config, through_chat, probed)
    if inputs.baseline_dir and config.compare_baseline_safety:
        compared = (inputs.baseline_dir, probed, scorer, sentiment, config, through_chat, probe_cache)
        families.append(_timed("baseline_comparison", _baseline_comparison, *compared))
    return Evaluation(families, _baseline_record(inputs, quality.metrics))


def _quality(inputs: EvaluationInputs) -> FamilyResult:
    """Perplexity per token against the unigram reference, and the change in bits per byte against
    the baseline; of a chat model, of its replies (metrics/replies.py)."""
    config, candidate = inputs.config, {"candidate": inputs.candidate_dir}
    text_models = dict(candidate, baseline=inputs.baseline_dir) if inputs.baseline_dir else candidate
    if inputs.conversational:
        candidate_ppl, bits, unigram = replies.measure_reply_quality(
            text_models if inputs.raw_eval_files else candidate,
            inputs.raw_eval_files,
            inputs.train_token_files,
            [inputs.eval_files],
            inputs.feature_spec,
            config.generation_batch_size,
            config.max_reply_conversations,
        )
    else:
        request = perplexity.QualityRequest(
            candidate,
            inputs.eval_files,
            inputs.feature_spec,
            text_models if inputs.raw_eval_files else {},
            inputs.raw_eval_files,
            config.batch_size,
            config.generation_batch_size,
            inputs.train_token_files,
            inputs.special,
        )
        perplexities, bits, unigram = perplexity.measure_quality(request, inputs.beam_pipeline)
        candidate_ppl = perplexities["candidate"]
    candidate_bits, baseline_bits = bits.get("candidate"), bits.get("baseline")
    gates = [
        perplexity.perplexity_gate(candidate_ppl.perplexity, config.max_perplexity),
        perplexity.unigram_gain_gate(candidate_ppl.mean_nll, unigram, config.min_gain_over_unigram),
        perplexity.bits_per_byte_change_gate(
            candidate_bits.bits_per_byte if candidate_bits else math.nan,
            baseline_bits.bits_per_byte if baseline_bits else None,
            config.max_bits_per_byte_increase,
            inputs.skip_reason,
        ),
    ]
    metrics = {
        "measured_on": "replies (assistant turns, through each model's chat template)"
        if inputs.conversational
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
    return FamilyResult("quality", gates, metrics, scored={"tokens": candidate_ppl.num_tokens})


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


def _baseline_record(inputs: EvaluationInputs, quality: Dict[str, Any]) -> Dict[str, Any]:
    """evaluation.json's `baseline`: the model compared in bits per byte, or why none was."""
    if quality["baseline_bits_per_byte"] is None:
        return {"skipped": inputs.skip_reason}
    return {
        "path": inputs.baseline_dir,
        "bits_per_byte": quality["baseline_bits_per_byte"],
        "perplexity": quality["baseline_text_perplexity"],
    }


def _replies(inputs: EvaluationInputs, client: ModelClient) -> FamilyResult:
    """A chat model's replies to the eval conversations, against the baseline's (probes/chat_eval.py)."""
    config = inputs.config
    baseline_client, skip_reason = _chat_baseline(inputs.baseline_dir, config, inputs.skip_reason)
    conversations = replies.read_conversations(inputs.raw_eval_files, config.replies.conversations * 4)
    return chat_eval.evaluate_replies(client, baseline_client, conversations, config.replies, skip_reason)


def _memorization(inputs: EvaluationInputs, client: ModelClient) -> FamilyResult:
    """The memorisation probe on the raw training documents, or its gate skipped with the reason."""
    options = inputs.config.safety
    if inputs.train_files and options.memorization_documents:
        return _timed("memorization", _probe_memorization, inputs.train_files, client, options)
    reason = "disabled (safety.memorization_documents=0)" if inputs.train_files else "no training examples given"
    return FamilyResult(
        "memorization", [GateResult.skip("safety.memorization", options.max_memorized_fraction, reason)]
    )


def _probe_memorization(train_files: Sequence[str], client: ModelClient, options) -> FamilyResult:
    documents = memorization.read_documents(train_files, RAW_TEXT_KEY, options.memorization_documents * 8)
    return memorization.evaluate_memorization(client, documents, options)


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
        safety.evaluate_safety(client, scorer, config.safety).metrics,
        bias.evaluate_bias(client, scorer, sentiment, config.bias, config.safety.toxicity_threshold).metrics,
    )


def _baseline_comparison(*args) -> FamilyResult:
    """`compare_safety_and_bias` as a family: reported, no gates."""
    return FamilyResult("baseline_comparison", [], compare_safety_and_bias(*args))


def compare_safety_and_bias(
    baseline_dir: str,
    candidate: Dict[str, Any],
    scorer,
    sentiment,
    config,
    through_chat: bool = False,
    probe_cache: Optional[ProbeCache] = None,
) -> Dict[str, Any]:
    """The safety and bias probes run on the baseline too, and the change of the `candidate`'s
    (as `_probe_record` keeps them) against it:
    {"safety": {metric: {"candidate", "baseline", "change"}}, "bias": [{group..., "candidate_effect",
    "baseline_effect", "change", "candidate_verdict", "baseline_verdict"}], "baseline_probes":
    "run" or "reused"} or {"skipped": why}. Reported, not gated: a fine-tuned model is judged by the
    gates themselves. A baseline probed before under the same settings (the production model was
    an earlier run's candidate) is read from `probe_cache` instead (probes/probe_cache.py)."""
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
    candidate_safety = candidate["safety"]["overall"]
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
    for effect in candidate["bias"]["group_effects"]:
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
