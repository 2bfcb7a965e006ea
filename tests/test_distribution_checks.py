"""Drift and skew of the text statistics, measured by the curated schema's Jensen-Shannon
comparators (TFDV) on real statistics of real examples, and the drift-baseline bookkeeping."""

import os
import random

import pytest
import tensorflow as tf
import tensorflow_data_validation as tfdv
from tfx.types import standard_artifacts

from components.data_gate import accepted_statistics as accepted_lib
from components.data_gate.anomalies import blocking_anomalies
from components.data_gate.distribution_checks import (
    DIVERGENCE_ANOMALY,
    DRIFT,
    SKEW,
    compare,
    divergence_anomalies,
    too_few_examples,
)
from components.example_gen.executor import document_to_example
from components.example_gen.readers import Document
from components.resources import resolve
from pipeline.config import PipelineConfig
from pipeline.layout import conversation_schema_file, schema_files

WORDS = "thanks for writing we have looked into your ticket and the fix ships next week".split()


def _text(rng, length):
    words = []
    while sum(len(w) + 1 for w in words) < length:
        words.append(rng.choice(WORDS))
    return " ".join(words)


def _statistics(lengths, tmp_path, name, seed=0):
    rng = random.Random(seed)
    path = str(tmp_path / f"{name}.tfrecord")
    with tf.io.TFRecordWriter(path) as writer:
        for index, length in enumerate(lengths):
            document = Document(_text(rng, length), f"{name}.txt", index + 1)
            writer.write(document_to_example(document).SerializeToString())
    return tfdv.generate_statistics_from_tfrecord(path)


def _lengths(mean, seed, count=400):
    rng = random.Random(seed)
    return [max(1, int(rng.gauss(mean, mean / 5))) for _ in range(count)]


@pytest.fixture(scope="module")
def schema():
    return tfdv.load_schema_text(resolve(schema_files(PipelineConfig().schema_dir)[0]))


def test_shifted_length_distribution_drifts_and_unshifted_does_not(schema, tmp_path):
    previous = _statistics(_lengths(200, seed=1), tmp_path, "span1", seed=1)
    unshifted = _statistics(_lengths(200, seed=2), tmp_path, "span2", seed=2)
    shifted = _statistics(_lengths(600, seed=3), tmp_path, "span3", seed=3)

    calm = compare(unshifted, schema, DRIFT, previous)
    assert divergence_anomalies(calm, DRIFT) == []
    compared = {m.feature for m in calm.measurements}
    assert {"num_chars", "letter_fraction", "digit_fraction", "whitespace_fraction"} <= compared
    assert all(m.divergence <= m.threshold for m in calm.measurements)

    drifted = compare(shifted, schema, DRIFT, previous)
    found = {a.feature: a for a in divergence_anomalies(drifted, DRIFT)}
    # Longer documents built from the same words also narrow the character-class distributions.
    assert "num_chars" in found and set(found) <= compared
    assert (found["num_chars"].split, found["num_chars"].types) == (DRIFT, [DIVERGENCE_ANOMALY])
    assert "jensen-shannon" in found["num_chars"].description.lower()
    measured = {m.feature: m for m in drifted.measurements}["num_chars"]
    assert measured.divergence > measured.threshold == 0.1


def test_skew_compares_train_with_eval_and_can_be_set_to_warn(schema, tmp_path):
    train = _statistics(_lengths(200, seed=4), tmp_path, "train", seed=4)
    same = _statistics(_lengths(200, seed=5), tmp_path, "eval_same", seed=5)
    other = _statistics(_lengths(900, seed=6), tmp_path, "eval_other", seed=6)
    assert divergence_anomalies(compare(train, schema, SKEW, same), SKEW) == []
    skewed = divergence_anomalies(compare(train, schema, SKEW, other), SKEW)
    assert "num_chars" in {a.feature for a in skewed}
    assert blocking_anomalies(skewed, []) == skewed
    assert blocking_anomalies(skewed, [], warn_only_splits=[SKEW]) == []
    assert blocking_anomalies(skewed, [DIVERGENCE_ANOMALY]) == []


def test_comparisons_on_too_few_documents_are_skipped_with_the_counts(schema, tmp_path):
    small = _statistics(_lengths(200, seed=7, count=30), tmp_path, "small")
    large = _statistics(_lengths(200, seed=8), tmp_path, "large")
    assert too_few_examples(100, train=large, eval=large) is None
    reason = too_few_examples(100, train=large, eval=small)
    assert reason == (
        "too few documents for a meaningful comparison (eval has 30; data_gate.distribution_min_examples=100)"
    )


def _state(tmp_path, name, *accepted_spans):
    """A drift-baseline state location after `record_accepted` accepted `accepted_spans` in order."""
    state_uri = str(tmp_path / name)
    for span in accepted_spans:
        statistics = tmp_path / f"{name}-{span}.pb"
        statistics.write_bytes(_marker(span))
        accepted_lib.record_accepted(state_uri, str(statistics), span)
    return state_uri


def _marker(span):
    from tensorflow_metadata.proto.v0 import statistics_pb2

    stats = statistics_pb2.DatasetFeatureStatisticsList()
    stats.datasets.add(name=f"span-{span}", num_examples=span)
    return stats.SerializeToString()


def _marked_span(statistics):
    return int(statistics.datasets[0].name.split("-")[1])


def test_drift_baseline_is_the_last_accepted_earlier_span(tmp_path):
    first = accepted_lib.drift_baseline(str(tmp_path / "empty"), 5)
    assert first.statistics is None and "first run" in first.skipped_reason
    forward = accepted_lib.drift_baseline(_state(tmp_path, "a", 2, 4), 5)
    assert (forward.span, _marked_span(forward.statistics)) == (4, 4)
    rerun = accepted_lib.drift_baseline(_state(tmp_path, "b", 4, 5), 5)
    assert (rerun.span, _marked_span(rerun.statistics)) == (4, 4)
    only = accepted_lib.drift_baseline(_state(tmp_path, "c", 5), 5)
    assert only.statistics is None and "re-run" in only.skipped_reason
    backfill = accepted_lib.drift_baseline(_state(tmp_path, "d", 6, 7), 5)
    assert backfill.statistics is None and "backfill" in backfill.skipped_reason


@pytest.mark.parametrize(
    "before, span, expected",
    [
        ((), 3, (3, accepted_lib.NO_SPAN)),  # first accepted span
        ((1, 2), 3, (3, 2)),  # a new span moves the latest to earlier
        ((2, 3), 3, (3, 2)),  # a re-run keeps what was accepted before it
        ((6, 7), 3, (7, 6)),  # a backfill leaves the baseline alone
    ],
)
def test_recording_an_accepted_span_keeps_the_latest_two_spans(tmp_path, before, span, expected):
    state_uri = _state(tmp_path, "state", *before)
    current = tmp_path / "current.pb"
    current.write_bytes(_marker(span))
    state = accepted_lib.record_accepted(state_uri, str(current), span)
    assert tuple(state) == expected == tuple(accepted_lib.read_state(state_uri))
    latest_span, earlier_span = expected
    assert _marked_span(accepted_lib.load_statistics(f"{state_uri}/spans/{latest_span}/FeatureStats.pb")) == latest_span
    if earlier_span != accepted_lib.NO_SPAN:
        assert (
            _marked_span(accepted_lib.load_statistics(f"{state_uri}/spans/{earlier_span}/FeatureStats.pb"))
            == earlier_span
        )
    assert not [name for name in os.listdir(state_uri) if ".tmp-" in name]  # temporary files are renamed away


def test_an_unreadable_state_file_is_named(tmp_path):
    (tmp_path / "accepted.json").write_text("{not json")
    with pytest.raises(ValueError, match="accepted.json is unreadable"):
        accepted_lib.read_state(str(tmp_path))


def test_missing_statistics_file_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="nowhere/FeatureStats.pb"):
        accepted_lib.load_statistics(str(tmp_path / "nowhere" / "FeatureStats.pb"))


def test_the_span_is_read_from_the_examples_custom_property_tfx_example_gen_writes():
    """TFX 1.16's ExampleGen driver records the span as a custom property and leaves the standard
    `span` property at 0 (which is all StatisticsGen copies), so the custom property must win."""
    examples = standard_artifacts.Examples()
    assert accepted_lib.examples_span(examples) == 0
    examples.set_int_custom_property("span", 7)
    assert examples.span == 0 and accepted_lib.examples_span(examples) == 7


def _conversation_statistics(prompt_lengths, reply_lengths, tmp_path, name, seed=0):
    rng = random.Random(seed)
    path = str(tmp_path / f"{name}.tfrecord")
    with tf.io.TFRecordWriter(path) as writer:
        for index, (prompt, reply) in enumerate(zip(prompt_lengths, reply_lengths)):
            document = Document(None, f"{name}.jsonl", index + 1).with_turns(
                [("user", _text(rng, prompt)), ("assistant", _text(rng, reply))]
            )
            writer.write(document_to_example(document).SerializeToString())
    return tfdv.generate_statistics_from_tfrecord(path)


@pytest.fixture(scope="module")
def conversation_schema():
    return tfdv.load_schema_text(resolve(conversation_schema_file(PipelineConfig().schema_dir)))


def test_replies_three_times_longer_drift_on_assistant_chars_while_the_prompts_do_not(conversation_schema, tmp_path):
    previous = _conversation_statistics(_lengths(120, seed=1), _lengths(200, seed=2), tmp_path, "span1", seed=1)
    unshifted = _conversation_statistics(_lengths(120, seed=3), _lengths(200, seed=4), tmp_path, "span2", seed=2)
    longer_replies = _conversation_statistics(_lengths(120, seed=5), _lengths(600, seed=6), tmp_path, "span3", seed=3)

    calm = compare(unshifted, conversation_schema, DRIFT, previous)
    assert divergence_anomalies(calm, DRIFT) == []
    assert {"assistant_chars", "prompt_chars", "num_chars"} <= {m.feature for m in calm.measurements}

    found = {
        a.feature: a for a in divergence_anomalies(compare(longer_replies, conversation_schema, DRIFT, previous), DRIFT)
    }
    assert "assistant_chars" in found and "prompt_chars" not in found
    assert found["assistant_chars"].types == [DIVERGENCE_ANOMALY]
    skewed = divergence_anomalies(compare(longer_replies, conversation_schema, SKEW, previous), SKEW)
    assert "assistant_chars" in {a.feature for a in skewed}  # the same comparator as the skew check
