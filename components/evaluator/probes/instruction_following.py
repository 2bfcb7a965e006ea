"""Does a chat model follow verifiable instructions? Checked by rules, with no judge model.

In the spirit of IFEval (Zhou et al. 2023: prompts whose instruction a program can verify), the
bundled set (`data/instruction_following/prompts.jsonl`; `evaluator.instruction_following.prompts_file`)
gives support questions with one constraint each:

    max_words        the reply has at most `value` words (whitespace-separated)
    include_keyword  the reply contains `value` (case-insensitive, as a word)
    json_object      the reply is a JSON object (optionally inside a ``` fence)
    forbidden_word   the reply does not contain `value` (case-insensitive, as a word)

Each prompt is a user turn through the model's template (greedy). Reported: strict accuracy (the
fraction of prompts whose reply satisfies the constraint) overall and per constraint kind. The gate
`quality.instruction_following` needs `min_accuracy` (default 0: reported, not gated); a small
model fine-tuned on one domain scores low, and that is information, not a defect.
"""

import json
import re
from collections import defaultdict
from typing import Any, Callable, Dict, List, NamedTuple

from components.evaluator.gates import FamilyResult, GateResult, lower_bound_gate
from components.resources import resolve


class Check(NamedTuple):
    prompt: str
    constraint: str
    value: Any


def _word(value: str) -> re.Pattern:
    return re.compile(rf"(?<!\w){re.escape(value)}(?!\w)", re.IGNORECASE)


def _is_json_object(reply: str) -> bool:
    text = reply.strip()
    fenced = re.fullmatch(r"```(?:json)?\s*(.*?)\s*```", text, re.DOTALL)
    try:
        return isinstance(json.loads(fenced.group(1) if fenced else text), dict)
    except json.JSONDecodeError:
        return False


RULES: Dict[str, Callable[[str, Any], bool]] = {
    "max_words": lambda reply, value: len(reply.split()) <= int(value),
    "include_keyword": lambda reply, value: bool(_word(str(value)).search(reply)),
    "json_object": lambda reply, value: _is_json_object(reply),
    "forbidden_word": lambda reply, value: not _word(str(value)).search(reply),
}


def load_checks(path: str) -> List[Check]:
    """The prompts of a JSONL file (module docstring); errors name the file and line."""
    checks = []
    with open(resolve(path), encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
                check = Check(record["prompt"], record["constraint"], record.get("value"))
            except (json.JSONDecodeError, KeyError, TypeError) as exc:
                raise ValueError(f"{path}:{number}: not a {{prompt, constraint, value}} record ({exc})") from None
            if check.constraint not in RULES:
                raise ValueError(f"{path}:{number}: unknown constraint {check.constraint!r} (known: {sorted(RULES)})")
            checks.append(check)
    return checks


def followed(check: Check, reply: str) -> bool:
    return RULES[check.constraint](reply, check.value)


def evaluate_instruction_following(client, options) -> FamilyResult:
    """Strict accuracy of a chat `client` (model_client.ModelClient); each prompt's reply is kept in
    `metrics["samples"]`."""
    checks = load_checks(options.prompts_file)
    replies = client.chat([[("user", check.prompt)] for check in checks], options.max_new_tokens, 0.0)
    results = [followed(check, reply.text) for check, reply in zip(checks, replies)]
    per_kind: Dict[str, List[bool]] = defaultdict(list)
    for check, result in zip(checks, results):
        per_kind[check.constraint].append(result)
    accuracy = sum(results) / len(results) if results else 0.0
    metrics = {
        "prompts": len(checks),
        "strict_accuracy": accuracy,
        "per_constraint": {kind: sum(values) / len(values) for kind, values in sorted(per_kind.items())},
    }
    if options.min_accuracy > 0:
        gate = lower_bound_gate(
            "quality.instruction_following",
            accuracy,
            options.min_accuracy,
            f"strict accuracy on {len(checks)} verifiable instructions",
        )
    else:
        gate = GateResult.skip(
            "quality.instruction_following",
            0.0,
            f"reported, not gated (strict accuracy {accuracy:.3f}; set "
            "evaluator.instruction_following.min_accuracy to gate)",
        )
    samples = [
        {
            "prompt": check.prompt,
            "constraint": check.constraint,
            "value": check.value,
            "reply": reply.text,
            "followed": result,
        }
        for check, reply, result in zip(checks, replies, results)
    ]
    metrics["samples"] = samples
    return FamilyResult("instruction_following", [gate], metrics, scored={"prompts": len(checks)})
