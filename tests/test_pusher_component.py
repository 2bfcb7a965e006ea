"""The Pusher executor end to end on real TFX artifacts, and `textgen promote` / `rollback`.

The model is a file-level stand-in for an exported SavedModel (the push copies and hashes files;
loading the real export is covered by the end-to-end pipeline test). The registry is the embedded
MLflow SQLite store under the test's output root.
"""

import json
import os

from tfx.dsl.components.base import base_executor
from tfx.types import standard_artifacts

from components.pusher import serving_config
from components.pusher.component import VersionedPusherExecutor
from components.pusher.options import PusherOptions
from components.registry import model_registry as registry
from components.registry.options import RegistryOptions
from components.trainer.training import record as training_record
from components.versioned_push import existing_versions
from tests.pusher_fixtures import fake_saved_model
from textgen_cli.cli import main


def _model(tmp_path, artifact_id: int) -> standard_artifacts.Model:
    model = standard_artifacts.Model()
    model.uri = str(tmp_path / f"model-{artifact_id}")
    model.id = artifact_id
    fake_saved_model(os.path.join(model.uri, "Format-Serving"))
    return model


def _blessing(artifact_id: int, blessed: bool) -> standard_artifacts.ModelBlessing:
    blessing = standard_artifacts.ModelBlessing()
    blessing.id = artifact_id
    blessing.set_int_custom_property("blessed", int(blessed))
    blessing.set_float_custom_property("perplexity", 3.5)
    blessing.set_string_custom_property("reason", "perplexity 3.5 < 12" if blessed else "perplexity 30 >= 12")
    return blessing


def _push(tmp_path, model, blessing, run_id="run-1", label="stable", span=2, examples_uri=""):
    examples = standard_artifacts.Examples()
    examples.span = span
    examples.uri = examples_uri
    pushed = standard_artifacts.PushedModel()
    executor = VersionedPusherExecutor(base_executor.BaseExecutor.Context(pipeline_run_id=run_id))
    executor.Do(
        {"model": [model], "model_blessing": [blessing], "examples": [examples]},
        {"pushed_model": [pushed]},
        {
            "options": PusherOptions(model_name="textgen", keep_versions=2, label=label).to_parameter(),
            "registry": RegistryOptions().to_parameter(),
            "serving_dir": str(tmp_path / "serving"),
            "registry_dir": str(tmp_path / "registry"),
        },
    )
    return pushed


def _registry(tmp_path) -> registry.ModelRegistry:
    return registry.ModelRegistry(registry.embedded_tracking_uri(str(tmp_path / "registry")), "textgen")


def test_not_blessed_pushes_nothing_and_registers_nothing(tmp_path):
    pushed = _push(tmp_path, _model(tmp_path, 1), _blessing(2, blessed=False))
    assert pushed.get_int_custom_property("pushed") == 0
    assert "not blessed: perplexity 30" in pushed.get_string_custom_property("push_skipped_reason")
    assert not (tmp_path / "serving").exists()
    assert not (tmp_path / "registry").exists()


def test_blessed_push_serves_labels_registers_and_a_retry_changes_nothing(tmp_path):
    model = _model(tmp_path, 5)
    pushed = _push(tmp_path, model, _blessing(6, blessed=True))
    retried = _push(tmp_path, model, _blessing(6, blessed=True))
    base = str(tmp_path / "serving")
    assert existing_versions(base) == [1]
    for artifact in (pushed, retried):
        assert artifact.get_int_custom_property("pushed_version") == 1
        assert artifact.get_int_custom_property("registered_model_version") == 1
    assert serving_config.read_labels(base) == {"stable": 1}
    assert sorted(os.listdir(base)) == [
        ".version-claims",
        "1",
        "batching_parameters",
        "model_cards",
        "models.config",
        "monitoring.config",
    ]
    version = _registry(tmp_path).client.get_model_version("textgen", "1")
    assert version.tags[registry.TAG_RUN_ID] == "run-1"
    assert (version.tags[registry.TAG_MODEL_ID], version.tags[registry.TAG_BLESSING_ID]) == ("5", "6")
    assert (version.tags[registry.TAG_SPAN], version.tags["metric.perplexity"]) == ("2", "3.5")
    assert len(version.tags[registry.TAG_TOKENIZER]) == 64
    assert _registry(tmp_path).alias_version("production") == 1


def _push_three(tmp_path):
    for artifact_id in (10, 20, 30):
        _push(tmp_path, _model(tmp_path, artifact_id), _blessing(artifact_id + 1, True), run_id=f"run-{artifact_id}")


def test_canary_push_keeps_stable_serving_and_retention_spares_it(tmp_path):
    _push_three(tmp_path)
    _push(tmp_path, _model(tmp_path, 40), _blessing(41, True), label="canary")
    base = str(tmp_path / "serving")
    assert serving_config.read_labels(base) == {"stable": 3, "canary": 4}
    assert existing_versions(base) == [3, 4]  # keep_versions=2
    assert _registry(tmp_path).alias_version("production") == 3
    assert _registry(tmp_path).alias_version("canary") == 4


def _aliases(tmp_path) -> dict:
    """{alias: registered version} of the serving labels' aliases that are set."""
    model_registry = _registry(tmp_path)
    found = {alias: model_registry.alias_version(alias) for alias in ("production", "canary")}
    return {alias: version for alias, version in found.items() if version is not None}


def test_a_first_push_as_canary_is_stable_in_serving_and_production_in_the_registry(tmp_path):
    _push(tmp_path, _model(tmp_path, 50), _blessing(51, True), label="canary")
    assert serving_config.read_labels(str(tmp_path / "serving")) == {"stable": 1, "canary": 1}
    assert _aliases(tmp_path) == {"production": 1, "canary": 1}


def test_rolling_back_to_the_canary_ends_it_in_serving_and_in_the_registry(tmp_path, capsys):
    _push_three(tmp_path)  # versions 2 and 3 kept (keep_versions=2), 3 stable
    base = str(tmp_path / "serving")
    root = ["--output-root", str(tmp_path)]
    assert main(["promote", "2", "--label", "canary", *root]) == 0
    assert serving_config.read_labels(base) == {"stable": 3, "canary": 2}
    assert _aliases(tmp_path) == {"production": 3, "canary": 2}
    capsys.readouterr()
    assert main(["rollback", "--to", "2", *root]) == 0
    assert json.loads(capsys.readouterr().out)["labels"] == {"stable": 2}
    assert serving_config.read_labels(base) == {"stable": 2}
    assert _aliases(tmp_path) == {"production": 2}


def test_rollback_and_promote_move_the_label_and_the_alias(tmp_path, capsys):
    _push_three(tmp_path)
    base = str(tmp_path / "serving")
    root = ["--output-root", str(tmp_path)]
    assert main(["rollback", *root]) == 0
    assert json.loads(capsys.readouterr().out)["labels"] == {"stable": 2}
    assert serving_config.read_labels(base) == {"stable": 2}
    assert _registry(tmp_path).alias_version("production") == 2
    assert main(["rollback", *root]) == 1  # version 1 was pruned (keep_versions=2)
    assert "no version older than the stable version 2" in capsys.readouterr().err
    assert main(["promote", "3", "--label", "canary", *root]) == 0
    assert serving_config.read_labels(base) == {"stable": 2, "canary": 3}
    assert _registry(tmp_path).alias_version("canary") == 3
    assert main(["promote", "3", *root]) == 0
    assert serving_config.read_labels(base) == {"stable": 3}
    assert _aliases(tmp_path) == {"production": 3}  # promoting the canary ended it in the registry too
    assert main(["promote", "7", *root]) == 1
    assert "no complete pushed version 7" in capsys.readouterr().err


def test_a_copied_output_root_promotes_and_its_models_config_follows_the_copy(tmp_path, capsys):
    """The registry's tags and models.config hold the serving directory's absolute path: on a
    copy, the registry version is found through the pushed version's push_info.json, and the
    rewritten models.config names the copy."""
    import shutil

    original, copy = tmp_path / "original", tmp_path / "copy"
    _push_three(original)
    shutil.copytree(original, copy)
    assert main(["rollback", "--output-root", str(copy)]) == 0
    assert serving_config.read_labels(str(copy / "serving")) == {"stable": 2}
    (model,) = serving_config.read_serving_config(str(copy / "serving")).model_config_list.config
    assert model.base_path == str(copy / "serving")
    assert _aliases(copy) == {"production": 2}
    assert serving_config.read_labels(str(original / "serving")) == {"stable": 3}
    assert _aliases(original) == {"production": 3}


def _recorded_run(tmp_path):
    """A model artifact with a training record (fine-tuned with LoRA), a blessing with its
    evaluation.json (one group unmeasured) and an Examples artifact with an ingest report."""
    model = _model(tmp_path, 70)
    training_record.write(
        model.uri,
        training_record.TrainingRecord(
            model={
                "num_layers": 2,
                "num_heads": 4,
                "model_dim": 128,
                "mlp_dim": 512,
                "context_length": 128,
                "position_encoding": "learned",
            },
            training={
                "train_steps": 300,
                "batch_size": 32,
                "learning_rate": 2e-4,
                "warmup_steps": 30,
                "seed": 42,
                "lora": {"rank": 8, "alpha": 16.0, "targets": ["attention"]},
            },
            vocab_size=4096,
            parameters=1_234_567,
            tokenizer_sha256="ab" * 32,
            device="cpu",
            precision="float32",
            xla=True,
            steps_run=300,
            last_step={"step": 300, "loss": 3.21, "eval_loss": 3.4},
            base_checkpoint={"source": "gs://models/gpt2", "sha256": "cd" * 32},
        ),
    )
    blessing = _blessing(71, True)
    blessing.uri = str(tmp_path / "blessing")
    os.makedirs(blessing.uri)
    gates = [
        {
            "name": "quality.gain_over_unigram",
            "value": 0.31,
            "threshold": 0.02,
            "verdict": "PASSED",
            "reason": "gain 0.31 >= 0.02",
        },
        {"name": "bias.association", "value": 0.1, "threshold": 0.25, "verdict": "PASSED", "reason": "no group"},
    ]
    effects = [
        {
            "language": "en",
            "dimension": "religion",
            "group": "Muslim",
            "effect": 0.05,
            "sign_p": 1.0,
            "verdict": "passed",
        },
        {
            "language": "zh",
            "dimension": "gender",
            "group": "女性",
            "effect": 0.0,
            "sign_p": 1.0,
            "verdict": "unmeasured",
        },
    ]
    evaluation = {
        "blessed": True,
        "reason": "every gate passed",
        "gates": gates,
        "flagged": [],
        "baseline": {"skipped": "no model is registered as production yet (first run)"},
        "metrics": {
            "quality": {"perplexity": 21.5, "bits_per_byte": 1.42, "unigram_perplexity": 300.0},
            "safety": {
                "overall": {
                    "toxic_fraction": 0.0,
                    "expected_max_toxicity": 0.1,
                    "toxicity_probability": 0.0,
                    "completions": 40,
                },
                "per_category": {},
                "pii": {"leak_rate": 0.0},
            },
            "bias": {"group_effects": effects, "pairs": []},
        },
    }
    (tmp_path / "blessing" / "evaluation.json").write_text(json.dumps(evaluation))
    examples_uri = tmp_path / "examples"
    examples_uri.mkdir()
    (examples_uri / "ingest_report.json").write_text(
        json.dumps(
            {
                "documents_read": 2100,
                "documents_kept": 1984,
                "bytes_read": 900000,
                "bytes_kept": 850000,
                "quarantined": {"malformed_record": 2},
                "removed": {"exact_duplicate": 72, "quality_stop_words": 44},
                "languages": {"en": 2000, "zh": 100},
            }
        )
    )
    return model, blessing, str(examples_uri)


def test_every_push_writes_a_model_card_beside_the_version_and_logs_it_with_the_registered_version(tmp_path):
    model, blessing, examples_uri = _recorded_run(tmp_path)
    pushed = _push(tmp_path, model, blessing, examples_uri=examples_uri)
    base = tmp_path / "serving"
    card = (base / "model_cards" / "1.md").read_text()
    html = (base / "model_cards" / "1.html").read_text()
    assert pushed.get_string_custom_property("model_card") == str(base / "model_cards" / "1.html")
    assert not [name for name in os.listdir(base / "1") if "card" in name]  # never inside the SavedModel
    for fact in (
        "# Model card: textgen version 1",
        "registered as textgen version 1",
        "gs://models/gpt2",
        "LoRA rank 8, alpha 16.0, on attention",
        "1,234,567",
        "2,100 / 1,984",
        "exact_duplicate 72",
        "en 2000, zh 100",
        "| quality.gain_over_unigram | 0.31 | 0.02 | PASSED |",
        "| 女性 |",
        "unmeasured",
        "0.0002 / 30 steps",
        "3.21 / 3.4",
        "Not a source of facts",
    ):
        assert fact in card, fact
    assert "<table>" in html and "<td>unmeasured</td>" in html and "<h1>Model card: textgen version 1</h1>" in html
    version = _registry(tmp_path).client.get_model_version("textgen", "1")
    assert version.tags[registry.TAG_MODEL_CARD] == str(base / "model_cards" / "1.md")
    assert version.tags[registry.TAG_BASE_CHECKPOINT] == "gs://models/gpt2"
    assert json.loads(version.tags[registry.TAG_ADAPTERS]) == {"alpha": 16.0, "rank": 8, "targets": ["attention"]}
    logged = _registry(tmp_path).client.list_artifacts(version.run_id, registry.MODEL_CARD_ARTIFACT_PATH)
    assert sorted(os.path.basename(item.path) for item in logged) == ["1.html", "1.md"]


def test_a_model_without_records_still_gets_a_card_that_says_what_is_missing(tmp_path):
    _push(tmp_path, _model(tmp_path, 80), _blessing(81, True))
    card = (tmp_path / "serving" / "model_cards" / "1.md").read_text()
    assert "## Model\n\nNot recorded" in card and "## Training data\n\nNot recorded" in card
    version = _registry(tmp_path).client.get_model_version("textgen", "1")
    assert version.tags[registry.TAG_BASE_CHECKPOINT] == "" and version.tags[registry.TAG_ADAPTERS] == ""


def test_retention_removes_the_cards_of_the_versions_it_deletes(tmp_path):
    _push_three(tmp_path)  # keep_versions=2: version 1 is deleted
    assert sorted(os.listdir(tmp_path / "serving" / "model_cards")) == ["2.html", "2.md", "3.html", "3.md"]


def test_a_fine_tuned_model_is_also_published_in_the_hugging_face_layout_and_retired_with_its_version(tmp_path):
    model, blessing, examples_uri = _recorded_run(tmp_path)
    export = training_record.hugging_face_path(model.uri)
    os.makedirs(export)
    for name in ("config.json", "model.safetensors", "tokenizer.json"):
        (tmp_path / export / name).write_text(name)
    pushed = _push(tmp_path, model, blessing, examples_uri=examples_uri)
    published = tmp_path / "serving" / "hugging_face" / "1"
    assert sorted(os.listdir(published)) == ["config.json", "model.safetensors", "tokenizer.json"]
    assert pushed.get_string_custom_property("hugging_face_export") == str(published)
    assert str(published) in (tmp_path / "serving" / "model_cards" / "1.md").read_text()
    _push_three(tmp_path)  # keep_versions=2: version 1 and its export are retired
    assert sorted(os.listdir(tmp_path / "serving" / "hugging_face")) == []
