"""The data-quality report of one ingestion: counts per outcome, sample locations, quarantine.

Written by the ExampleGen executor's Beam pipeline to `<examples uri>/ingest_report.json`,
copied onto the Examples artifact's custom properties (so it is in ML Metadata), and read by the
run summary (`last_run.json`) and the CLI. Layout:

    {"documents_read": 120, "documents_kept": 101,
     "bytes_read": 48000, "bytes_kept": 40100,     # UTF-8 bytes of the documents read / kept
     "quarantined": {"malformed_record": 2, ...},   # rejected records, in quarantine/
     "repaired": {"invalid_utf8_replaced": 1, ...}, # kept, changed
     "removed": {"exact_duplicate": 15, "quality_stop_words": 3, ...},  # dropped by a cleaning step
     "exempt": {"quality_stop_words": 10, ...},     # kept from a rule not made for the document's language
     "filters": {"too_short": 0, "quality_stop_words": 3, ...},  # every enabled filter, zeros included
     "languages": {"en": 110, "zh": 10},           # language mix of what was read (language ID on)
     "data_kinds": {"text": 120},                  # documents read per kind: text or conversations
     "data_kind": "text",                          # the run's one kind (data_kind.py)
     "length_chars": {"64": 3, "128": 40, ...},    # kept documents by length, upper bound of a 2x bucket
     "samples": {"quarantined:malformed_record": ["notes.jsonl:3", ...], "data_kinds:text": [...], ...},
     "removed_examples": {"quality_top_2gram": {"location": "a.txt:9", "text": "buy now buy now ..."}, ...},
     "quarantine_dir": "<examples uri>/quarantine"}

The quarantine holds `records-*.jsonl.gz` (every rejected record) and `removed-*.jsonl.gz` (the
first few documents each curation rule removed, for review; a conversation with its turns).
"""

import gzip
import json
import os
from typing import Any, Dict, Iterable, List, Optional, Tuple

import apache_beam as beam
import tensorflow as tf

from components.example_gen.records import CONVERSATIONS_KIND, Rejection

REPORT_FILE = "ingest_report.json"
QUARANTINE_DIR = "quarantine"
REPORT_PROPERTY = "ingest_report"
SAMPLES_PER_KIND = 5
OUTCOME_GROUPS = ("quarantined", "repaired", "removed", "exempt")
DISTRIBUTION_GROUPS = ("languages", "length_chars")  # counted without sample locations
LENGTH_GROUP = "length_chars"
KIND_GROUP = "data_kinds"  # documents read per kind (`Document.kind`), with sample locations
DATA_KIND_KEY = "data_kind"  # the run's one kind (components/example_gen/data_kind.py)
GROUP_LABELS = {"exempt": "exempt from a rule not made for their language"}


def quarantine_record(rejection: Rejection) -> str:
    """One JSON line of the quarantine output: reason, where, why, and the capped raw record."""
    return json.dumps(
        {
            "reason": rejection.reason,
            "file": rejection.source,
            "line": rejection.line,
            "detail": rejection.detail,
            "raw_size": rejection.raw_size,
            "raw": rejection.raw.decode("utf-8", errors="backslashreplace"),
        },
        ensure_ascii=False,
    )


def removed_sample_record(rule: str, document, max_chars: int) -> str:
    """One JSON line of the removed-documents sample: the rule, where, and the (capped) text; for a
    conversation also its turns as [role, content] pairs (contents capped alike)."""
    record = {
        "reason": f"removed:{rule}",
        "file": document.source,
        "line": document.line,
        "language": document.language,
        "text": document.text[:max_chars],
    }
    if document.is_conversation:
        record["turns"] = [[role, content[:max_chars]] for role, content in document.turns]
    return json.dumps(record, ensure_ascii=False)


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
    """Assembles the report from (one of COUNTS, n) and (event kind, (count, samples)) entries."""
    groups = OUTCOME_GROUPS + DISTRIBUTION_GROUPS + (KIND_GROUP,)
    report: Dict[str, Any] = {
        **{count: 0 for count in COUNTS},
        **{g: {} for g in groups},
        "samples": {},
        "quarantine_dir": quarantine_dir,
    }
    for key, value in entries:
        if key in COUNTS:
            report[key] = value
            continue
        group, _, name = key.partition(":")
        count, samples = value
        report[group][name] = count
        if group in OUTCOME_GROUPS or group == KIND_GROUP:
            report["samples"][key] = samples
    for group in OUTCOME_GROUPS:
        report[group] = dict(sorted(report[group].items()))
    report["languages"] = dict(sorted(report["languages"].items(), key=lambda item: (-item[1], item[0])))
    report[LENGTH_GROUP] = dict(sorted(report[LENGTH_GROUP].items(), key=lambda item: int(item[0])))
    report["samples"] = dict(sorted(report["samples"].items()))
    return report


COUNTS = ("documents_read", "documents_kept", "bytes_read", "bytes_kept")
EXAMPLE_CHARS = 300  # characters of each rule's example document in the report


def document_bytes(document) -> int:
    """UTF-8 size of a document's text (0 for a record without text)."""
    return len((document.text or "").encode("utf-8"))


def add_removed_examples(report: Dict[str, Any], max_chars: int = EXAMPLE_CHARS) -> None:
    """Adds `removed_examples`: one document per rule that removed any, the first by position,
    from the quarantine's removed-document samples (curation rules); a rule without stored texts
    (length, dedup) gets the location of its first removal only."""
    examples: Dict[str, Dict[str, Any]] = {}
    for path in sorted(tf.io.gfile.glob(os.path.join(report["quarantine_dir"], "removed-*"))):
        with tf.io.gfile.GFile(path, "rb") as handle:
            lines = gzip.decompress(handle.read()).decode("utf-8").splitlines()
        for record in map(json.loads, filter(None, lines)):
            rule = record["reason"].partition(":")[2]
            location = f"{record['file']}:{record['line']}"
            if rule not in examples or location < examples[rule]["location"]:
                examples[rule] = {"location": location, "text": record["text"][:max_chars]}
    for rule in report.get("removed") or {}:
        if rule not in examples:
            locations = report.get("samples", {}).get(f"removed:{rule}") or [""]
            examples[rule] = {"location": locations[0], "text": None}
    report["removed_examples"] = dict(sorted(examples.items()))


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


def read_artifact_report(artifact) -> Optional[Dict[str, Any]]:
    """The report of an Examples artifact: the custom property `annotate_artifact` recorded, else
    the file in its directory (a runner that does not carry custom properties); None when it has
    neither (not ExampleGen's)."""
    if artifact.has_custom_property(REPORT_PROPERTY):
        return json.loads(artifact.get_string_custom_property(REPORT_PROPERTY))
    if artifact.uri and tf.io.gfile.exists(os.path.join(artifact.uri, REPORT_FILE)):
        return read_report(artifact.uri)
    return None


def top_removals(report: Dict[str, Any], count: int) -> List[Tuple[str, int]]:
    """The `count` rules that removed the most documents, most first."""
    return sorted((report.get("removed") or {}).items(), key=lambda item: (-item[1], item[0]))[:count]


def survival_line(report: Dict[str, Any], rules: int = 3) -> str:
    """'N of M documents survived cleaning (removed the most: rule n, ...)'."""
    line = f"{report['documents_kept']} of {report['documents_read']} documents survived cleaning"
    top = top_removals(report, rules)
    if top:
        line += " (removed the most: " + ", ".join(f"{rule} {count}" for rule, count in top) + ")"
    return line


def summary_lines(report: Dict[str, Any]) -> List[str]:
    """The report in plain words, for the CLI."""
    lines = [f"documents read: {report['documents_read']}, kept: {report['documents_kept']}"]
    if report.get(DATA_KIND_KEY) == CONVERSATIONS_KIND:
        lines[0] += " (conversations: roles and contents per turn)"
    for group in OUTCOME_GROUPS:
        counts = report.get(group) or {}
        if counts:
            listing = ", ".join(f"{name.replace('_', ' ')} {count}" for name, count in counts.items())
            lines.append(f"{GROUP_LABELS.get(group, group)} ({sum(counts.values())}): {listing}")
    idle = [name for name, count in (report.get("filters") or {}).items() if not count]
    if idle:
        lines.append(
            f"filters that removed nothing ({len(idle)}): " + ", ".join(name.replace("_", " ") for name in idle)
        )
    if report.get("languages"):
        lines.append("languages read: " + ", ".join(f"{code} {count}" for code, count in report["languages"].items()))
    if report.get("quarantined"):
        lines.append(f"quarantined records (raw + reason): {report['quarantine_dir']}")
    return lines
