"""The data-quality report of one ingestion: counts per outcome, sample locations, quarantine.

Written by the ExampleGen executor's Beam pipeline to `<examples uri>/ingest_report.json`,
copied onto the Examples artifact's custom properties (so it is in ML Metadata), and read by the
run summary (`last_run.json`) and the CLI. Layout:

    {"documents_read": 120, "documents_kept": 101,
     "quarantined": {"malformed_record": 2, ...},   # rejected records, in quarantine/
     "repaired": {"invalid_utf8_replaced": 1, ...}, # kept, changed
     "removed": {"exact_duplicate": 15, "quality_stop_words": 3, ...},  # dropped by a cleaning step
     "filters": {"too_short": 0, "quality_stop_words": 3, ...},  # every enabled filter, zeros included
     "languages": {"en": 110, "zh": 10},           # language mix of what was read (language ID on)
     "length_chars": {"64": 3, "128": 40, ...},    # kept documents by length, upper bound of a 2x bucket
     "samples": {"quarantined:malformed_record": ["notes.jsonl:3", ...], ...},
     "quarantine_dir": "<examples uri>/quarantine"}

The quarantine holds `records-*.jsonl.gz` (every rejected record) and `removed-*.jsonl.gz` (the
first few documents each curation rule removed, for review).
"""
import json
import os
from typing import Any, Dict, Iterable, List, Tuple

import apache_beam as beam
import tensorflow as tf

from components.example_gen.records import Rejection

REPORT_FILE = "ingest_report.json"
QUARANTINE_DIR = "quarantine"
REPORT_PROPERTY = "ingest_report"
SAMPLES_PER_KIND = 5
OUTCOME_GROUPS = ("quarantined", "repaired", "removed")
DISTRIBUTION_GROUPS = ("languages", "length_chars")  # counted without sample locations
LENGTH_GROUP = "length_chars"


def quarantine_record(rejection: Rejection) -> str:
    """One JSON line of the quarantine output: reason, where, why, and the capped raw record."""
    return json.dumps({
        "reason": rejection.reason, "file": rejection.source, "line": rejection.line, "detail": rejection.detail,
        "raw_size": rejection.raw_size, "raw": rejection.raw.decode("utf-8", errors="backslashreplace"),
    }, ensure_ascii=False)


def removed_sample_record(rule: str, document, max_chars: int) -> str:
    """One JSON line of the removed-documents sample: the rule, where, and the (capped) text."""
    return json.dumps({"reason": f"removed:{rule}", "file": document.source, "line": document.line,
                       "language": document.language, "text": document.text[:max_chars]}, ensure_ascii=False)


def length_bucket(num_chars: int) -> str:
    """The histogram bucket of a length: the smallest power of two (at least 16) >= it."""
    bound = 16
    while bound < num_chars:
        bound *= 2
    return str(bound)


class CountAndSample(beam.CombineFn):
    """Per event kind: how many, and the first few locations in sorted order (deterministic)."""

    def create_accumulator(self) -> Tuple[int, List[str]]:
        return 0, []

    def add_input(self, accumulator, location: str):
        count, samples = accumulator
        return count + 1, sorted(samples + [location])[:SAMPLES_PER_KIND]

    def merge_accumulators(self, accumulators):
        total, merged = 0, []
        for count, samples in accumulators:
            total += count
            merged.extend(samples)
        return total, sorted(merged)[:SAMPLES_PER_KIND]

    def extract_output(self, accumulator):
        return accumulator


def build_report(entries: Iterable[Tuple[str, Any]], quarantine_dir: str) -> Dict[str, Any]:
    """Assembles the report from ('documents_read', n), ('documents_kept', n) and
    (event kind, (count, samples)) entries."""
    groups = OUTCOME_GROUPS + DISTRIBUTION_GROUPS
    report: Dict[str, Any] = {"documents_read": 0, "documents_kept": 0, **{g: {} for g in groups},
                              "samples": {}, "quarantine_dir": quarantine_dir}
    for key, value in entries:
        if key in ("documents_read", "documents_kept"):
            report[key] = value
            continue
        group, _, name = key.partition(":")
        count, samples = value
        report[group][name] = count
        if group in OUTCOME_GROUPS:
            report["samples"][key] = samples
    for group in OUTCOME_GROUPS:
        report[group] = dict(sorted(report[group].items()))
    report["languages"] = dict(sorted(report["languages"].items(), key=lambda item: (-item[1], item[0])))
    report[LENGTH_GROUP] = dict(sorted(report[LENGTH_GROUP].items(), key=lambda item: int(item[0])))
    report["samples"] = dict(sorted(report["samples"].items()))
    return report


def add_filter_counts(report: Dict[str, Any], rules: Iterable[str]) -> None:
    """Adds `filters`: the removal count of every enabled filter rule, zero when it removed nothing."""
    report["filters"] = {rule: report["removed"].get(rule, 0) for rule in rules}


def write_report(report: Dict[str, Any], directory: str) -> None:
    with tf.io.gfile.GFile(os.path.join(directory, REPORT_FILE), "w") as handle:
        handle.write(json.dumps(report, indent=2, ensure_ascii=False))


def read_report(directory: str) -> Dict[str, Any]:
    with tf.io.gfile.GFile(os.path.join(directory, REPORT_FILE)) as handle:
        return json.loads(handle.read())


def annotate_artifact(artifact, report: Dict[str, Any]) -> None:
    """Records the report on the Examples artifact: the whole JSON plus one int property per count
    (`ingest_documents_read`, `quarantined_<reason>`, `repaired_<what>`, `removed_<why>`)."""
    artifact.set_string_custom_property(REPORT_PROPERTY, json.dumps(report, ensure_ascii=False))
    artifact.set_int_custom_property("ingest_documents_read", report["documents_read"])
    artifact.set_int_custom_property("ingest_documents_kept", report["documents_kept"])
    for group in OUTCOME_GROUPS + ("languages",):
        for name, count in (report.get(group) or {}).items():
            artifact.set_int_custom_property(f"{group}_{name}", count)


def summary_lines(report: Dict[str, Any]) -> List[str]:
    """The report in plain words, for the CLI."""
    lines = [f"documents read: {report['documents_read']}, kept: {report['documents_kept']}"]
    for group in OUTCOME_GROUPS:
        counts = report.get(group) or {}
        if counts:
            listing = ", ".join(f"{name.replace('_', ' ')} {count}" for name, count in counts.items())
            lines.append(f"{group} ({sum(counts.values())}): {listing}")
    idle = [name for name, count in (report.get("filters") or {}).items() if not count]
    if idle:
        lines.append(f"filters that removed nothing ({len(idle)}): " + ", ".join(name.replace("_", " ") for name in idle))
    if report.get("languages"):
        lines.append("languages read: " + ", ".join(f"{code} {count}" for code, count in report["languages"].items()))
    if report.get("quarantined"):
        lines.append(f"quarantined records (raw + reason): {report['quarantine_dir']}")
    return lines
