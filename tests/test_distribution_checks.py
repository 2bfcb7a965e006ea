"""Drift and skew of the length distribution, measured by TFDV's Jensen-Shannon comparators on
real statistics of real examples."""
import random

import tensorflow as tf
import tensorflow_data_validation as tfdv

from components.data_gate.anomalies import blocking_anomalies
from components.data_gate.distribution_checks import DRIFT_ANOMALY, distribution_anomalies
from components.example_gen.executor import document_to_example
from components.example_gen.readers import Document
from pipeline.config import PipelineConfig


def _statistics(lengths, tmp_path, name):
    path = str(tmp_path / f"{name}.tfrecord")
    with tf.io.TFRecordWriter(path) as writer:
        for index, length in enumerate(lengths):
            writer.write(document_to_example(Document("x" * length, f"{name}.txt", index + 1)).SerializeToString())
    return tfdv.generate_statistics_from_tfrecord(path)


def _lengths(mean, seed, count=400):
    rng = random.Random(seed)
    return [max(1, int(rng.gauss(mean, mean / 5))) for _ in range(count)]


def test_shifted_length_distribution_drifts_and_unshifted_does_not(tmp_path):
    schema = tfdv.load_schema_text(PipelineConfig().schema_path)
    previous = _statistics(_lengths(200, seed=1), tmp_path, "span1")
    unshifted = _statistics(_lengths(200, seed=2), tmp_path, "span2")
    shifted = _statistics(_lengths(600, seed=3), tmp_path, "span3")

    assert distribution_anomalies(unshifted, schema, previous=previous) == []
    drift = distribution_anomalies(shifted, schema, previous=previous)
    assert [(a.feature, a.types) for a in drift] == [("num_chars", [DRIFT_ANOMALY])]
    assert "Jensen-Shannon" in drift[0].description or "jensen" in drift[0].description.lower()
    assert blocking_anomalies(drift, []) == drift and blocking_anomalies(drift, [DRIFT_ANOMALY]) == []
    # Skew: the same comparison between train and eval splits of one span.
    assert [a.feature for a in distribution_anomalies(unshifted, schema, eval_split=shifted)] == ["num_chars"]
    assert distribution_anomalies(unshifted, schema, eval_split=previous) == []
