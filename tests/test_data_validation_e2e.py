"""End to end: `textgen validate` on successive data drops (spans), through the real ExampleGen,
StatisticsGen, ExampleValidator, DistributionValidator and DataGate under LocalDagRunner.

A span whose length distribution matches the last accepted span passes; a span whose documents
are three times longer is flagged as drift and blocked (or only warned about when
`data_gate.drift_action=warn`), and a blocked span never becomes the drift baseline. The bundled
instruction data passes as conversations, checked against the conversation schema.
"""

import json
import os
import random

import pytest

from tests.conftest import BUNDLED_TXT
from textgen_cli.cli import EXIT_BLOCKED, EXIT_OK, main

pytestmark = pytest.mark.slow


def _paragraphs():
    with open(BUNDLED_TXT, encoding="utf-8") as handle:
        paragraphs = [p.strip() for p in handle.read().split("\n\n") if p.strip()]
    random.Random(7).shuffle(paragraphs)
    return paragraphs


def _write_span(data_root, span, documents):
    directory = os.path.join(data_root, f"span-{span}")
    os.makedirs(directory)
    with open(os.path.join(directory, "replies.txt"), "w", encoding="utf-8") as handle:
        handle.write("\n\n".join(documents) + "\n")


def _validate(data_root, output_root, *overrides):
    # The quality rules are off: span 3 joins three replies into one document, which repeats their
    # greeting and sign-off lines, and the duplicate-line rules would remove what the drift check
    # is meant to see.
    arguments = [
        "validate",
        "--data-root",
        str(data_root),
        "--output-root",
        str(output_root),
        "--set",
        "example_gen.file_pattern=span-{SPAN}/*",
        "--set",
        "cleaning.quality.enabled=false",
    ]
    for override in overrides:
        arguments += ["--set", override]
    exit_code = main(arguments)
    with open(os.path.join(output_root, "last_run.json"), encoding="utf-8") as handle:
        return exit_code, json.load(handle)


def test_drift_between_spans_is_measured_flagged_and_blocked(tmp_path, capsys):
    paragraphs = _paragraphs()
    data_root, output_root = tmp_path / "drops", tmp_path / "out"
    _write_span(data_root, 1, paragraphs[:500])
    exit_code, first = _validate(data_root, output_root)
    assert exit_code == EXIT_OK, first["error"]
    assert "first run" in first["distribution_checks"]["skipped"]["drift"]
    assert first["components"]["RecordAcceptedStatistics"] == "COMPLETE"
    assert first["components"].keys() == {
        "ExampleGen",
        "StatisticsGen",
        "SchemaGen",
        "ExampleValidator",
        "DistributionValidator",
        "DataGate",
        "RecordAcceptedStatistics",
    }

    # Span 2: other documents, same kind and length distribution: compared with span 1, passes.
    _write_span(data_root, 2, paragraphs[500:1000])
    exit_code, unshifted = _validate(data_root, output_root)
    assert exit_code == EXIT_OK, unshifted["error"]
    checks = unshifted["distribution_checks"]
    assert checks["drift_baseline_span"] == 1 and "drift" not in checks["skipped"]
    drift = {m["feature"]: m for m in checks["measurements"] if m["check"] == "drift"}
    assert {"num_chars", "letter_fraction", "digit_fraction", "whitespace_fraction"} <= set(drift)
    assert all(m["divergence"] <= m["threshold"] for m in drift.values())
    assert "drift check (this span vs accepted span 1)" in capsys.readouterr().out

    # Span 3: every document three replies long: drift on the length distribution blocks it.
    longer = ["\n".join(paragraphs[i : i + 3]) for i in range(1000, 1600, 3)]
    _write_span(data_root, 3, longer)
    exit_code, shifted = _validate(data_root, output_root)
    assert exit_code == EXIT_BLOCKED
    assert shifted["components"]["DataGate"] == "FAILED"
    assert shifted["components"]["RecordAcceptedStatistics"] == "NOT_RUN"
    assert shifted["distribution_checks"]["drift_baseline_span"] == 2
    flagged = [a for a in shifted["anomalies"] if a["data"] == "raw data distribution"]
    assert "num_chars" in {a["feature"] for a in flagged} and {a["split"] for a in flagged} == {"drift"}
    assert "num_chars" in shifted["error"] and "Jensen-Shannon" in shifted["error"]
    printed = capsys.readouterr().out
    assert "anomaly in raw data distribution [drift] num_chars" in printed

    # The same span with drift set to warn passes; the blocked run did not move the baseline.
    exit_code, warned = _validate(data_root, output_root, "data_gate.drift_action=warn")
    assert exit_code == EXIT_OK, warned["error"]
    assert warned["distribution_checks"]["drift_baseline_span"] == 2
    assert "num_chars" in {a["feature"] for a in warned["anomalies"] if a["split"] == "drift"}


def test_validate_on_the_bundled_conversations_passes_the_gate_with_the_conversation_schema(tmp_path, capsys):
    """The bundled instruction data through the real data stages: read as conversations, scrubbed,
    checked against the conversation schema (its reply and prompt lengths compared train vs eval)."""
    output_root = tmp_path / "out"
    exit_code = main(["validate", "--data-root", "bundled:data/instructions", "--output-root", str(output_root)])
    with open(os.path.join(output_root, "last_run.json"), encoding="utf-8") as handle:
        summary = json.load(handle)
    assert exit_code == EXIT_OK, summary["error"]
    assert summary["components"]["DataGate"] == "COMPLETE" and summary["anomalies"] == []
    quality = summary["data_quality"]
    assert (quality["data_kind"], quality["data_kinds"], quality["quarantined"]) == (
        "conversations",
        {"conversations": 3000},
        {},
    )
    assert quality["repaired"]["pii_email_scrubbed"] == 88 and quality["repaired"]["pii_phone_scrubbed"] == 15
    assert (quality["documents_kept"], quality["removed"]) == (3000, {})  # all differ, none breaks a default rule
    skew = {m["feature"] for m in summary["distribution_checks"]["measurements"] if m["check"] == "skew"}
    assert {"assistant_chars", "prompt_chars"} <= skew  # the conversation schema's comparators ran
    assert "documents read: 3000, kept: 3000 (conversations: roles and contents per turn)" in capsys.readouterr().out
