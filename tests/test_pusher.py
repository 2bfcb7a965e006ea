"""Atomic, versioned push to a TF Serving model base path, models.config and batching parameters."""

import multiprocessing
import os
import threading

import pytest

from components.versioned_push import (
    existing_versions,
    find_pushed_version,
    is_complete_saved_model,
    push_saved_model,
    retain_latest,
)
from tests.pusher_fixtures import fake_saved_model


def test_versions_increase_and_contents_are_complete(tmp_path):
    model = fake_saved_model(tmp_path / "model")
    base = str(tmp_path / "serving")
    first = push_saved_model(model, base)
    second = push_saved_model(model, base)
    assert (first.version, second.version) == (1, 2)
    assert existing_versions(base) == [1, 2]
    assert sorted(os.listdir(base)) == [".version-claims", "1", "2"]  # no staging directories left behind
    assert sorted(os.listdir(os.path.join(base, ".version-claims"))) == ["1", "2"]
    assert open(os.path.join(second.path, "variables", "variables.index"), "rb").read() == b"index"


def test_versions_continue_after_the_highest_existing_one(tmp_path):
    base = tmp_path / "serving"
    (base / "7").mkdir(parents=True)
    (base / "notes").mkdir()
    assert push_saved_model(fake_saved_model(tmp_path / "m"), str(base)).version == 8


def test_a_directory_that_is_not_a_saved_model_is_refused_and_nothing_is_published(tmp_path):
    (tmp_path / "empty").mkdir()
    base = tmp_path / "serving"
    with pytest.raises(FileNotFoundError, match="not a SavedModel"):
        push_saved_model(str(tmp_path / "empty"), str(base))
    assert existing_versions(str(base)) == []


def test_a_failed_copy_leaves_no_version_and_no_staging_directory(tmp_path, monkeypatch):
    from components import versioned_push

    def failing_copy(source, destination):
        os.makedirs(destination)
        raise OSError("disk full")

    monkeypatch.setattr(versioned_push, "copy_tree", failing_copy)
    base = tmp_path / "serving"
    with pytest.raises(OSError, match="disk full"):
        push_saved_model(fake_saved_model(tmp_path / "m"), str(base))
    assert os.listdir(base) == []


def test_retention_keeps_the_newest_versions_and_every_protected_one(tmp_path):
    model = fake_saved_model(tmp_path / "m")
    base = str(tmp_path / "serving")
    for _ in range(5):
        push_saved_model(model, base)
    assert retain_latest(base, 2, protected=[1]) == [2, 3]
    assert existing_versions(base) == [1, 4, 5]
    assert retain_latest(base, 5) == []
    assert sorted(os.listdir(base)) == [".version-claims", "1", "4", "5"]  # retired directories are gone too
    assert sorted(os.listdir(os.path.join(base, ".version-claims"))) == ["1", "4", "5"]  # and their claims


def test_a_retried_push_of_the_same_model_returns_the_version_it_already_published(tmp_path):
    model = fake_saved_model(tmp_path / "m")
    base = str(tmp_path / "serving")
    first = push_saved_model(model, base, {"model_id": 11})
    retried = push_saved_model(model, base, {"model_id": 11})
    other = push_saved_model(model, base, {"model_id": 12})
    assert (first.version, first.created) == (1, True)
    assert (retried.version, retried.created) == (1, False)
    assert (other.version, other.created) == (2, True)
    assert find_pushed_version(base, "12") == 2
    assert is_complete_saved_model(other.path)


def _push_many(model: str, base: str, count: int, results) -> None:
    for _ in range(count):
        results.put(push_saved_model(model, base).version)
        retain_latest(base, 3)


def test_a_reader_never_sees_an_incomplete_version_during_concurrent_pushes(tmp_path):
    """Three forked processes and two threads push and prune the same base path at once while a
    reader thread polls it: every integer directory the reader lists holds a complete SavedModel
    (or was already retired between the listing and the check), the published numbers are unique
    and 1..N, and retention leaves the newest 3."""
    model = fake_saved_model(tmp_path / "m")
    base = str(tmp_path / "serving")
    os.makedirs(base)
    stop = threading.Event()
    incomplete, seen = [], set()

    def read_continuously():
        while not stop.is_set():
            for name in os.listdir(base):
                if name.isdigit():
                    seen.add(int(name))
                    path = os.path.join(base, name)
                    if not is_complete_saved_model(path) and os.path.exists(path):
                        incomplete.append(name)

    reader = threading.Thread(target=read_continuously)
    reader.start()
    context = multiprocessing.get_context("fork")
    results = context.Queue()
    processes = [context.Process(target=_push_many, args=(model, base, 4, results)) for _ in range(3)]
    threads = [threading.Thread(target=_push_many, args=(model, base, 4, results)) for _ in range(2)]
    for worker in processes + threads:
        worker.start()
    for worker in processes + threads:
        worker.join(timeout=120)
    stop.set()
    reader.join()
    assert all(process.exitcode == 0 for process in processes)
    published = sorted(results.get(timeout=5) for _ in range(20))
    assert published == list(range(1, 21))  # unique, no gaps: every race was lost to a higher number
    assert not incomplete
    assert seen and max(seen) <= 20
    assert existing_versions(base) == [18, 19, 20]
    assert sorted(os.listdir(base)) == [".version-claims", "18", "19", "20"]


def test_push_refuses_a_gfile_filesystem_whose_rename_drops_directory_contents(tmp_path):
    """TensorFlow's ram:// filesystem renames a directory node without its files; the push
    must notice, take the empty version back out and say why."""
    model = fake_saved_model(tmp_path / "m")
    base = "ram://pusher-test/serving"
    with pytest.raises(OSError, match="did not move the contents"):
        push_saved_model(model, base)
    assert existing_versions(base) == []


def test_serving_config_serves_the_labelled_versions(tmp_path):
    from components.pusher.serving_config import read_labels, read_serving_config, set_label

    base = str(tmp_path / "serving")
    os.makedirs(base)
    assert set_label("support-bot", base, "canary", 3) == {"stable": 3, "canary": 3}  # first push is stable too
    assert set_label("support-bot", base, "stable", 4) == {"stable": 4, "canary": 3}
    assert set_label("support-bot", base, "canary", 5) == {"stable": 4, "canary": 5}
    (model,) = read_serving_config(base).model_config_list.config
    assert (model.name, model.base_path, model.model_platform) == ("support-bot", base, "tensorflow")
    assert list(model.model_version_policy.specific.versions) == [4, 5]
    assert set_label("support-bot", base, "stable", 5) == {"stable": 5}  # promoting the canary ends it
    assert read_labels(base) == {"stable": 5}
    assert sorted(os.listdir(base)) == ["models.config"]  # no staging file left


def test_serving_config_rejects_unknown_labels_and_a_config_without_stable(tmp_path):
    from components.pusher.serving_config import serving_config

    with pytest.raises(ValueError, match="unknown version label"):
        serving_config("m", str(tmp_path), {"stable": 1, "beta": 2})
    with pytest.raises(ValueError, match="stable"):
        serving_config("m", str(tmp_path), {"canary": 2})


def test_batching_parameters_file_is_written_from_config(tmp_path):
    from components.pusher.batching import write_batching_parameters
    from components.pusher.options import BatchingOptions
    from pipeline.config import ConfigError, load_config

    path = write_batching_parameters(str(tmp_path), BatchingOptions(max_batch_size=8, allowed_batch_sizes=[2, 8]))
    text = open(path).read()
    assert "max_batch_size { value: 8 }" in text
    assert "batch_timeout_micros { value: 2000 }" in text
    assert "allowed_batch_sizes: 2\nallowed_batch_sizes: 8" in text
    with pytest.raises(ConfigError, match="allowed_batch_sizes"):
        load_config(overrides=["pusher.batching.allowed_batch_sizes=[2, 4]"])


def test_monitoring_config_turns_on_prometheus_at_the_configured_path(tmp_path):
    from components.pusher.monitoring import write_monitoring_config
    from components.pusher.options import MonitoringOptions
    from pipeline.config import ConfigError, load_config

    text = open(write_monitoring_config(str(tmp_path), MonitoringOptions())).read()
    assert text == 'prometheus_config {\n  enable: true\n  path: "/monitoring/prometheus/metrics"\n}\n'
    off = open(write_monitoring_config(str(tmp_path), MonitoringOptions(prometheus=False, path="/metrics"))).read()
    assert "enable: false" in off and 'path: "/metrics"' in off
    with pytest.raises(ConfigError, match="pusher.monitoring.path"):
        load_config(overrides=["pusher.monitoring.path=metrics"])
