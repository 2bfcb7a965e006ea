"""A file-based ExampleGen executor for text corpora that cannot be broken by bad input.

`TextCorpusExampleGen` (component.py) runs it. The executor first resolves the span the way
TFX's FileBasedExampleGen driver would (`{SPAN}` / `{YYYY}{MM}{DD}` patterns, latest span by
default or the one `range_config` asks for, with TFX's own `FileBasedInputProcessor`) and records
span, version and input fingerprint on the output artifact; doing it here rather than in a driver
is what makes it run on open-source Kubeflow Pipelines. The base executor splits train/eval by
hash and writes GZIP TFRecords. This executor supplies the Beam transform in between:

    corpus files -> readers (Document | Rejection) -> CleanDocuments -> tf.train.Example

with features

    text       bytes   the cleaned document
    source     bytes   the corpus file it came from (relative to the input base)
    <field>    bytes   each configured metadata field the record has
    num_chars, letter_fraction, digit_fraction, whitespace_fraction, content_class
               the document's text statistics (`text_profile`), which the curated schema
               constrains and the drift/skew checks compare
    language, language_confidence
               the identified language (ISO 639-1) and its probability, when
               `cleaning.language_id` is on

and, for conversations (instruction data: `formats/conversations.py`), where `text` is the
turns' contents joined with a blank line (so every text statistic describes the whole
conversation):

    roles      bytes   one per turn: system, user or assistant
    contents   bytes   one per turn, parallel to roles, cleaned
    num_turns, assistant_turns
               int64   the number of turns, and of assistant turns
    assistant_chars, prompt_chars
               int64   characters of the assistant turns, and of the system and user turns

The Examples artifact records which kind it holds (`data_kind`: text or conversations); a corpus
that mixes both fails the run, naming a file of each (`data_kind.corpus_kind`).

and writes, inside the Examples artifact's directory, `quarantine/` (gzipped JSON lines of every
rejected record: reason, file, line, detail, capped raw bytes; and samples of the documents
each curation rule removed), `ingest_report.json` (see `ingest_report`) and `data_report.html`
(`data_report`). The report is also copied onto the artifact's custom properties. If no document
survives, the execution fails with the counts.

With a span range (`span_range` module) it also reads the earlier spans of the range; the spans
read are in the report (`spans`) and on the artifact (custom property `spans`).

Custom config keys (`components/example_gen/options.py`): 'example_gen' and 'cleaning', the JSON
text of `ExampleGenOptions` and `CleaningOptions`, and 'corpus_fingerprint' (only a cache key, see
`corpus_fingerprint`).
"""

import json
import os
from typing import Any, Dict, List, Optional

import apache_beam as beam
import tensorflow as tf
from tfx.components.example_gen import driver as example_gen_driver
from tfx.components.example_gen import input_processor
from tfx.components.example_gen import utils as example_gen_utils
from tfx.components.example_gen.base_example_gen_executor import BaseExampleGenExecutor
from tfx.proto import example_gen_pb2, range_config_pb2
from tfx.types import artifact_utils, standard_component_specs
from tfx.utils import proto_utils

from components import filesystems
from components.example_gen import data_kind, data_report, ingest_report, span_range
from components.example_gen.cleaning.events import EVENTS_TAG, event
from components.example_gen.cleaning.transforms import CleanDocuments, enabled_removal_rules
from components.example_gen.options import (
    CLEANING_OPTIONS_KEY,
    EXAMPLE_GEN_OPTIONS_KEY,
    CleaningOptions,
    ExampleGenOptions,
    ReadOptions,
)
from components.example_gen.readers import CorpusError, Document, Rejection, read_corpus_file
from components.example_gen.records import ASSISTANT, PROMPT_ROLES
from components.example_gen.text_profile import profile_text

_REPORT_DIR_KEY = "_textgen_report_dir"  # private exec property: where the report and quarantine go
_EARLIER_SPANS_KEY = "_textgen_earlier_spans"  # private exec property: [[span, resolved pattern], ...]


def _bytes_feature(value: str) -> tf.train.Feature:
    return _strings_feature([value])


def _strings_feature(values) -> tf.train.Feature:
    return tf.train.Feature(bytes_list=tf.train.BytesList(value=[value.encode("utf-8") for value in values]))


def _int_feature(value: int) -> tf.train.Feature:
    return tf.train.Feature(int64_list=tf.train.Int64List(value=[value]))


def conversation_features(document: Document) -> Dict[str, tf.train.Feature]:
    """The turn features of a conversation (see the module docstring)."""
    roles = [role for role, _ in document.turns]
    return {
        "roles": _strings_feature(roles),
        "contents": _strings_feature([content for _, content in document.turns]),
        "num_turns": _int_feature(len(roles)),
        "assistant_turns": _int_feature(roles.count(ASSISTANT)),
        "assistant_chars": _int_feature(sum(map(len, document.contents_of((ASSISTANT,))))),
        "prompt_chars": _int_feature(sum(map(len, document.contents_of(PROMPT_ROLES)))),
    }


def document_to_example(document: Document) -> tf.train.Example:
    """Encodes one document as a tf.Example (see the module docstring for the features)."""
    features = {name: _bytes_feature(value) for name, value in document.metadata}
    features["source"] = _bytes_feature(document.source)
    if document.text is not None:
        profile = profile_text(document.text)
        features["text"] = _bytes_feature(document.text)
        features["num_chars"] = _int_feature(profile.num_chars)
        for name, value in profile.float_features().items():
            features[name] = tf.train.Feature(float_list=tf.train.FloatList(value=[value]))
        features["content_class"] = _bytes_feature(profile.content_class)
    if document.language:
        features["language"] = _bytes_feature(document.language)
        features["language_confidence"] = tf.train.Feature(
            float_list=tf.train.FloatList(value=[document.language_confidence])
        )
    if document.is_conversation:
        features.update(conversation_features(document))
    return tf.train.Example(features=tf.train.Features(feature=features))


def _require_data_root(input_base: str) -> None:
    """Raises CorpusError unless `input_base` is a directory; one whose scheme no file system of
    this process opens is named as such (tf.io.gfile.isdir would only answer False)."""
    try:
        filesystems.check_schemes({"data root": input_base})
    except filesystems.SchemeError as exc:
        raise CorpusError(str(exc)) from exc
    if not tf.io.gfile.isdir(input_base):
        raise CorpusError(f"data root {input_base} does not exist or is not a directory")


def list_corpus_files(input_base: str, pattern: str) -> List[str]:
    """Returns the sorted files matching `pattern` under `input_base`, or raises naming what is wrong."""
    _require_data_root(input_base)
    full_pattern = os.path.join(input_base, pattern)
    files = sorted(path for path in tf.io.gfile.glob(full_pattern) if not tf.io.gfile.isdir(path))
    if not files:
        raise CorpusError(f"no corpus files match {full_pattern} (empty or missing directory?)")
    return files


def _custom_config(exec_properties: Dict[str, Any]) -> Dict[str, Any]:
    raw = exec_properties.get(standard_component_specs.CUSTOM_CONFIG_KEY)
    return json.loads(raw) if raw else {}


def custom_options(exec_properties: Dict[str, Any]):
    """(ExampleGenOptions, CleaningOptions) from the component's custom config (defaults where absent)."""
    config = _custom_config(exec_properties)
    example_gen, cleaning = config.get(EXAMPLE_GEN_OPTIONS_KEY), config.get(CLEANING_OPTIONS_KEY)
    return (
        ExampleGenOptions.from_parameter(example_gen) if example_gen else ExampleGenOptions(),
        CleaningOptions.from_parameter(cleaning) if cleaning else CleaningOptions(),
    )


def corpus_fingerprint(
    input_base: str, input_config: example_gen_pb2.Input, range_config: Optional[range_config_pb2.RangeConfig]
) -> str:
    """TFX's fingerprint of the files the span pattern selects right now (names, sizes, times),
    or "" when nothing matches (the executor then reports why). A local runner passes it as a
    parameter so that TFX's cache reuses ExampleGen exactly when those files are unchanged; the
    executor itself never reads it."""
    if not tf.io.gfile.isdir(input_base):
        return ""
    try:
        fingerprint, _, _ = example_gen_utils.calculate_splits_fingerprint_span_and_version(
            input_base, input_config.splits, range_config
        )
    except ValueError:
        return ""
    return fingerprint


def resolve_span(exec_properties: Dict[str, Any]) -> Dict[str, Any]:
    """`exec_properties` with the span resolved, as TFX's FileBasedExampleGen driver resolves it:
    the input patterns filled in for the selected span/version, and the span, version and input
    fingerprint set. Raises naming the data root and pattern when no file matches."""
    input_base = exec_properties[standard_component_specs.INPUT_BASE_KEY]
    input_config = proto_utils.json_to_proto(
        exec_properties[standard_component_specs.INPUT_CONFIG_KEY], example_gen_pb2.Input()
    )
    range_config = None
    if exec_properties.get(standard_component_specs.RANGE_CONFIG_KEY):
        range_config = proto_utils.json_to_proto(
            exec_properties[standard_component_specs.RANGE_CONFIG_KEY], range_config_pb2.RangeConfig()
        )
    _require_data_root(input_base)
    processor = input_processor.FileBasedInputProcessor(input_base, input_config.splits, range_config)
    try:
        span, version = processor.resolve_span_and_version()
        fingerprint = processor.get_input_fingerprint(span, version)
    except ValueError as exc:  # TFX: "Cannot find matching for split ..." / "Retrieved span ... "
        patterns = ", ".join(split.pattern for split in input_config.splits)
        raise CorpusError(f"no corpus files for pattern {patterns} under {input_base}: {exc}") from None
    for split in input_config.splits:
        split.pattern = processor.get_pattern_for_span_version(split.pattern, span, version)
    return dict(
        exec_properties,
        **{
            standard_component_specs.INPUT_CONFIG_KEY: proto_utils.proto_to_json(input_config),
            example_gen_utils.SPAN_PROPERTY_NAME: span,
            example_gen_utils.VERSION_PROPERTY_NAME: version,
            example_gen_utils.FINGERPRINT_PROPERTY_NAME: fingerprint,
        },
    )


def _selected_span(exec_properties: Dict[str, Any]) -> int:
    """The span TFX's driver selected (0 when the pattern has no span placeholder)."""
    return int(exec_properties.get(example_gen_utils.SPAN_PROPERTY_NAME) or 0)


def _earlier_spans(exec_properties: Dict[str, Any]) -> List[List[Any]]:
    """[[span, resolved pattern], ...] of the span range's earlier spans ([] without a range)."""
    options, _ = custom_options(exec_properties)
    if options.first_span is None:
        return []
    return [
        [span, pattern]
        for span, pattern in span_range.earlier_spans(
            exec_properties[standard_component_specs.INPUT_BASE_KEY],
            options.file_pattern,
            options.first_span,
            _selected_span(exec_properties),
        )
    ]


def _read_file(path: str, input_base: str, options: ReadOptions):
    source = os.path.relpath(path, input_base)
    for outcome in read_corpus_file(path, options, source):
        if isinstance(outcome, Rejection):
            yield beam.pvalue.TaggedOutput("rejected", outcome)
            yield event(f"quarantined:{outcome.reason}", outcome.location)
        else:
            yield event(f"{data_kind.KIND_GROUP}:{outcome.kind}", outcome.location)
            yield outcome


def _length_event(document: Document):
    return f"{ingest_report.LENGTH_GROUP}:{ingest_report.length_bucket(len(document.text or ''))}", document.location


@beam.ptransform_fn
def _WriteReport(pipeline_parts, report_dir: str, sample_chars: int):
    """Writes the quarantine files and ingest_report.json (see `ingest_report`)."""
    read, kept, rejected, removed_samples, events = pipeline_parts
    quarantine_dir = os.path.join(report_dir, ingest_report.QUARANTINE_DIR)
    _ = (
        rejected
        | "QuarantineJson" >> beam.Map(ingest_report.quarantine_record)
        | "WriteQuarantine"
        >> beam.io.WriteToText(os.path.join(quarantine_dir, "records"), file_name_suffix=".jsonl.gz")
    )
    _ = (
        removed_samples
        | "RemovedJson" >> beam.Map(lambda pair: ingest_report.removed_sample_record(*pair, max_chars=sample_chars))
        | "WriteRemoved" >> beam.io.WriteToText(os.path.join(quarantine_dir, "removed"), file_name_suffix=".jsonl.gz")
    )
    lengths = kept | "LengthBuckets" >> beam.Map(_length_event)
    counts = [
        read
        | "CountRead" >> beam.combiners.Count.Globally()
        | "ReadEntry" >> beam.Map(lambda n: ("documents_read", n)),
        kept
        | "CountKept" >> beam.combiners.Count.Globally()
        | "KeptEntry" >> beam.Map(lambda n: ("documents_kept", n)),
        read
        | "BytesRead" >> beam.Map(ingest_report.document_bytes)
        | "SumRead" >> beam.CombineGlobally(sum)
        | "BytesReadEntry" >> beam.Map(lambda n: ("bytes_read", n)),
        kept
        | "BytesKept" >> beam.Map(ingest_report.document_bytes)
        | "SumKept" >> beam.CombineGlobally(sum)
        | "BytesKeptEntry" >> beam.Map(lambda n: ("bytes_kept", n)),
        (events, lengths)
        | "EventsAndLengths" >> beam.Flatten()
        | "CountEvents" >> beam.CombinePerKey(ingest_report.CountAndSample()),
    ]
    return (
        counts
        | "AllCounts" >> beam.Flatten()
        | "Gather" >> beam.combiners.ToList()
        | "Build" >> beam.Map(ingest_report.build_report, quarantine_dir=quarantine_dir)
        | "Write" >> beam.Map(ingest_report.write_report, directory=report_dir)
    )


@beam.ptransform_fn
@beam.typehints.with_input_types(beam.Pipeline)
@beam.typehints.with_output_types(tf.train.Example)
def _CorpusToExample(
    pipeline: beam.Pipeline, exec_properties: Dict[str, Any], split_pattern: str
) -> beam.pvalue.PCollection:
    """Reads, cleans and encodes every corpus file matching `split_pattern`."""
    input_base = exec_properties[standard_component_specs.INPUT_BASE_KEY]
    read_options, cleaning_options = custom_options(exec_properties)
    files = list_corpus_files(input_base, split_pattern)
    for _, pattern in exec_properties.get(_EARLIER_SPANS_KEY) or []:
        files = list_corpus_files(input_base, pattern) + files
    outcomes = (
        pipeline
        | "CorpusFiles" >> beam.Create(files)
        | "SpreadFiles" >> beam.Reshuffle()
        | "ReadFiles"
        >> beam.FlatMap(_read_file, input_base=input_base, options=read_options).with_outputs(
            "rejected", EVENTS_TAG, main="documents"
        )
    )
    cleaned = outcomes.documents | "Clean" >> CleanDocuments(cleaning_options)
    report_dir = exec_properties.get(_REPORT_DIR_KEY)
    if report_dir:
        events = (outcomes[EVENTS_TAG], cleaned["events"]) | "IngestEvents" >> beam.Flatten()
        parts = (outcomes.documents, cleaned["documents"], outcomes.rejected, cleaned["removed_samples"], events)
        _ = parts | "Report" >> _WriteReport(report_dir, read_options.quarantine_sample_bytes)
    return cleaned["documents"] | "ToExample" >> beam.Map(document_to_example)


class TextCorpusExampleGenExecutor(BaseExampleGenExecutor):
    """ExampleGen executor for .txt/.jsonl/.csv/.tsv/.tfrecord corpora (see module docstring)."""

    def GetInputSourceToExamplePTransform(self) -> beam.PTransform:
        return _CorpusToExample

    def Do(self, input_dict, output_dict, exec_properties) -> None:
        examples = artifact_utils.get_single_instance(output_dict[standard_component_specs.EXAMPLES_KEY])
        exec_properties = resolve_span(exec_properties)
        example_gen_driver.update_output_artifact(exec_properties, examples.mlmd_artifact)
        earlier = _earlier_spans(exec_properties)
        super().Do(
            input_dict,
            output_dict,
            dict(exec_properties, **{_REPORT_DIR_KEY: examples.uri, _EARLIER_SPANS_KEY: earlier}),
        )
        report = ingest_report.read_report(examples.uri)
        report[data_kind.DATA_KIND_PROPERTY] = data_kind.corpus_kind(report)
        report["spans"] = [span for span, _ in earlier] + [_selected_span(exec_properties)]
        ingest_report.add_filter_counts(report, enabled_removal_rules(custom_options(exec_properties)[1]))
        ingest_report.add_removed_examples(report)
        ingest_report.write_report(report, examples.uri)
        data_report.write(report, examples.uri)
        examples.set_string_custom_property("spans", json.dumps(report["spans"]))
        examples.set_string_custom_property(data_kind.DATA_KIND_PROPERTY, report[data_kind.DATA_KIND_PROPERTY])
        ingest_report.annotate_artifact(examples, report)
        if not report["documents_kept"]:
            raise CorpusError("no document survived ingestion: " + "; ".join(ingest_report.summary_lines(report)))
