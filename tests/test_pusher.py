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
