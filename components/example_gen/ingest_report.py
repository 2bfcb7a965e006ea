"""The data-quality report of one ingestion: counts per outcome, sample locations, quarantine.

Written by the ExampleGen executor's Beam pipeline to `<examples uri>/ingest_report.json`,
copied onto the Examples artifact's custom properties (so it is in ML Metadata), and read by the
run summary (`last_run.json`) and the CLI. Layout:

    {"documents_read": 120, "documents_kept": 101,
     "quarantined": {"malformed_record": 2, ...},   # rejected records, in quarantine/
     "repaired": {"invalid_utf8_replaced": 1, ...}, # kept, changed
     "removed": {"exact_duplicate": 15, ...},       # dropped by a cleaning step
     "samples": {"quarantined:malformed_record": ["notes.jsonl:3", ...], ...},
     "quarantine_dir": "<examples uri>/quarantine"}
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


def quarantine_record(rejection: Rejection) -> str:
    """One JSON line of the quarantine output: reason, where, why, and the capped raw record."""
    return json.dumps({
        "reason": rejection.reason, "file": rejection.source, "line": rejection.line, "detail": rejection.detail,
        "raw_size": rejection.raw_size, "raw": rejection.raw.decode("utf-8", errors="backslashreplace"),
    }, ensure_ascii=False)


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
    report: Dict[str, Any] = {"documents_read": 0, "documents_kept": 0, **{g: {} for g in OUTCOME_GROUPS},
                              "samples": {}, "quarantine_dir": quarantine_dir}
    for key, value in entries:
        if key in ("documents_read", "documents_kept"):
            report[key] = value
            continue
        group, _, name = key.partition(":")
        count, samples = value
        report[group][name] = count
        report["samples"][key] = samples
    for group in OUTCOME_GROUPS:
        report[group] = dict(sorted(report[group].items()))
    report["samples"] = dict(sorted(report["samples"].items()))
    return report


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
    for group in OUTCOME_GROUPS:
        for name, count in report[group].items():
            artifact.set_int_custom_property(f"{group}_{name}", count)


def summary_lines(report: Dict[str, Any]) -> List[str]:
    """The report in plain words, for the CLI."""
    lines = [f"documents read: {report['documents_read']}, kept: {report['documents_kept']}"]
    for group in OUTCOME_GROUPS:
        counts = report.get(group) or {}
        if counts:
            listing = ", ".join(f"{name.replace('_', ' ')} {count}" for name, count in counts.items())
            lines.append(f"{group} ({sum(counts.values())}): {listing}")
    if report.get("quarantined"):
        lines.append(f"quarantined records (raw + reason): {report['quarantine_dir']}")
    return lines
