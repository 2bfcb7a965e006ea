"""What an ingestion holds: plain-text documents or conversations, one kind per run.

ExampleGen counts the documents it reads per kind (`Document.kind`; the `data_kinds` group of the
ingest report, with sample locations), refuses a corpus that mixes both kinds (`corpus_kind`: a
run trains one kind of model, and a plain-text document has no reply to learn), and records the
kind on the Examples artifact as the string custom property `data_kind` and in
`ingest_report.json`. Components downstream (the curated schema import, and what prepares
training data) read it with `examples_data_kind`, at run time, the same way on both runners: the
pipeline is compiled once, and the kind is known only once the data has been read.
"""

from typing import Any, Dict, Optional

from components.example_gen import ingest_report
from components.example_gen.records import CONVERSATIONS_KIND as CONVERSATIONS
from components.example_gen.records import TEXT_KIND as TEXT
from components.example_gen.records import CorpusError

DATA_KIND_PROPERTY = ingest_report.DATA_KIND_KEY  # custom property of the Examples artifact
KIND_GROUP = ingest_report.KIND_GROUP
_NOUNS = {TEXT: ("plain-text document", "plain-text documents"), CONVERSATIONS: ("conversation", "conversations")}


def corpus_kind(report: Dict[str, Any]) -> str:
    """The one kind of the documents an ingest report counted (TEXT when none were read); raises
    CorpusError naming the first file location of each kind when both were read."""
    counts = report.get(KIND_GROUP) or {}
    if len(counts) <= 1:
        return next(iter(counts), TEXT)
    samples = report.get("samples") or {}
    found = [
        f"{counts[kind]} {_NOUNS[kind][counts[kind] != 1]} (first: {(samples.get(f'{KIND_GROUP}:{kind}') or ['?'])[0]})"
        for kind in (TEXT, CONVERSATIONS)
    ]
    raise CorpusError(
        f"the corpus mixes plain-text documents and conversations: {found[0]} and {found[1]}; a run "
        "reads one kind: keep one kind under the data root (or narrow example_gen.file_pattern), or "
        "force one with example_gen.conversation_format"
    )


def examples_data_kind(examples, report: Optional[Dict[str, Any]] = None) -> str:
    """The data kind of an Examples artifact: its `data_kind` custom property, else the one in its
    ingest report (`report`, or the artifact's own: `ingest_report.read_artifact_report`, which
    falls back to the file in its directory for a runner that does not carry custom properties),
    else TEXT (Examples written before conversations were read)."""
    if examples.has_custom_property(DATA_KIND_PROPERTY):
        return examples.get_string_custom_property(DATA_KIND_PROPERTY)
    if report is None:
        report = ingest_report.read_artifact_report(examples)
    return (report or {}).get(DATA_KIND_PROPERTY) or TEXT
