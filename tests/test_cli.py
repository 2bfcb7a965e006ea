"""The `textgen` command line: documented options and clear configuration errors."""
import pytest

from pipeline.cli import EXIT_USAGE, build_parser, main


def test_run_help_documents_every_flag_and_config_key(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["run", "--help"])
    text = capsys.readouterr().out
    for flag in ("--data-root", "--output-root", "--config", "--set", "--no-cache"):
        assert flag in text
    assert "training.train_steps" in text and "evaluator.max_perplexity" in text


def test_unknown_config_key_exits_with_a_usage_error(capsys):
    assert main(["run", "--set", "training.stepz=3"]) == EXIT_USAGE
    assert "unknown key 'training.stepz'" in capsys.readouterr().err


def test_generate_rejects_a_path_without_a_model(tmp_path):
    with pytest.raises(FileNotFoundError, match="neither a SavedModel"):
        main(["generate", "--model", str(tmp_path), "hello"])


def test_generate_resolves_a_version_number_under_the_serving_dir(tmp_path):
    from pipeline.samples import resolve_model_dir

    serving = tmp_path / "serving"
    (serving / "2").mkdir(parents=True)
    (serving / "2" / "saved_model.pb").write_bytes(b"")
    assert resolve_model_dir("2", str(serving)) == str(serving / "2")
    with pytest.raises(FileNotFoundError, match="no pushed model version 7"):
        main(["generate", "--model", "7", "--output-root", str(tmp_path), "hello"])


def test_a_refused_rollback_creates_nothing(tmp_path, capsys):
    missing = tmp_path / "no" / "such" / "dir"
    assert main(["rollback", "--output-root", str(missing)]) == 1
    assert "no model registry at" in capsys.readouterr().err
    assert not (tmp_path / "no").exists()


def test_a_refused_config_value_never_echoes_a_password(capsys):
    assert main(["compile", "--set", "registry.tracking_uri=http://alice:hunter2@mlflow.example"]) == EXIT_USAGE
    message = capsys.readouterr().err
    assert "must not embed credentials" in message and "http://***@mlflow.example" in message
    assert "hunter2" not in message and "alice" not in message
