"""The data gate's check on what cleaning removed.

A cleaning rule that does not fit the corpus (web-crawl rules on poems, English rules on Chinese)
removes most of it without failing anything: the few documents left pass every schema check and
the run trains on them. So the gate also reads ExampleGen's ingest report (on the Examples
artifact: `ingest_report.read_artifact_report`) and compares the share of the documents, and of
their UTF-8 bytes, that cleaning removed with `data_gate.max_removed_fraction`. Records
quarantined while reading (not parseable) are not cleaning removals and do not count. Over the
limit, the finding names the rules that removed the most, each with its count and one example
document.
"""

import json
from typing import Any, Dict, List, NamedTuple, Optional, Tuple

from components.example_gen import ingest_report

TOP_RULES = 3  # rules named in a finding
EXAMPLE_CHARS = 120  # characters of an example document quoted in the message


class RemovalFinding(NamedTuple):
    """Cleaning removed more than the limit: how much, and who removed it."""

    documents_fraction: float
    bytes_fraction: Optional[float]  # None when the report has no byte counts
    limit: float
    documents_read: int
    documents_kept: int
    top_rules: List[Tuple[str, int, Dict[str, Any]]]  # (rule, removed, {"location", "text"})

    def message(self) -> str:
        """The finding in plain words, one rule per line."""
        shares = f"{self.documents_fraction:.1%} of the documents"
        if self.bytes_fraction is not None:
            shares += f" and {self.bytes_fraction:.1%} of the bytes"
        lines = [
            f"cleaning removed {shares} (read {self.documents_read}, kept {self.documents_kept}; "
            f"data_gate.max_removed_fraction={self.limit}); the rules that removed the most:"
        ]
        for rule, count, example in self.top_rules:
            quoted = (example.get("text") or "").replace("\n", " ")[:EXAMPLE_CHARS]
            where = example.get("location") or "?"
            lines.append(
                f"  - {rule}: {count} (e.g. {where}{': ' + json.dumps(quoted, ensure_ascii=False) if quoted else ''})"
            )
        lines.append(
            "if the corpus is meant to be like this, choose another cleaning.profile or switch those rules "
            "off (cleaning.quality.*), or set data_gate.removal_action=warn"
        )
        return "\n".join(lines)


def _fraction(read: int, kept: int) -> float:
    return (read - kept) / read if read else 0.0


def removal_finding(report: Dict[str, Any], max_removed_fraction: float) -> Optional[RemovalFinding]:
    """The finding when cleaning removed more than `max_removed_fraction` of the documents or of
    the bytes in `report` (an ingest report), else None. A limit of 1 never finds anything."""
    read, kept = report.get("documents_read", 0), report.get("documents_kept", 0)
    documents = _fraction(read, kept)
    bytes_fraction = _fraction(report["bytes_read"], report.get("bytes_kept", 0)) if report.get("bytes_read") else None
    if documents <= max_removed_fraction and (bytes_fraction or 0.0) <= max_removed_fraction:
        return None
    examples = report.get("removed_examples") or {}
    ranked = ingest_report.top_removals(report, TOP_RULES)
    return RemovalFinding(
        documents,
        bytes_fraction,
        max_removed_fraction,
        read,
        kept,
        [(rule, count, examples.get(rule) or {}) for rule, count in ranked],
    )
