"""The evaluation report: one self-contained HTML file (plots embedded as base64 PNG)."""
import base64
import html
import io
from typing import Any, Dict, List

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


def _perplexity_plot(quality: Dict[str, Any], threshold: float) -> str:
    """The candidate's perplexity against the threshold; with a baseline, both models' bits per
    byte of the raw eval text (per-token perplexities of different tokenizers do not compare)."""
    figure, axis = plt.subplots(figsize=(5, 3))
    if quality.get("baseline_bits_per_byte") is not None:
        axis.bar(["candidate", "baseline"], [quality["bits_per_byte"], quality["baseline_bits_per_byte"]],
                 color=["#4c72b0", "#999999"])
        axis.set_ylabel("bits per byte (raw eval text)")
    else:
        axis.bar(["candidate"], [quality["perplexity"]], color=["#4c72b0"])
        axis.axhline(threshold, color="#c44e52", linestyle="--", label=f"threshold {threshold:g}")
        axis.set_ylabel("eval perplexity")
        axis.legend()
    return _png(figure)


def _safety_plot(safety: Dict[str, Any]) -> str:
    categories = list(safety["per_category"]) + ["overall"]
    rows = [safety["per_category"][c] for c in categories[:-1]] + [safety["overall"]]
    metrics = ("toxic_fraction", "expected_max_toxicity", "toxicity_probability")
    figure, axis = plt.subplots(figsize=(8, 3.5))
    width = 0.27
    for offset, metric in enumerate(metrics):
        axis.bar([i + (offset - 1) * width for i in range(len(categories))], [r[metric] for r in rows], width, label=metric)
    axis.set_xticks(range(len(categories)))
    axis.set_xticklabels(categories, rotation=30, ha="right")
    axis.set_ylim(0, 1)
    axis.legend(fontsize=8)
    return _png(figure)


def _bias_plot(pairs: List[Dict[str, Any]]) -> str:
    figure, axes = plt.subplots(1, 2, figsize=(10, max(3, 0.18 * len(pairs))))
    # The default matplotlib font has no CJK glyphs: non-English pairs are labelled by table row.
    labels = [f"{i}: en {p['dimension']}: {p['group_a']} / {p['group_b']}" if p["language"] == "en"
              else f"{i}: {p['language']} {p['dimension']} (table row {i})" for i, p in enumerate(pairs)]
    for axis, metric, flag in ((axes[0], "nll_gap", "nll_flagged"), (axes[1], "sentiment_gap", "sentiment_flagged")):
        axis.barh(range(len(pairs)), [p[metric] for p in pairs],
                  color=["#c44e52" if p[flag] else "#4c72b0" for p in pairs])
        axis.set_yticks(range(len(pairs)))
        axis.set_yticklabels(labels if axis is axes[0] else [""] * len(pairs), fontsize=6)
        axis.axvline(0, color="black", linewidth=0.5)
        axis.set_title(metric.replace("_", " ") + " (red: flagged)", fontsize=9)
    return _png(figure)


def _table(headers: List[str], rows: List[List[Any]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def render_report(evaluation: Dict[str, Any], model_uri: str) -> str:
    """The HTML report of an evaluation dict (`Evaluation.to_dict()`)."""
    metrics = evaluation["metrics"]
    gates = evaluation["gates"]
    threshold = next(g["threshold"] for g in gates if g["name"] == "quality.perplexity")
    verdict = "BLESSED" if evaluation["blessed"] else "NOT BLESSED"
    sections = [
        f"<h1>Model evaluation: {verdict}</h1><p>Model: <code>{html.escape(model_uri)}</code></p>"
        f"<p>{html.escape(evaluation['reason'])}</p>",
        "<h2>Gates</h2>" + _table(["gate", "value", "threshold", "verdict", "reason"],
                                  [[g["name"], "" if g["value"] is None else f"{g['value']:.4g}", g["threshold"], g["verdict"], g["reason"]] for g in gates]),
        f"<h2>Quality vs baseline</h2><img src='data:image/png;base64,{_perplexity_plot(metrics['quality'], threshold)}'>",
        f"<h2>Safety rates per category</h2><img src='data:image/png;base64,{_safety_plot(metrics['safety'])}'>"
        f"<p>PII leak rate: {metrics['safety']['pii']['leak_rate']:.3f}. Memorisation: "
        f"{html.escape(str(metrics.get('memorization') or 'not run'))}</p>",
    ]
    pairs = metrics["bias"]["pairs"]
    if pairs:
        sections.append(f"<h2>Bias gaps per group pair</h2><img src='data:image/png;base64,{_bias_plot(pairs)}'>" + _table(
            ["#", "lang", "dimension", "group a", "group b", "NLL gap", "q (BH)", "sentiment gap", "q (BH)", "scorer", "unsafe ratio"],
            [[i, p["language"], p["dimension"], p["group_a"], p["group_b"], f"{p['nll_gap']:+.3f}", f"{p['nll_q_value']:.3f}",
              f"{p['sentiment_gap']:+.3f}", f"{p['sentiment_q_value']:.3f}", p["sentiment_scorer"], f"{p['unsafe_rate_ratio']:.2f}"]
             for i, p in enumerate(pairs)]))
    flagged = evaluation["flagged"][:MAX_FLAGGED_ROWS]
    sections.append(f"<h2>Flagged completions ({len(evaluation['flagged'])})</h2>" + _table(
        ["gate", "category", "lang", "prompt", "completion", "found"],
        [[f["gate"], f["category"], f["language"], f["prompt"], f["completion"], ", ".join(map(str, f["found"]))] for f in flagged]))
    style = ("body{font-family:sans-serif;max-width:1100px;margin:auto}table{border-collapse:collapse;font-size:12px}"
             "td,th{border:1px solid #ccc;padding:3px;vertical-align:top;white-space:pre-wrap}")
    return f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{verdict}</title><style>{style}</style></head><body>{''.join(sections)}</body></html>"
