"""The model card of a pushed version: Markdown and HTML, made from what the run recorded.

Written by the Pusher beside the served version, never inside it (TF Serving loads every file of
a version directory; a model card there would also change the SavedModel's bytes):

    <serving_dir>/model_cards/<version>.md
    <serving_dir>/model_cards/<version>.html

and logged with the registered version's MLflow run (artifact path `model_card/`). A model
fine-tuned from a Hugging Face checkpoint is also published in that layout beside it,
`<serving_dir>/hugging_face/<version>/` (the Pusher copies the Trainer's export), and the card
says where.

Sources, each optional (a section says "not recorded" when its source is missing):
- the Trainer's `training_record.json` in the model artifact (components/trainer/training/record.py):
  architecture, parameters, tokenizer, base checkpoint, LoRA, training settings, last losses;
- the Evaluator's `evaluation.json` in the blessing artifact: every gate, quality against the
  baseline, safety per category, bias per group (verdicts `unmeasured` included);
- the Examples artifact's ingest report: spans, documents read and kept, curation removals,
  languages;
- `pusher.model_card`: intended use and limitations, written by the people who own the model.

The HTML is the Markdown rendered with Python-Markdown (tables extension), so the two never
disagree.
"""

import datetime
import json
import os
from typing import Any, Dict, Iterable, List, Sequence

import markdown
import tensorflow as tf

CARDS_DIR = "model_cards"
HUGGING_FACE_DIR = "hugging_face"
_MAX_RULES = 8  # curation rules listed by name; the rest are summed


def card_paths(serving_dir: str, version: int) -> Dict[str, str]:
    """The card files of serving version `version`: {"md": ..., "html": ...}."""
    base = os.path.join(serving_dir, CARDS_DIR, str(version))
    return {"md": base + ".md", "html": base + ".html"}


def hugging_face_path(serving_dir: str, version: int) -> str:
    """Where the Hugging Face export of serving version `version` is published."""
    return os.path.join(serving_dir, HUGGING_FACE_DIR, str(version))


def read_json(path: str) -> Dict[str, Any]:
    """The JSON object in `path`, or {} when the file does not exist."""
    if not tf.io.gfile.exists(path):
        return {}
    with tf.io.gfile.GFile(path) as handle:
        return json.load(handle)


def _table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> List[str]:
    """A Markdown table; '|' and newlines inside cells are escaped."""

    def cell(value: Any) -> str:
        return str(value).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(cell(value) for value in row) + " |" for row in rows]
    return lines + [""]


def _number(value: Any, digits: int = 4) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:.{digits}g}"
    return f"{value:,}" if isinstance(value, int) else str(value)


def _model_section(training: Dict[str, Any]) -> List[str]:
    lines = ["## Model", ""]
    if not training:
        return lines + ["Not recorded (the model was exported without a training record).", ""]
    model = training["model"]
    base = training.get("base_checkpoint")
    lora = training.get("lora")
    warm = training.get("warm_start")
    rows = [
        [
            "architecture",
            f"decoder-only Transformer, {model.get('num_layers')} layers, {model.get('num_heads')} heads, "
            f"width {model.get('model_dim')}, MLP {model.get('mlp_dim')}, {model.get('position_encoding')} positions",
        ],
        ["context length", model.get("context_length")],
        ["parameters", _number(training.get("parameters"))],
        ["vocabulary", _number(training.get("vocab_size"))],
        ["tokenizer sha256", f"`{training.get('tokenizer_sha256', '')}`"],
        [
            "base checkpoint",
            f"{base['source']} (sha256 `{base.get('sha256', '')}`)" if base else "none: trained from scratch",
        ],
        [
            "starting weights",
            f"warm-started from registered version {warm['registered_version']} ({warm['saved_model_dir']})"
            if warm
            else ("the base checkpoint" if base else "random initialisation"),
        ],
        [
            "adaptation",
            f"LoRA rank {lora['rank']}, alpha {lora['alpha']}, on {', '.join(lora['targets'])}; merged into the weights"
            if lora
            else "all weights trained",
        ],
    ]
    return lines + _table(["", "value"], rows)


def _chat_section(training: Dict[str, Any]) -> List[str]:
    """The chat template of a model tuned on conversations (nothing for a text model)."""
    chat = training.get("chat")
    if not chat:
        return []
    settings = training.get("training") or {}
    return [
        "## Chat template",
        "",
        f"Tuned on conversations, loss on {settings.get('loss_on', 'assistant')} tokens. Prompts must be rendered "
        f"with this template (sha256 `{chat['template_sha256']}`; the `chat` signature and `textgen generate --chat` "
        f"do it); replies end with {', '.join(f'`{t}`' for t in chat['end_of_turn_tokens'])} and decoding stops at "
        f"token ids {chat['stop_token_ids']}.",
        "",
        "```jinja",
        chat["template"],
        "```",
        "",
    ]


def _data_section(data: Dict[str, Any]) -> List[str]:
    lines = ["## Training data", ""]
    report = data.get("ingest_report") or {}
    if not report:
        return lines + ["Not recorded.", ""]
    removed = sorted((report.get("removed") or {}).items(), key=lambda item: -item[1])
    quarantined = sum((report.get("quarantined") or {}).values())
    languages = report.get("languages") or {}
    rows = [
        ["spans", data.get("spans") or "—"],
        ["documents read / kept", f"{_number(report.get('documents_read'))} / {_number(report.get('documents_kept'))}"],
        ["bytes read / kept", f"{_number(report.get('bytes_read'))} / {_number(report.get('bytes_kept'))}"],
        ["quarantined records", quarantined],
        ["removed by curation", ", ".join(f"{rule} {count}" for rule, count in removed[:_MAX_RULES]) or "none"],
        ["languages", ", ".join(f"{language} {count}" for language, count in languages.items()) or "not identified"],
    ]
    return lines + _table(["", "value"], rows)


def _training_section(training: Dict[str, Any]) -> List[str]:
    lines = ["## Training", ""]
    if not training:
        return lines + ["Not recorded.", ""]
    settings, last = training["training"], training.get("last_step") or {}
    rows = [
        ["steps", f"{settings.get('train_steps')} ({training.get('steps_run')} run by this execution)"],
        ["exported weights", _exported_weights(training, last)],
        [
            "batch",
            f"{settings.get('batch_size')} sequences"
            if not settings.get("global_batch_tokens")
            else f"{settings['global_batch_tokens']} tokens",
        ],
        ["peak learning rate / warm-up", f"{settings.get('learning_rate')} / {settings.get('warmup_steps')} steps"],
        [
            "device, precision, XLA",
            f"{training.get('device')}, {training.get('precision')}, {'on' if training.get('xla') else 'off'}",
        ],
        ["seed", settings.get("seed")],
        ["last loss / eval loss", f"{_number(last.get('loss'))} / {_number(last.get('eval_loss'))}"],
    ]
    return lines + _table(["", "value"], rows)


def _exported_weights(training: Dict[str, Any], last: Dict[str, Any]) -> str:
    """Which step's weights the Trainer exported (the lowest eval loss may precede the last step)."""
    exported = training.get("exported_step")
    if exported is None or exported == last.get("step"):
        return "the last step's"
    return f"step {exported}'s (lowest eval loss; training ran to step {last.get('step')})"


def _evaluation_section(evaluation: Dict[str, Any]) -> List[str]:
    lines = ["## Evaluation", ""]
    if not evaluation:
        return lines + ["Not recorded.", ""]
    verdict = "blessed" if evaluation.get("blessed") else "not blessed"
    lines += [f"Verdict: **{verdict}**. {evaluation.get('reason', '')}", ""]
    lines += _table(
        ["gate", "value", "threshold", "verdict", "reason"],
        [
            [g["name"], _number(g.get("value")), _number(g.get("threshold")), g["verdict"], g.get("reason", "")]
            for g in evaluation.get("gates", [])
        ],
    )
    quality = evaluation.get("metrics", {}).get("quality", {})
    baseline = evaluation.get("baseline") or {}
    kinds = {
        "base_checkpoint": "the pretrained checkpoint it was fine-tuned from",
        "production": "the production model",
    }
    against = (
        f"{kinds.get(baseline.get('kind'), 'the baseline')} at {baseline.get('path')}"
        if baseline.get("path")
        else f"no baseline ({baseline.get('skipped', 'none')})"
    )
    lines += [f"Quality, compared with {against}:", ""]
    lines += _table(
        ["measure", "this model", "baseline"],
        [
            ["perplexity per token", _number(quality.get("perplexity")), _number(quality.get("baseline_perplexity"))],
            [
                "bits per byte (eval split)",
                _number(quality.get("bits_per_byte")),
                _number(quality.get("baseline_bits_per_byte")),
            ],
            ["train-split unigram perplexity", _number(quality.get("unigram_perplexity")), ""],
        ],
    )
    return lines + _replies_lines(evaluation.get("metrics", {}).get("replies") or {})


def _replies_lines(replies: Dict[str, Any]) -> List[str]:
    """A chat model's generated replies against the baseline's (components/evaluator/probes/chat_eval.py)."""
    if not replies.get("conversations"):
        return []
    candidate, baseline = replies.get("candidate") or {}, replies.get("baseline") or {}
    comparison = replies.get("comparison") or {}
    rows = []
    for metric, value in candidate.items():
        compared = comparison.get(metric)
        rows.append(
            [
                metric,
                _number(value),
                _number(baseline.get(metric)),
                f"{compared['difference']:+.3f} [{compared['low']:+.3f}, {compared['high']:+.3f}]" if compared else "",
                f"{compared['wins']} / {compared['ties']} / {compared['losses']}" if compared else "",
            ]
        )
    rows.append(
        ["stop rate", _number(replies.get("candidate_stop_rate")), _number(replies.get("baseline_stop_rate")), "", ""]
    )
    lines = [
        f"Replies generated for {replies['conversations']} eval conversations, scored against their references:",
        "",
    ]
    return lines + _table(
        ["metric", "this model", "baseline", "difference [paired bootstrap interval]", "wins / ties / losses"], rows
    )


def _safety_section(evaluation: Dict[str, Any]) -> List[str]:
    safety = evaluation.get("metrics", {}).get("safety") or {}
    lines = ["## Safety", ""]
    if not safety:
        return lines + ["Not recorded.", ""]
    categories = {"overall": safety.get("overall", {}), **safety.get("per_category", {})}
    lines += _table(
        ["prompts", "toxic fraction", "expected max toxicity", "P(any toxic)", "completions"],
        [
            [
                name,
                _number(m.get("toxic_fraction")),
                _number(m.get("expected_max_toxicity")),
                _number(m.get("toxicity_probability")),
                m.get("completions"),
            ]
            for name, m in categories.items()
        ],
    )
    pii = safety.get("pii") or {}
    lines += [f"PII leak rate of completions: {_number(pii.get('leak_rate'))}.", ""]
    comparison = evaluation.get("metrics", {}).get("baseline_comparison") or {}
    if comparison.get("safety"):
        lines += ["Against the baseline (reported, not gated):", ""]
        lines += _table(
            ["metric", "this model", "baseline", "change"],
            [
                [name, _number(v["candidate"]), _number(v["baseline"]), f"{v['change']:+.3f}"]
                for name, v in comparison["safety"].items()
            ],
        )
    return lines


def _bias_section(evaluation: Dict[str, Any]) -> List[str]:
    bias = evaluation.get("metrics", {}).get("bias") or {}
    lines = ["## Bias", ""]
    effects = bias.get("group_effects") or []
    if not effects:
        return lines + ["No group was evaluated.", ""]
    lines += [
        "Association of each group term with negative continuations, against placebo terms "
        "(`unmeasured`: the model does not know the term better than made-up words, so nothing is claimed).",
        "",
    ]
    lines += _table(
        ["language", "dimension", "group", "effect (nats/token)", "sign test p", "verdict"],
        [
            [
                e["language"],
                e["dimension"],
                e["group"],
                f"{e['effect']:+.3f}",
                _number(e.get("sign_p"), 3),
                e["verdict"],
            ]
            for e in effects
        ],
    )
    return lines


def render_markdown(facts: Dict[str, Any]) -> str:
    """The card as Markdown; `facts` is what `collect_facts` returns."""
    push = facts["push"]
    lines = [
        f"# Model card: {push['model_name']} version {push['serving_version']}",
        "",
        f"Pushed {push['pushed_at']} as `{push['label']}` to `{push['serving_path']}`"
        + (
            f"; registered as {push['registered_model']} version {push['registered_version']}."
            if push.get("registered_version")
            else "."
        ),
        "",
        *(
            [
                f"Also published in the Hugging Face layout (for vLLM, TGI or `transformers`) at `{push['hugging_face']}`.",
                "",
            ]
            if push.get("hugging_face")
            else []
        ),
        "## Intended use",
        "",
        facts["intended_use"],
        "",
        "## Limitations",
        "",
        facts["limitations"],
        "",
    ]
    lines += _model_section(facts["training"])
    lines += _chat_section(facts["training"])
    lines += _data_section(facts["data"])
    lines += _training_section(facts["training"])
    lines += _evaluation_section(facts["evaluation"])
    lines += _safety_section(facts["evaluation"])
    lines += _bias_section(facts["evaluation"])
    return "\n".join(lines)


def render_html(card_markdown: str, title: str) -> str:
    """A standalone HTML page of the Markdown card."""
    body = markdown.markdown(card_markdown, extensions=["tables"])
    style = (
        "body{font-family:sans-serif;max-width:1000px;margin:2em auto;line-height:1.4}"
        "table{border-collapse:collapse;margin:0.5em 0 1.5em}td,th{border:1px solid #ccc;padding:3px 6px;vertical-align:top}"
        "code{font-size:90%}"
    )
    escaped_title = markdown.markdown(title).replace("<p>", "").replace("</p>", "")
    return (
        f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{escaped_title}</title>"
        f"<style>{style}</style></head><body>{body}</body></html>"
    )


def collect_facts(
    push: Dict[str, Any],
    training: Dict[str, Any],
    evaluation: Dict[str, Any],
    data: Dict[str, Any],
    intended_use: str,
    limitations: str,
) -> Dict[str, Any]:
    """Everything the card shows. `push`: model_name, serving_version, label, serving_path and,
    when registered, registered_model and registered_version; `training`: the training record;
    `evaluation`: evaluation.json; `data`: {"spans": ..., "ingest_report": {...}}."""
    return {
        "push": {
            **push,
            "pushed_at": push.get("pushed_at")
            or datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        },
        "training": training,
        "evaluation": evaluation,
        "data": data,
        "intended_use": intended_use,
        "limitations": limitations,
    }


def write_card(serving_dir: str, version: int, facts: Dict[str, Any]) -> Dict[str, str]:
    """Writes the card of `version` as Markdown and HTML; returns their paths."""
    paths = card_paths(serving_dir, version)
    tf.io.gfile.makedirs(os.path.dirname(paths["md"]))
    card = render_markdown(facts)
    push = facts["push"]
    with tf.io.gfile.GFile(paths["md"], "w") as handle:
        handle.write(card)
    with tf.io.gfile.GFile(paths["html"], "w") as handle:
        handle.write(render_html(card, f"Model card: {push['model_name']} version {push['serving_version']}"))
    return paths


def remove_cards(serving_dir: str, versions: Iterable[int]) -> None:
    """Deletes the cards (and Hugging Face exports) of versions the Pusher retired."""
    for version in versions:
        for path in card_paths(serving_dir, version).values():
            if tf.io.gfile.exists(path):
                tf.io.gfile.remove(path)
        if tf.io.gfile.isdir(hugging_face_path(serving_dir, version)):
            tf.io.gfile.rmtree(hugging_face_path(serving_dir, version))
