"""The evaluation report: one self-contained HTML file (plots embedded as base64 PNG)."""

import base64
import html
import io
from typing import Any, Dict, List, Optional

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

MAX_FLAGGED_ROWS = 200


def _png(figure) -> str:
    buffer = io.BytesIO()
    figure.tight_layout()
    figure.savefig(buffer, format="png", dpi=90)
    plt.close(figure)
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def _perplexity_plot(quality: Dict[str, Any], threshold: Optional[float], baseline_name: str = "baseline") -> str:
    """The candidate's perplexity against the unigram reference and the threshold (when set); with
    a baseline, both models' bits per byte of the raw eval text (per-token perplexities of
    different tokenizers do not compare)."""
    figure, axis = plt.subplots(figsize=(5, 3))
    if quality.get("baseline_bits_per_byte") is not None:
        axis.bar(
            ["candidate", baseline_name],
            [quality["bits_per_byte"], quality["baseline_bits_per_byte"]],
            color=["#4c72b0", "#999999"],
        )
        axis.set_ylabel("bits per byte (raw eval text)")
    else:
        names, values = ["candidate"], [quality["perplexity"]]
        if quality.get("unigram_perplexity") is not None:
            names, values = names + ["train unigram"], values + [quality["unigram_perplexity"]]
        axis.bar(names, values, color=["#4c72b0", "#999999"][: len(names)])
        if threshold is not None:
            axis.axhline(threshold, color="#c44e52", linestyle="--", label=f"threshold {threshold:g}")
            axis.legend()
        axis.set_ylabel("eval perplexity per token")
    return _png(figure)


def _safety_plot(safety: Dict[str, Any]) -> str:
    categories = list(safety["per_category"]) + ["overall"]
    rows = [safety["per_category"][c] for c in categories[:-1]] + [safety["overall"]]
    metrics = ("toxic_fraction", "expected_max_toxicity", "toxicity_probability")
    figure, axis = plt.subplots(figsize=(8, 3.5))
    width = 0.27
    for offset, metric in enumerate(metrics):
        axis.bar(
            [i + (offset - 1) * width for i in range(len(categories))], [r[metric] for r in rows], width, label=metric
        )
    axis.set_xticks(range(len(categories)))
    axis.set_xticklabels(categories, rotation=30, ha="right")
    axis.set_ylim(0, 1)
    axis.legend(fontsize=8)
    return _png(figure)


VERDICT_COLOURS = {"flagged": "#c44e52", "passed": "#4c72b0", "unmeasured": "#bbbbbb"}


def _z_text(z) -> str:
    """A z against the placebo pairs, or '-' (evaluations written before placebo pairs)."""
    return "-" if z is None else f"{z:+.1f}"


def _placebo_pairs_text(references: Dict[str, Dict[str, Any]]) -> str:
    """What the placebo pairs show per language: the reference of the pair gates."""
    if not references:
        return ""
    rows = "; ".join(
        f"{html.escape(language)}: {r['pairs']} pairs of placebos, sentiment gap robust sd "
        f"{r['sentiment_scale']:.3f} (largest {r['largest_sentiment_gap']:.3f}), unsafe-rate difference robust sd "
        f"{r['unsafe_scale']:.3f} (largest {r['largest_unsafe_difference']:.3f})"
        for language, r in sorted(references.items())
    )
    return f"<p>A pair counts only beyond what the placebo pairs show: {rows}.</p>"


def _bias_plot(effects: List[Dict[str, Any]], threshold: float) -> str:
    """Each group's association effect against the other groups (red flagged, grey unmeasured)."""
    figure, axis = plt.subplots(figsize=(8, max(3, 0.2 * len(effects))))
    # The default matplotlib font has no CJK glyphs: non-English groups are labelled by table row.
    labels = [
        f"{i}: en {e['dimension']}: {e['group']}"
        if e["language"] == "en"
        else f"{i}: {e['language']} {e['dimension']} (table row {i})"
        for i, e in enumerate(effects)
    ]
    axis.barh(
        range(len(effects)), [e["effect"] for e in effects], color=[VERDICT_COLOURS[e["verdict"]] for e in effects]
    )
    axis.set_yticks(range(len(effects)))
    axis.set_yticklabels(labels, fontsize=6)
    axis.axvline(0, color="black", linewidth=0.5)
    axis.axvline(threshold, color="#c44e52", linewidth=0.8, linestyle="--")
    axis.set_title("association effect vs the other groups, nats/token (red: flagged, grey: unmeasured)", fontsize=9)
    return _png(figure)


def _replies_plot(replies: Dict[str, Any]) -> str:
    """Each reply metric's distribution (candidate and baseline), and the win / tie / loss bar."""
    from components.evaluator.metrics.reply_metrics import METRICS

    distributions = replies["distributions"]
    figure, axes = plt.subplots(1, len(METRICS) + 1, figsize=(4 * (len(METRICS) + 1), 3))
    for axis, metric in zip(axes, METRICS):
        axis.hist(distributions["candidate"][metric], bins=10, range=(0, 1), alpha=0.6, label="candidate")
        if distributions.get("baseline"):
            axis.hist(distributions["baseline"][metric], bins=10, range=(0, 1), alpha=0.6, label="baseline")
        axis.set_title(metric)
        axis.legend(fontsize=7)
    comparison = replies.get("comparison") or {}
    axis = axes[-1]
    if comparison:
        names = list(comparison)
        wins = [comparison[m]["wins"] for m in names]
        ties = [comparison[m]["ties"] for m in names]
        losses = [comparison[m]["losses"] for m in names]
        axis.barh(names, wins, color="tab:green", label="wins")
        axis.barh(names, ties, left=wins, color="tab:gray", label="ties")
        axis.barh(names, losses, left=[w + t for w, t in zip(wins, ties)], color="tab:red", label="losses")
        axis.legend(fontsize=7)
    axis.set_title("candidate vs baseline")
    return _png(figure)


def _replies_section(replies: Optional[Dict[str, Any]], samples: List[Dict[str, Any]]) -> str:
    """A chat model's replies: the metrics, their distributions and sampled conversations side by side."""
    if not replies or not replies.get("conversations"):
        return ""
    rows = [
        [
            metric,
            f"{value:.4f}",
            "" if not replies.get("baseline") else f"{replies['baseline'][metric]:.4f}",
            ""
            if metric not in replies.get("comparison", {})
            else "{difference:+.4f} [{low:+.4f}, {high:+.4f}], W/T/L {wins}/{ties}/{losses}".format(
                **replies["comparison"][metric]
            ),
        ]
        for metric, value in replies["candidate"].items()
    ]
    rows.append(
        [
            "stop rate",
            f"{replies['candidate_stop_rate']:.3f}",
            "" if replies.get("baseline_stop_rate") is None else f"{replies['baseline_stop_rate']:.3f}",
            "",
        ]
    )
    side_by_side = [
        [
            "\n".join(f"{turn['role']}: {turn['content']}" for turn in sample["prompt"]),
            sample["reference"],
            sample["candidate"] + ("" if sample["candidate_stopped"] else " [did not stop]"),
            sample["baseline"] if sample["baseline"] is not None else "",
            ", ".join(f"{m} {v:.2f}" for m, v in sample["candidate_scores"].items()),
        ]
        for sample in samples
    ]
    return (
        f"<h2>Replies ({replies['conversations']} eval conversations, each model through its chat template)</h2>"
        + _table(["metric", "candidate", "baseline", "difference (bootstrap interval), wins/ties/losses"], rows)
        + f"<img src='data:image/png;base64,{_replies_plot(replies)}'>"
        + "<h3>Sampled conversations</h3>"
        + _table(["conversation", "reference", "candidate", "baseline", "candidate's scores"], side_by_side)
    )


def _table(headers: List[str], rows: List[List[Any]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _baseline_comparison_section(comparison: Optional[Dict[str, Any]], baseline_name: str) -> str:
    """Safety and bias of the candidate beside the baseline's (reported, not gated)."""
    if not comparison:
        return ""
    if "skipped" in comparison:
        return f"<h2>Safety and bias against the {baseline_name}</h2><p>Not compared: {html.escape(comparison['skipped'])}</p>"
    safety_rows = [
        [name, f"{v['candidate']:.3f}", f"{v['baseline']:.3f}", f"{v['change']:+.3f}"]
        for name, v in comparison["safety"].items()
    ]
    bias_rows = [
        [
            c["language"],
            c["dimension"],
            c["group"],
            f"{c['candidate_effect']:+.3f}",
            c["candidate_verdict"],
            f"{c['baseline_effect']:+.3f}",
            c["baseline_verdict"],
            f"{c['change']:+.3f}",
        ]
        for c in comparison["bias"]
    ]
    return (
        f"<h2>Safety and bias against the {baseline_name} (reported, not gated)</h2>"
        + _table(["safety metric", "candidate", baseline_name, "change"], safety_rows)
        + _table(
            [
                "lang",
                "dimension",
                "group",
                "candidate effect",
                "verdict",
                f"{baseline_name} effect",
                "verdict",
                "change",
            ],
            bias_rows,
        )
    )


# Which gates each timed family decides (`Evaluation.seconds`), by gate-name prefix.
_FAMILY_GATES = {
    "quality": ("quality.perplexity", "quality.gain_over_unigram", "quality.bits_per_byte_change"),
    "replies": ("quality.reply_", "quality.stop_rate"),
    "instruction_following": ("quality.instruction_following",),
    "safety": (
        "safety.toxic_fraction",
        "safety.expected_max_toxicity",
        "safety.toxicity_probability",
        "safety.pii_leak_rate",
    ),
    "memorization": ("safety.memorization",),
    "bias": ("bias.",),
    "baseline_comparison": (),
}


def _family_work(family: str, metrics: Dict[str, Any]) -> str:
    """What a family's time bought, in texts scored or generated."""
    quality, bias = metrics.get("quality") or {}, metrics.get("bias") or {}
    comparison = metrics.get("baseline_comparison") or {}
    work = {
        "quality": f"{quality.get('num_tokens', 0):,} eval tokens scored"
        + (
            f", raw eval text ({quality.get('text_bytes') or 0:,} bytes) per model" if quality.get("text_bytes") else ""
        ),
        "replies": f"{(metrics.get('replies') or {}).get('conversations', 0)} replies generated per model",
        "safety": f"{(metrics.get('safety') or {}).get('overall', {}).get('completions', 0)} red-team completions",
        "memorization": f"{(metrics.get('memorization') or {}).get('documents_probed', 0)} training documents continued",
        "bias": f"{bias.get('scored_texts', 0):,} texts scored, {bias.get('texts', 0):,} continuations sampled",
        "baseline_comparison": "the baseline's safety and bias probes, "
        + (
            "read back from an earlier run"
            if comparison.get("baseline_probes") == "reused"
            else "run"
            if comparison.get("baseline_probes")
            else "not compared"
        ),
    }
    return work.get(family, "")


def _cost_section(evaluation: Dict[str, Any]) -> str:
    """Each gate family's wall time beside what it measured and the gates it decides."""
    seconds = evaluation.get("seconds") or {}
    if not seconds:
        return ""
    gates = [g["name"] for g in evaluation["gates"]]
    rows = []
    for family, value in seconds.items():
        decided = [name for name in gates if name.startswith(_FAMILY_GATES.get(family, (f"{family}.",)))]
        rows.append(
            [
                family.replace("_", " "),
                f"{value:.1f}",
                _family_work(family, evaluation["metrics"]),
                ", ".join(decided) or "none (reported)",
            ]
        )
    total = sum(seconds.values())
    return f"<h2>What the evaluation cost ({total:.0f} s)</h2>" + _table(
        ["family", "seconds", "what it measured", "gates it decides"], rows
    )


def render_report(evaluation: Dict[str, Any], model_uri: str) -> str:
    """The HTML report of an evaluation dict (`Evaluation.to_dict()`)."""
    metrics = evaluation["metrics"]
    gates = evaluation["gates"]
    perplexity_gate = next(g for g in gates if g["name"] == "quality.perplexity")
    threshold = None if perplexity_gate["verdict"] == "SKIPPED" else perplexity_gate["threshold"]
    verdict = "BLESSED" if evaluation["blessed"] else "NOT BLESSED"
    baseline_name = (
        "base checkpoint" if (evaluation.get("baseline") or {}).get("kind") == "base_checkpoint" else "baseline"
    )
    sections = [
        f"<h1>Model evaluation: {verdict}</h1><p>Model: <code>{html.escape(model_uri)}</code></p>"
        f"<p>{html.escape(evaluation['reason'])}</p>",
        "<h2>Gates</h2>"
        + _table(
            ["gate", "value", "threshold", "verdict", "reason"],
            [
                [
                    g["name"],
                    "" if g["value"] is None else f"{g['value']:.4g}",
                    g["threshold"],
                    g["verdict"],
                    g["reason"],
                ]
                for g in gates
            ],
        ),
        f"<h2>Quality vs {baseline_name}</h2><img src='data:image/png;base64,{_perplexity_plot(metrics['quality'], threshold, baseline_name)}'>",
        f"<h2>Safety rates per category</h2><img src='data:image/png;base64,{_safety_plot(metrics['safety'])}'>"
        f"<p>PII leak rate: {metrics['safety']['pii']['leak_rate']:.3f}. Memorisation: "
        f"{html.escape(str(metrics.get('memorization') or 'not run'))}</p>",
    ]
    bias = metrics["bias"]
    effects = bias["group_effects"]
    if effects:
        threshold = next(g["threshold"] for g in gates if g["name"] == "bias.association")
        sections.append(
            f"<h2>Bias: association per group ({sum(bias['placebos'].values())} placebo terms)</h2>"
            f"<img src='data:image/png;base64,{_bias_plot(effects, threshold)}'>"
            + _table(
                [
                    "#",
                    "lang",
                    "dimension",
                    "group",
                    "likelier than placebos",
                    "effect (nats/token)",
                    "templates leaning negative",
                    "sign test p (corrected)",
                    "z vs placebos",
                    "verdict",
                ],
                [
                    [
                        i,
                        e["language"],
                        e["dimension"],
                        e["group"],
                        f"{e['familiarity_rank']:.0%}",
                        f"{e['effect']:+.3f}",
                        f"{e['templates_negative']} of {e['templates']}",
                        f"{e['sign_p']:.3g}",
                        "-" if e["z"] is None else f"{e['z']:+.1f}",
                        e["verdict"],
                    ]
                    for i, e in enumerate(effects)
                ],
            )
        )
    if bias["pairs"]:
        sections.append(
            "<h2>Bias: sampled continuations per group pair</h2>"
            + _placebo_pairs_text(bias.get("placebo_pairs") or {})
            + _table(
                [
                    "lang",
                    "dimension",
                    "group a",
                    "group b",
                    "sentiment gap",
                    "q (BH)",
                    "z vs placebo pairs",
                    "scorer",
                    "unsafe ratio",
                    "q (BH)",
                    "z vs placebo pairs",
                ],
                [
                    [
                        p["language"],
                        p["dimension"],
                        p["group_a"],
                        p["group_b"],
                        f"{p['sentiment_gap']:+.3f}",
                        f"{p['sentiment_q_value']:.3f}",
                        _z_text(p.get("sentiment_placebo_z")),
                        p["sentiment_scorer"],
                        f"{p['unsafe_rate_ratio']:.2f}",
                        f"{p['unsafe_q_value']:.3f}",
                        _z_text(p.get("unsafe_placebo_z")),
                    ]
                    for p in bias["pairs"]
                ],
            )
        )
    sections.append(_replies_section(metrics.get("replies"), evaluation.get("samples") or []))
    sections.append(_baseline_comparison_section(metrics.get("baseline_comparison"), baseline_name))
    sections.append(_cost_section(evaluation))
    flagged = evaluation["flagged"][:MAX_FLAGGED_ROWS]
    sections.append(
        f"<h2>Flagged completions ({len(evaluation['flagged'])})</h2>"
        + _table(
            ["gate", "category", "lang", "prompt", "completion", "found"],
            [
                [f["gate"], f["category"], f["language"], f["prompt"], f["completion"], ", ".join(map(str, f["found"]))]
                for f in flagged
            ],
        )
    )
    style = (
        "body{font-family:sans-serif;max-width:1100px;margin:auto}table{border-collapse:collapse;font-size:12px}"
        "td,th{border:1px solid #ccc;padding:3px;vertical-align:top;white-space:pre-wrap}"
    )
    return f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{verdict}</title><style>{style}</style></head><body>{''.join(sections)}</body></html>"
