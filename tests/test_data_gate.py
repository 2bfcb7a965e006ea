"""The data gate: real TFDV statistics of real examples, validated against the curated schema."""

import pytest
import tensorflow as tf
import tensorflow_data_validation as tfdv

from components.resources import resolve
from components.data_gate.anomalies import blocking_anomalies, parse_anomalies
from components.data_gate.component import gate_verdict
from components.data_gate.options import DataGateOptions
from components.example_gen.executor import document_to_example
from components.example_gen.readers import Document
from pipeline.config import PipelineConfig
from pipeline.layout import schema_files


def _anomalies_for(documents, tmp_path):
    path = str(tmp_path / "examples.tfrecord")
    with tf.io.TFRecordWriter(path) as writer:
        for document in documents:
            writer.write(document_to_example(document).SerializeToString())
    statistics = tfdv.generate_statistics_from_tfrecord(path, pipeline_options=None)
    schema = tfdv.load_schema_text(resolve(schema_files(PipelineConfig().schema_dir)[0]))
    return parse_anomalies(tfdv.validate_statistics(statistics, schema), "train")


GOOD = [Document(f"Hello {i},\nthanks for writing.", "a.txt", i) for i in range(20)]


def test_clean_corpus_passes_the_gate(tmp_path):
    anomalies = _anomalies_for(GOOD, tmp_path)
    assert anomalies == []
    assert blocking_anomalies(anomalies, []) == []


def test_missing_text_feature_blocks(tmp_path):
    anomalies = _anomalies_for(GOOD + [Document(None, "b.jsonl", 1)], tmp_path)
    blocking = blocking_anomalies(anomalies, [])
    assert {a.feature for a in blocking} >= {"text"}
    assert any("FEATURE_TYPE_LOW_FRACTION_PRESENT" in a.types for a in blocking if a.feature == "text")


def test_empty_documents_violate_the_length_domain_and_block(tmp_path):
    anomalies = _anomalies_for(GOOD + [Document("", "b.jsonl", 1)], tmp_path)
    blocking = blocking_anomalies(anomalies, [])
    assert [a.feature for a in blocking] == ["num_chars"]
    assert "out-of-range" in str(blocking[0]).lower() or "out of range" in str(blocking[0]).lower()


def test_allowed_anomaly_types_only_warn(tmp_path):
    anomalies = _anomalies_for(GOOD + [Document("", "b.jsonl", 1)], tmp_path)
    assert anomalies and blocking_anomalies(anomalies, anomalies[0].types) == []


def _token_data_anomalies(serialized_examples, tmp_path):
    path = str(tmp_path / "transformed.tfrecord")
    with tf.io.TFRecordWriter(path) as writer:
        for record in serialized_examples:
            writer.write(record)
    statistics = tfdv.generate_statistics_from_tfrecord(path, pipeline_options=None)
    schema = tfdv.load_schema_text(resolve(schema_files(PipelineConfig().schema_dir)[1]))
    return parse_anomalies(tfdv.validate_statistics(statistics, schema), "train")


def _transformed_example(token_ids, byte_fraction=0.5, bytes_per_token=2.0):
    return tf.train.Example(features=tf.train.Features(feature={
        "token_ids$ragged_values": tf.train.Feature(int64_list=tf.train.Int64List(value=token_ids)),
        "num_tokens": tf.train.Feature(int64_list=tf.train.Int64List(value=[len(token_ids)])),
        "byte_token_fraction": tf.train.Feature(float_list=tf.train.FloatList(value=[byte_fraction])),
        "bytes_per_token": tf.train.Feature(float_list=tf.train.FloatList(value=[bytes_per_token])),
    })).SerializeToString()


def test_real_transformed_examples_pass_the_token_gate(transform_artifacts, tmp_path):
    records = [r.numpy() for r in tf.data.TFRecordDataset(tf.io.gfile.glob(transform_artifacts[1]), compression_type="GZIP")]
    assert records and _token_data_anomalies(records, tmp_path) == []


def test_unknown_tokens_and_empty_token_sequences_block_the_token_gate(tmp_path):
    good = [_transformed_example([600, 601, 602]) for _ in range(10)]
    anomalies = _token_data_anomalies(good + [_transformed_example([600, 2]), _transformed_example([])], tmp_path)
    assert {a.feature for a in blocking_anomalies(anomalies, [])} == {"token_ids$ragged_values", "num_tokens"}


def test_a_few_symbolic_documents_are_tolerated_but_a_symbolic_corpus_blocks(tmp_path):
    """The schema lets at most 5% of documents fall outside 'prose' (TFDV min_domain_mass)."""
    table = Document("| 12 | 34.5 | 0x1F |\n|----|------|------|", "t.txt", 1)
    assert _anomalies_for(GOOD + [table], tmp_path) == []  # 1 in 21: under 5%
    blocking = blocking_anomalies(_anomalies_for(GOOD + [table] * 4, tmp_path), [])  # 4 in 24
    assert [a.feature for a in blocking] == ["content_class"]
    assert "symbolic" in blocking[0].description


def test_whitespace_only_documents_count_as_blank_against_the_empty_rate(tmp_path):
    blocking = blocking_anomalies(_anomalies_for(GOOD + [Document(" \n\t ", "b.jsonl", i) for i in range(3)], tmp_path), [])
    assert [a.feature for a in blocking] == ["content_class"] and "blank" in blocking[0].description


def _ingest_report(read, kept, removed, bytes_read=None, bytes_kept=None):
    """An ingest report as ExampleGen writes it (the parts the removal check reads)."""
    report = {"documents_read": read, "documents_kept": kept, "removed": removed,
              "removed_examples": {rule: {"location": f"poems.jsonl:{index + 1}", "text": f"an example {rule} removed"}
                                   for index, rule in enumerate(removed)}}
    if bytes_read is not None:
        report.update(bytes_read=bytes_read, bytes_kept=bytes_kept)
    return report


MOSTLY_REMOVED = _ingest_report(3000, 1, {"quality_short_lines": 2990, "quality_stop_words": 6, "exact_duplicate": 2,
                                          "too_short": 1}, 600_000, 150)


def test_cleaning_that_removes_most_of_a_span_blocks_naming_the_rules_with_counts_and_an_example():
    error, finding = gate_verdict([], DataGateOptions(), MOSTLY_REMOVED)
    assert finding.documents_fraction > 0.99 and finding.bytes_fraction > 0.99
    assert error.startswith("data gate: stopping before the Tokenizer and Transform: cleaning removed 100.0% of the documents")
    assert "- quality_short_lines: 2990 (e.g. poems.jsonl:1: \"an example quality_short_lines removed\")" in error
    assert "- quality_stop_words: 6" in error and "- exact_duplicate: 2" in error
    assert "too_short" not in error  # the three rules that removed the most
    assert "data_gate.max_removed_fraction=0.3" in error and "data_gate.removal_action=warn" in error


def test_cleaning_within_the_limit_passes_and_warn_lets_too_much_removal_through_with_the_finding():
    assert gate_verdict([], DataGateOptions(), _ingest_report(2100, 2000, {"exact_duplicate": 100}, 660_000, 630_000)) == (
        None, None)
    assert gate_verdict([], DataGateOptions(), None) == (None, None)  # the token gate: no ingest report
    error, finding = gate_verdict([], DataGateOptions(removal_action="warn"), MOSTLY_REMOVED)
    assert error is None and "quality_short_lines: 2990" in finding.message()
    assert gate_verdict([], DataGateOptions(max_removed_fraction=1.0), MOSTLY_REMOVED) == (None, None)


def test_removing_most_of_the_bytes_blocks_even_when_most_documents_are_kept():
    few_long_ones = _ingest_report(100, 90, {"quality_duplicate_line_chars": 10}, 1_000_000, 300_000)
    error, finding = gate_verdict([], DataGateOptions(), few_long_ones)
    assert finding.documents_fraction == pytest.approx(0.1) and finding.bytes_fraction == pytest.approx(0.7)
    assert "70.0% of the bytes" in error


def test_a_removal_finding_and_blocking_anomalies_are_reported_together(tmp_path):
    anomalies = _anomalies_for(GOOD + [Document("", "b.jsonl", 1)], tmp_path)
    error, _ = gate_verdict(anomalies, DataGateOptions(removal_action="warn"), MOSTLY_REMOVED)
    assert "blocking anomal" in error and "cleaning removed" not in error  # warn: the finding is not a reason
    error, _ = gate_verdict(anomalies, DataGateOptions(), MOSTLY_REMOVED)
    assert "cleaning removed" in error and "num_chars" in error
