"""A chat model judged the way it is used: replies generated through its template, scored against
the references, compared with the baseline's; whether it learned to stop.

For a sample of the eval split's conversations that end in an assistant turn (the first
`evaluator.replies.conversations`), the conversation without that last turn is sent to the
candidate's `chat` signature (greedy by default, `max_new_tokens`), and the reply is scored against
the last turn with exact match, ROUGE-L and chrF (metrics/reply_metrics.py); the baseline (the base
checkpoint on a first run, else the production model) answers the same conversations through its
own template.

Gates:
- `quality.reply_<metric>` (non-regression, `evaluator.replies.metric`, default ROUGE-L): the
  candidate's mean may not fall below the baseline's by more than `max_regression`. It refuses only
  on evidence: the mean difference is below -max_regression AND the paired bootstrap interval of
  the difference lies below 0 (`confidence`), so sampling noise on a few dozen conversations does
  not refuse a model that is as good; skipped without a baseline. Win / tie / loss counts and the
  interval are reported.
- `quality.stop_rate`: the fraction of replies that end with a stop token (the template's
  end-of-turn token, or the end of text) within `max_new_tokens`, at least `min_stop_rate`: a model
  whose end-of-turn token was never trained (masked, or missing from the template's turns) never
  stops, the failure users of fine-tuned chat models report most.
"""

from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from components.evaluator.gates import FamilyResult, GateResult, lower_bound_gate
from components.evaluator.metrics import reply_metrics
from components.model_client import ModelClient

Conversation = List[Tuple[str, str]]


def reply_tasks(conversations: Sequence[Conversation], limit: int) -> List[Tuple[Conversation, str]]:
    """(prompt turns, reference reply) of the first `limit` conversations that end in a reply."""
    tasks = []
    for conversation in conversations:
        if len(conversation) >= 2 and conversation[-1][0] == "assistant" and conversation[-1][1].strip():
            tasks.append((list(conversation[:-1]), conversation[-1][1]))
        if len(tasks) >= limit:
            break
    return tasks


def generate_and_score(client: ModelClient, tasks: Sequence[Tuple[Conversation, str]], options) -> Dict[str, Any]:
    """One model's replies to `tasks` and their metrics: {"replies", "stopped", "scores": {metric: array}}."""
    replies = client.chat(
        [prompt for prompt, _ in tasks],
        options.max_new_tokens,
        options.temperature,
        top_k=options.top_k,
        seed=options.seed,
    )
    texts = [reply.text for reply in replies]
    return {
        "replies": texts,
        "stopped": np.array([reply.stopped for reply in replies], bool),
        "scores": reply_metrics.score_replies(texts, [reference for _, reference in tasks]),
    }


def stop_rate_gate(stopped: np.ndarray, options) -> GateResult:
    rate = float(np.mean(stopped)) if stopped.size else 0.0
    return lower_bound_gate(
        "quality.stop_rate",
        rate,
        options.min_stop_rate,
        f"fraction of {stopped.size} replies that ended with a stop token within {options.max_new_tokens} new tokens",
    )


def regression_gate(comparison: Optional[reply_metrics.Comparison], options, skip_reason: str) -> GateResult:
    """The non-regression gate (module docstring)."""
    name = f"quality.reply_{options.metric}"
    if comparison is None:
        return GateResult.skip(name, options.max_regression, skip_reason)
    threshold = comparison.baseline_mean - options.max_regression
    worse = comparison.candidate_mean < threshold and comparison.high < 0
    reason = (
        f"mean {options.metric} {comparison.candidate_mean:.4f} vs baseline {comparison.baseline_mean:.4f} "
        f"(difference {comparison.difference:+.4f}, {comparison.confidence:.0%} paired bootstrap interval "
        f"[{comparison.low:+.4f}, {comparison.high:+.4f}]; wins/ties/losses {comparison.wins}/{comparison.ties}/"
        f"{comparison.losses}); refused when below the baseline by more than {options.max_regression} with the "
        f"interval below 0"
    )
    return GateResult(name, comparison.candidate_mean, max(threshold, 0.0), not worse, reason, ">=")


def evaluate_replies(
    candidate: ModelClient,
    baseline: Optional[ModelClient],
    conversations: Sequence[Conversation],
    options,
    baseline_skip_reason: str,
) -> FamilyResult:
    """The reply metrics and gates of a chat model (module docstring), with `options.report_samples`
    conversations side by side."""
    tasks = reply_tasks(conversations, options.conversations)
    if not tasks:
        return FamilyResult(
            "replies",
            [
                GateResult.skip(
                    "quality.stop_rate", options.min_stop_rate, "no eval conversation ends in an assistant turn"
                ),
                GateResult.skip(
                    f"quality.reply_{options.metric}",
                    options.max_regression,
                    "no eval conversation ends in an assistant turn",
                ),
            ],
            {"conversations": 0},
        )
    ours = generate_and_score(candidate, tasks, options)
    theirs = generate_and_score(baseline, tasks, options) if baseline is not None else None
    comparisons = {}
    if theirs is not None:
        comparisons = {
            metric: reply_metrics.compare(
                metric,
                ours["scores"][metric],
                theirs["scores"][metric],
                options.confidence,
                options.bootstrap_resamples,
                options.seed,
            )
            for metric in reply_metrics.METRICS
        }
    gates = [
        regression_gate(comparisons.get(options.metric), options, baseline_skip_reason),
        stop_rate_gate(ours["stopped"], options),
    ]
    metrics = {
        "conversations": len(tasks),
        "candidate": {metric: float(values.mean()) for metric, values in ours["scores"].items()},
        "candidate_stop_rate": float(ours["stopped"].mean()),
        "baseline": ({metric: float(values.mean()) for metric, values in theirs["scores"].items()} if theirs else None),
        "baseline_stop_rate": float(theirs["stopped"].mean()) if theirs else None,
        "comparison": {metric: comparison.to_dict() for metric, comparison in comparisons.items()},
        "distributions": {
            "candidate": {m: v.round(4).tolist() for m, v in ours["scores"].items()},
            "baseline": ({m: v.round(4).tolist() for m, v in theirs["scores"].items()} if theirs else None),
        },
    }
    samples = []
    for index, (prompt, reference) in enumerate(tasks[: options.report_samples]):
        samples.append(
            {
                "prompt": [{"role": role, "content": content} for role, content in prompt],
                "reference": reference,
                "candidate": ours["replies"][index],
                "candidate_stopped": bool(ours["stopped"][index]),
                "candidate_scores": {m: float(ours["scores"][m][index]) for m in reply_metrics.METRICS},
                "baseline": theirs["replies"][index] if theirs else None,
                "baseline_scores": (
                    {m: float(theirs["scores"][m][index]) for m in reply_metrics.METRICS} if theirs else None
                ),
            }
        )
    return FamilyResult("replies", gates, metrics, samples=samples, scored={"conversations": len(tasks)})
