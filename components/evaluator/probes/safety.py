"""The safety gate: red-team prompts, k sampled completions each, HELM-style toxicity metrics.

For each prompt the model's `generate` signature samples k completions; the scorer gives each a
toxicity score in [0, 1] (toxic when >= `toxicity_threshold`). Per prompt category and overall,
as HELM reports them:
    toxic_fraction           fraction of all completions that are toxic
    expected_max_toxicity    mean over prompts of the highest score among its k completions
    toxicity_probability     fraction of prompts with at least one toxic completion among k
The same completions are checked for personal data (`pii`).
"""

import json
import random
from collections import defaultdict
from typing import Dict, List, NamedTuple, Sequence

from components.evaluator.gates import FamilyResult, upper_bound_gate
from components.evaluator.metrics import pii
from components.evaluator.probes.chat_probes import refusal_rate
from components.evaluator.scorers import ToxicityScore, ToxicityScorer
from components.model_client import ModelClient
from components.resources import resolve

PROMPT_FIELDS = ("id", "category", "language", "prompt")


class RedTeamPrompt(NamedTuple):
    id: str
    category: str
    language: str
    prompt: str


def load_prompts(path: str) -> List[RedTeamPrompt]:
    """Reads the JSONL prompt set; a malformed line is an error naming the file and line."""
    prompts = []
    path = resolve(path)
    with open(path, encoding="utf-8") as handle:
        for line_number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}:{line_number}: not valid JSON ({exc})") from None
            missing = [f for f in PROMPT_FIELDS if not isinstance(record.get(f), str) or not record.get(f)]
            if missing:
                raise ValueError(f"{path}:{line_number}: missing or empty field(s) {missing}")
            prompts.append(RedTeamPrompt(*(record[f] for f in PROMPT_FIELDS)))
    if not prompts:
        raise ValueError(f"{path} holds no prompts")
    return prompts


def stratified_sample(prompts: Sequence[RedTeamPrompt], per_stratum: int, seed: int) -> List[RedTeamPrompt]:
    """Up to `per_stratum` prompts of every (category, language), chosen reproducibly; 0 = all."""
    strata = defaultdict(list)
    for prompt in prompts:
        strata[(prompt.category, prompt.language)].append(prompt)
    rng = random.Random(seed)
    chosen = []
    for key in sorted(strata):
        group = strata[key]
        chosen += group if per_stratum <= 0 or len(group) <= per_stratum else rng.sample(group, per_stratum)
    return chosen


def helm_metrics(scores_per_prompt: Sequence[Sequence[float]], threshold: float) -> Dict[str, float]:
    """The three HELM toxicity metrics over prompts that each have k completion scores."""
    completions = [s for scores in scores_per_prompt for s in scores]
    if not completions:
        return {"toxic_fraction": 0.0, "expected_max_toxicity": 0.0, "toxicity_probability": 0.0, "completions": 0}
    return {
        "toxic_fraction": sum(s >= threshold for s in completions) / len(completions),
        "expected_max_toxicity": sum(max(scores) for scores in scores_per_prompt) / len(scores_per_prompt),
        "toxicity_probability": sum(any(s >= threshold for s in scores) for scores in scores_per_prompt)
        / len(scores_per_prompt),
        "completions": len(completions),
    }


def evaluate_safety(client: ModelClient, scorer: ToxicityScorer, config) -> FamilyResult:
    """Samples completions for the configured prompt subset and measures toxicity and PII leaks.

    `config` is the `SafetyOptions`. The flagged completions are the toxic and the leaking ones.
    """
    prompts = stratified_sample(load_prompts(config.prompts_file), config.prompts_per_category, config.seed)
    k = config.completions_per_prompt
    expanded = [p for p in prompts for _ in range(k)]
    completions = client.generate(
        [p.prompt for p in expanded], config.max_new_tokens, config.temperature, config.top_k, config.top_p, config.seed
    )
    scores: List[ToxicityScore] = scorer.score(completions, [p.language for p in expanded])
    per_prompt = [[s.score for s in scores[i * k : (i + 1) * k]] for i in range(len(prompts))]

    by_category = defaultdict(list)
    for prompt, prompt_scores in zip(prompts, per_prompt):
        by_category[prompt.category].append(prompt_scores)
    metrics = {
        "overall": helm_metrics(per_prompt, config.toxicity_threshold),
        "per_category": {c: helm_metrics(v, config.toxicity_threshold) for c, v in sorted(by_category.items())},
        "prompts": len(prompts),
        "completions_per_prompt": k,
    }
    rate, leaks = pii.leak_rate(completions, config.pii_allowed_domains)
    metrics["pii"] = {"leak_rate": rate, "leaking_completions": len(leaks)}
    metrics["refusal_rate"] = refusal_rate(completions)  # reported, not gated (chat_probes.py)

    flagged = [
        {
            "gate": "safety",
            "category": p.category,
            "language": p.language,
            "prompt": p.prompt,
            "completion": text,
            "score": s.score,
            "found": list(s.matches),
        }
        for p, text, s in zip(expanded, completions, scores)
        if s.score >= config.toxicity_threshold
    ]
    flagged += [
        {
            "gate": "pii",
            "category": expanded[i].category,
            "language": expanded[i].language,
            "prompt": expanded[i].prompt,
            "completion": completions[i],
            "score": None,
            "found": [f"{f.kind}: {f.value}" for f in found],
        }
        for i, found in leaks
    ]
    overall = metrics["overall"]
    gates = [
        upper_bound_gate(
            "safety.toxic_fraction", overall["toxic_fraction"], config.max_toxic_fraction, "toxic fraction"
        ),
        upper_bound_gate(
            "safety.expected_max_toxicity",
            overall["expected_max_toxicity"],
            config.max_expected_max_toxicity,
            f"expected maximum toxicity over k={k}",
        ),
        upper_bound_gate(
            "safety.toxicity_probability",
            overall["toxicity_probability"],
            config.max_toxicity_probability,
            f"P(at least one toxic in k={k})",
        ),
        upper_bound_gate("safety.pii_leak_rate", rate, config.max_pii_leak_rate, "PII leak rate of completions"),
    ]
    scored = {"prompts": len(prompts), "completions": len(completions)}
    return FamilyResult("safety", gates, metrics, flagged, scored=scored)
