"""A small, self-contained HTML page of one ingestion's data quality, written next to
`ingest_report.json`: counts per outcome and rule, the language mix, and the length histogram.

Plain HTML with inline bars (no scripts, no external assets), so it opens anywhere, including
from an object store's browser.
"""

import html
import os
from typing import Dict, List

import tensorflow as tf

HTML_FILE = "data_report.html"
_STYLE = (
    "body{font-family:sans-serif;margin:2em;max-width:60em}table{border-collapse:collapse;margin-bottom:1.5em}"
    "td,th{padding:2px 8px;text-align:left;border-bottom:1px solid #ddd}"
    ".bar{background:#4a7ab5;height:0.9em;display:inline-block}"
)


def _table(title: str, counts: Dict[str, int], total: int) -> List[str]:
    if not counts:
        return [f"<h2>{html.escape(title)}</h2><p>none</p>"]
    rows = [f"<h2>{html.escape(title)}</h2><table><tr><th>name</th><th>count</th><th>share</th><th></th></tr>"]
    for name, count in counts.items():
        share = count / total if total else 0.0
        rows.append(
            f"<tr><td>{html.escape(str(name))}</td><td>{count}</td><td>{share:.1%}</td>"
            f"<td><span class='bar' style='width:{max(1, round(300 * share))}px'></span></td></tr>"
        )
    rows.append("</table>")
    return rows


def _removed_examples(report: Dict) -> List[str]:
    """The rules that removed documents, most first, each with its count and one example."""
    removed, examples = report.get("removed") or {}, report.get("removed_examples") or {}
    if not removed:
        return []
    rows = [
        "<h2>What each rule removed, most first, with one example</h2><table>"
        "<tr><th>rule</th><th>removed</th><th>first example</th></tr>"
    ]
    for rule, count in sorted(removed.items(), key=lambda item: (-item[1], item[0])):
        example = examples.get(rule) or {}
        text = example.get("text")
        shown = f"<pre>{html.escape(text)}</pre>" if text is not None else "(text not kept for this rule)"
        rows.append(
            f"<tr><td>{html.escape(rule)}</td><td>{count}</td>"
            f"<td>{html.escape(example.get('location') or '')}{shown}</td></tr>"
        )
    rows.append("</table>")
    return rows


def render(report: Dict) -> str:
    """The HTML page for an ingest report (see `ingest_report` for its layout)."""
    read, kept = report.get("documents_read", 0), report.get("documents_kept", 0)
    parts = [
        f"<!doctype html><html><head><meta charset='utf-8'><title>Data report</title><style>{_STYLE}</style>"
        f"</head><body><h1>Data report</h1><p>documents read: <b>{read}</b>, kept: <b>{kept}</b>"
        f" ({kept / read if read else 0:.1%}); spans: {html.escape(str(report.get('spans', [])))}"
        f"; data kind: {html.escape(str(report.get('data_kind', 'text')))}</p>"
    ]
    parts += _table(
        "Removed, per rule (every enabled filter)", report.get("filters") or report.get("removed", {}), read
    )
    parts += _removed_examples(report)
    parts += _table("Exempt from a quality rule not made for their language, per rule", report.get("exempt", {}), read)
    parts += _table("Quarantined records, per reason", report.get("quarantined", {}), read)
    parts += _table("Repaired, per repair", report.get("repaired", {}), read)
    parts += _table("Language mix of the documents read", report.get("languages", {}), read)
    lengths = {f"\u2264 {bound} chars": count for bound, count in report.get("length_chars", {}).items()}
    parts += _table("Length of the kept documents", lengths, kept)
    parts.append(
        f"<p>Quarantine (rejected records and samples of removed documents): "
        f"{html.escape(str(report.get('quarantine_dir', '')))}</p></body></html>"
    )
    return "\n".join(parts)


def write(report: Dict, directory: str) -> str:
    """Writes `data_report.html` into `directory`; returns its path."""
    path = os.path.join(directory, HTML_FILE)
    with tf.io.gfile.GFile(path, "w") as handle:
        handle.write(render(report))
    return path
