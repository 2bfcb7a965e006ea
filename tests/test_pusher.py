"""Atomic, versioned push to a TF Serving model base path."""
import os

import pytest

from components.pusher.versioned_push import existing_versions, push_saved_model


def _fake_saved_model(directory) -> str:
    """A directory shaped like a SavedModel (the push copies files; it does not load them)."""
    (directory / "variables").mkdir(parents=True)
    (directory / "variables" / "variables.index").write_bytes(b"index")
    (directory / "saved_model.pb").write_bytes(b"graph")
    return str(directory)


def test_versions_increase_and_contents_are_complete(tmp_path):
    model = _fake_saved_model(tmp_path / "model")
    base = str(tmp_path / "serving")
    first = push_saved_model(model, base)
    second = push_saved_model(model, base)
    assert (first.version, second.version) == (1, 2)
    assert existing_versions(base) == [1, 2]
    assert sorted(os.listdir(base)) == ["1", "2"]  # no staging directories left behind
    assert open(os.path.join(second.path, "variables", "variables.index"), "rb").read() == b"index"


def test_versions_continue_after_the_highest_existing_one(tmp_path):
    base = tmp_path / "serving"
    (base / "7").mkdir(parents=True)
    (base / "notes").mkdir()
    assert push_saved_model(_fake_saved_model(tmp_path / "m"), str(base)).version == 8


def test_a_directory_that_is_not_a_saved_model_is_refused_and_nothing_is_published(tmp_path):
    (tmp_path / "empty").mkdir()
    base = tmp_path / "serving"
    with pytest.raises(FileNotFoundError, match="not a SavedModel"):
        push_saved_model(str(tmp_path / "empty"), str(base))
    assert existing_versions(str(base)) == []


def test_a_failed_copy_leaves_no_version_and_no_staging_directory(tmp_path, monkeypatch):
    from components.pusher import versioned_push

    def failing_copy(source, destination):
        os.makedirs(destination)
        raise OSError("disk full")

    monkeypatch.setattr(versioned_push, "_copy_tree", failing_copy)
    base = tmp_path / "serving"
    with pytest.raises(OSError, match="disk full"):
        push_saved_model(_fake_saved_model(tmp_path / "m"), str(base))
    assert os.listdir(base) == []


def test_retention_keeps_only_the_newest_versions(tmp_path):
    from components.pusher.versioned_push import retain_latest

    model = _fake_saved_model(tmp_path / "m")
    base = str(tmp_path / "serving")
    for _ in range(4):
        push_saved_model(model, base)
    assert retain_latest(base, 2) == [1, 2]
    assert existing_versions(base) == [3, 4]
    assert retain_latest(base, 5) == []


def test_serving_config_serves_and_labels_the_pushed_version(tmp_path):
    from components.pusher.serving_config import read_serving_config, write_serving_config

    base = str(tmp_path / "serving")
    os.makedirs(base)
    write_serving_config("support-bot", base, 3)
    write_serving_config("support-bot", base, 4)  # rewritten in place, atomically
    (model,) = read_serving_config(base).model_config_list.config
    assert (model.name, model.base_path, model.model_platform) == ("support-bot", base, "tensorflow")
    assert list(model.model_version_policy.specific.versions) == [4]
    assert dict(model.version_labels) == {"stable": 4}
    assert sorted(os.listdir(base)) == ["models.config"]  # no staging file left
