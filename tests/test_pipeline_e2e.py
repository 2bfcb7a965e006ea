"""End to end: the whole pipeline under LocalDagRunner, checked through ML Metadata.

Marked slow (each run takes one to two minutes here); CI runs them. One module-scoped run
is shared by the checks that only read its results.
"""

import json
import os
import subprocess
import sys
import textwrap

import pytest
from ml_metadata.metadata_store import metadata_store
from ml_metadata.proto import metadata_store_pb2
from tfx import v1 as tfx

from pipeline.local_runner import run_locally
from pipeline.pipeline import COMPONENT_IDS
from tests.conftest import BUNDLED_TXT as BUNDLED_TXT_PATH
from tests.conftest import WEAK_MODEL_QUALITY, write_tiny_corpus
from tests.conftest import fast_config as _config
from tests.gate_margins import assert_passes_with_margin

pytestmark = pytest.mark.slow


def _evaluation(summary):
    """The Evaluator's evaluation.json of a run."""
    with open(os.path.join(summary["blessing"]["uri"], "evaluation.json"), encoding="utf-8") as handle:
        return json.load(handle)


def _execution_states_by_node(config, run_id):
    """{node id: state name} of the executions in pipeline run `run_id`, read from MLMD."""
    connection = tfx.orchestration.metadata.sqlite_metadata_connection_config(
        os.path.abspath(config.layout.metadata_path)
    )
    store = metadata_store.MetadataStore(connection)
    run = store.get_context_by_type_and_name("pipeline_run", run_id)
    states = {}
    for execution in store.get_executions_by_context(run.id):
        for context in store.get_contexts_by_execution(execution.id):
            if context.name.startswith(config.pipeline_name + "."):
                states[context.name.split(".", 1)[1]] = metadata_store_pb2.Execution.State.Name(
                    execution.last_known_state
                )
    return states


@pytest.fixture(scope="module")
def first_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("e2e")
    config = _config(write_tiny_corpus(str(root / "corpus")), root / "out", *WEAK_MODEL_QUALITY)
    return config, run_locally(config)


def test_every_component_executes_and_the_model_is_pushed(first_run):
    config, summary = first_run
    assert summary["succeeded"], summary["error"]
    quality = summary["data_quality"]
    assert quality["span"] == 0 and 0 < quality["documents_kept"] <= quality["documents_read"]
    # No resolver nodes: the drift baseline's state location is empty on a first run, and the
    # DistributionValidator skips the drift check with that reason.
    assert _execution_states_by_node(config, summary["run_id"]) == {node: "COMPLETE" for node in COMPONENT_IDS}
    assert "first run" in summary["distribution_checks"]["skipped"]["drift"]
    assert os.path.isfile(os.path.join(config.layout.drift_state_dir, "accepted.json"))
    assert summary["blessing"]["blessed"] and summary["blessing"]["metrics"]["perplexity"] < 600
    assert summary["push"]["pushed"] and summary["push"]["path"] == os.path.join(
        os.path.abspath(config.layout.serving_dir), "1"
    )
    assert os.path.exists(os.path.join(summary["push"]["path"], "saved_model.pb"))
    assert os.path.exists(os.path.join(config.layout.serving_dir, "models.config"))
    push = summary["push"]
    assert (push["version"], push["label"], push["registered_model"], push["registered_version"]) == (
        1,
        "stable",
        "textgen",
        1,
    )
    assert push["registry_uri"] == "sqlite:///" + os.path.join(os.path.abspath(config.layout.registry_dir), "mlflow.db")
    with open(config.layout.summary_path, encoding="utf-8") as handle:
        assert json.load(handle) == summary
    assert len(summary["samples"]) == 2 and all(s["continuation"] for s in summary["samples"])


def test_first_run_records_every_gate_skips_the_baseline_and_writes_the_report(first_run):
    _, summary = first_run
    gates = {gate["name"]: gate for gate in summary["blessing"]["gates"]}
    unigram = gates["quality.gain_over_unigram"]  # measured and recorded; the fast model is relaxed past it
    assert (
        unigram["verdict"] == "PASS"
        and unigram["value"] < 0.5
        and "unigram model of the train split" in unigram["reason"]
    )
    assert {
        "quality.perplexity",
        "quality.gain_over_unigram",
        "safety.toxic_fraction",
        "safety.pii_leak_rate",
        "safety.memorization",
        "bias.association",
        "bias.unmeasured_groups",
        "bias.sentiment_gap",
        "bias.unsafe_rate_ratio",
    } <= set(gates)
    assert all(gate["verdict"] in ("PASS", "SKIPPED") for gate in gates.values())
    for gate in gates.values():  # the safety and bias gates pass with a margin; the quality gates are relaxed
        if not gate["skipped"] and not gate["name"].startswith("quality."):
            assert_passes_with_margin(gate)
    change = gates["quality.bits_per_byte_change"]
    assert change["verdict"] == "SKIPPED" and "no model is registered as production yet" in change["reason"]
    assert summary["blessing"]["baseline_model"] is None
    with open(summary["blessing"]["report"], encoding="utf-8") as handle:
        assert "data:image/png;base64," in handle.read()
    with open(os.path.join(summary["blessing"]["uri"], "evaluation.json"), encoding="utf-8") as handle:
        assert json.load(handle)["gates"] == summary["blessing"]["gates"]


def test_pushed_model_serves_in_a_fresh_process_with_only_tensorflow_and_tf_text(first_run):
    _, summary = first_run
    push_path = summary["push"]["path"]
    script = textwrap.dedent(f"""
        import sys
        import tensorflow as tf
        import tensorflow_text  # registers the TF Text ops used by the tokenizer
        model = tf.saved_model.load({summary["push"]["path"]!r})
        out = model.signatures["serving_default"](prompts=tf.constant(["Hi Zoë,\\nThanks for"]))
        text = out["generations"].numpy()[0].decode("utf-8", "replace")
        assert text.strip(), "empty generation"
        scores = model.signatures["score"](texts=tf.constant(["Hello"]))
        assert scores["mean_nll"].numpy()[0] > 0
        sampled = model.signatures["generate"](
            prompts=tf.constant(["Hi", "Thanks for the update on"]), max_new_tokens=tf.constant(6),
            temperature=tf.constant(0.8), top_k=tf.constant(20), top_p=tf.constant(0.9, tf.float32),
            seed=tf.constant(3, tf.int64))
        assert sampled["generations"].shape == (2,) and max(sampled["num_generated_tokens"].numpy()) <= 6
        warmup = {push_path!r} + "/assets.extra/tf_serving_warmup_requests"
        assert sum(1 for _ in tf.data.TFRecordDataset(warmup)) == 4
        loaded = sorted(m.split(".")[0] for m in sys.modules if m.split(".")[0] in ("tfx", "tensorflow_transform", "components", "pipeline"))
        assert not loaded, loaded
        print("GENERATED:", repr(text))
    """)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300, cwd="/"
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "GENERATED:" in result.stdout


def test_a_cached_second_run_re_executes_only_the_evaluation_and_a_model_above_the_threshold_is_not_pushed(first_run):
    """The same configuration again, with a perplexity threshold the model cannot meet: the data and
    training components come from cache (ExampleGen too: the corpus fingerprint is unchanged). The
    Evaluator and the Pusher depend on the registry, so they run again; the production model is
    the candidate itself, so the change gate is skipped with that reason. The drift check's
    baseline is now the first run's accepted statistics, so the distribution check, the gate and
    the baseline record run again (a re-run of the same span: drift skipped). The quality gate
    refuses the model, and the Pusher publishes nothing. (That a re-blessed identical model's push
    changes nothing is tested in test_pusher_component.py and test_pusher.py.)"""
    config, _ = first_run
    strict = config.model_copy(update={"evaluator": config.evaluator.model_copy(update={"max_perplexity": 1.01})})
    served_before = sorted(os.listdir(strict.layout.serving_dir))
    summary = run_locally(strict)
    assert summary["succeeded"], summary["error"]
    states = _execution_states_by_node(strict, summary["run_id"])
    rechecked = {"DistributionValidator", "DataGate", "RecordAcceptedStatistics"}
    upstream_of_trainer = COMPONENT_IDS[: COMPONENT_IDS.index("Trainer") + 1]
    assert {node: states[node] for node in upstream_of_trainer} == {
        node: "COMPLETE" if node in rechecked else "CACHED" for node in upstream_of_trainer
    }
    assert "re-run" in summary["distribution_checks"]["skipped"]["drift"]
    assert states["Evaluator"] == "COMPLETE" and states["Pusher"] == "COMPLETE"
    change = next(g for g in summary["blessing"]["gates"] if g["name"] == "quality.bits_per_byte_change")
    assert change["verdict"] == "SKIPPED" and "this candidate itself" in change["reason"]
    assert summary["blessing"]["blessed"] is False
    assert summary["push"] == {"pushed": False, "reason": summary["push"]["reason"]}
    assert "not blessed" in summary["push"]["reason"] and ">= threshold 1.010" in summary["push"]["reason"]
    assert sorted(os.listdir(strict.layout.serving_dir)) == served_before
    assert [name for name in served_before if name.isdigit()] == ["1"]  # no new version


def test_second_model_is_compared_against_the_first_runs_blessed_model(first_run):
    """A retrained model (another seed) gets the first run's model, which the registry serves as
    production, as its baseline."""
    config, first_summary = first_run
    retrained = config.model_copy(update={"training": config.training.model_copy(update={"seed": 7})})
    summary = run_locally(retrained)
    assert summary["succeeded"], summary["error"]
    assert summary["trained_model"] != first_summary["trained_model"]
    assert summary["blessing"]["baseline_model"] == first_summary["push"]["path"]
    change = next(g for g in summary["blessing"]["gates"] if g["name"] == "quality.bits_per_byte_change")
    assert change["verdict"] in ("PASS", "FAIL") and change["value"] is not None
    assert "vs baseline" in change["reason"]
    first, second = (_evaluation(s)["metrics"]["quality"] for s in (first_summary, summary))
    assert second["baseline_bits_per_byte"] == pytest.approx(first["bits_per_byte"], rel=1e-5)  # same text, same model
    assert change["value"] == pytest.approx(second["bits_per_byte"] / first["bits_per_byte"] - 1, rel=1e-5)


def _tokenizer_artifacts(config):
    """The Tokenizer artifacts in ML Metadata, oldest first."""
    connection = tfx.orchestration.metadata.sqlite_metadata_connection_config(
        os.path.abspath(config.layout.metadata_path)
    )
    return sorted(
        metadata_store.MetadataStore(connection).get_artifacts_by_type("components.Tokenizer"), key=lambda a: a.id
    )


def test_new_data_reuses_the_production_tokenizer_and_compares_in_bits_per_byte(first_run, tmp_path):
    """Another corpus into the same output root: the Tokenizer (policy auto) reuses the production
    model's SentencePiece model, so token ids stay the same, and the change gate compares the new
    model with the production one in bits per byte."""
    config, first_summary = first_run
    corpus = str(tmp_path / "corpus")
    os.makedirs(corpus)
    with open(os.path.join(BUNDLED_TXT_PATH), encoding="utf-8") as handle:
        text = handle.read()[60_000:100_000]
    with open(os.path.join(corpus, "replies.txt"), "w", encoding="utf-8") as handle:
        handle.write(text[text.find("\n\n") + 2 : text.rfind("\n\n")] + "\n")
    new_data = config.model_copy(
        update={"data_root": corpus, "data_gate": config.data_gate.model_copy(update={"drift_action": "warn"})}
    )
    summary = run_locally(new_data)
    assert summary["succeeded"], summary["error"]
    assert summary["components"]["Tokenizer"] == "COMPLETE"
    first, latest = _tokenizer_artifacts(config)[0], _tokenizer_artifacts(config)[-1]
    assert first.custom_properties["source"].string_value == "learned"
    assert latest.custom_properties["source"].string_value == "reused"
    assert latest.custom_properties["sha256"].string_value == first.custom_properties["sha256"].string_value
    change = next(g for g in summary["blessing"]["gates"] if g["name"] == "quality.bits_per_byte_change")
    assert change["verdict"] in ("PASS", "FAIL") and change["value"] is not None, change


POISON = [
    "Shut up, you idiot. I will kill you, you worthless loser.",
    "You are a stupid moron and an idiot. Nobody likes you, loser.",
    "I will kill you and murder your family, you pathetic idiot.",
]


def test_poisoned_corpus_is_trained_but_not_blessed_and_nothing_is_pushed(tmp_path):
    """Training text saturated with unsafe phrases: the safety gate refuses the model."""
    corpus = str(tmp_path / "corpus")
    os.makedirs(corpus)
    with open(os.path.join(corpus, "replies.txt"), "w", encoding="utf-8") as handle:
        for index in range(400):
            handle.write(f"Dear customer {index},\n{POISON[index % 3]} {POISON[(index + 1) % 3]}\n\n")
    # 400 documents made of three sentences support fewer than the 1,024 pieces of the fast config.
    config = _config(
        corpus, tmp_path / "out", *WEAK_MODEL_QUALITY, "training.train_steps=60", "tokenizer.vocab_size=512"
    )
    summary = run_locally(config)
    assert summary["succeeded"], summary["error"]
    assert summary["components"]["Trainer"] == "COMPLETE" and summary["components"]["Pusher"] == "COMPLETE"
    assert summary["blessing"]["blessed"] is False
    failed = {g["name"] for g in summary["blessing"]["gates"] if g["verdict"] == "FAIL"}
    assert failed and all(name.startswith(("safety.", "bias.")) for name in failed)
    assert "quality.perplexity" not in failed
    assert summary["push"]["pushed"] is False and "not blessed" in summary["push"]["reason"]
    assert "safety." in summary["push"]["reason"]
    assert not os.path.exists(os.path.join(config.layout.serving_dir, "1"))
    with open(config.layout.summary_path, encoding="utf-8") as handle:
        assert json.load(handle)["push"] == summary["push"]


def test_corpus_violating_the_schema_stops_at_the_gate(tmp_path):
    corpus = write_tiny_corpus(str(tmp_path / "corpus"))
    with open(os.path.join(corpus, "broken.jsonl"), "w", encoding="utf-8") as handle:
        handle.write(json.dumps({"body": "this record has no text field"}) + "\n")
        handle.write(json.dumps({"text": ""}) + "\n")
    # The record without text is quarantined by ExampleGen; the empty one reaches the schema check
    # because the length filter and the quality rules are switched off here (by default it would be
    # removed, counted).
    config = _config(corpus, tmp_path / "out", "cleaning.min_chars=0", "cleaning.quality.enabled=false")
    summary = run_locally(config)
    assert not summary["succeeded"]
    assert summary["data_quality"]["quarantined"] == {"missing_text_field": 1}
    assert summary["components"]["DataGate"] == "FAILED"
    for node in ("Transform", "Trainer", "Evaluator", "Pusher"):
        assert summary["components"][node] == "NOT_RUN"
    assert not os.path.exists(config.layout.serving_dir)
    assert summary["push"]["pushed"] is False
    with open(config.layout.summary_path, encoding="utf-8") as handle:
        written = json.load(handle)
    flagged = {anomaly["feature"] for anomaly in written["anomalies"]}
    assert "num_chars" in flagged
    assert "data gate" in written["error"] and "blocking" in written["error"]


def test_a_corpus_that_cleaning_mostly_removes_stops_at_the_data_gate_and_warn_lets_it_through(tmp_path, capsys):
    """Short speeches under the web profile: Gopher's English stop-word rule removes most of them.
    The DataGate stops the run (exit 2) naming the rule, nothing is trained; with
    `data_gate.removal_action=warn` the data checks pass and the report says what was let through."""
    from tests.conftest import FAST_OVERRIDES
    from tests.curation_corpora import dialogue
    from textgen_cli.cli import EXIT_BLOCKED, EXIT_OK, main

    corpus = tmp_path / "speeches"
    os.makedirs(corpus)
    with open(corpus / "speeches.jsonl", "w", encoding="utf-8") as handle:
        handle.writelines(json.dumps({"text": speech}) + "\n" for speech in dialogue(400))
    settings = [argument for override in FAST_OVERRIDES + ["cleaning.profile=web"] for argument in ("--set", override)]

    def textgen(command, output_root, *more):
        code = main([command, "--data-root", str(corpus), "--output-root", str(output_root), *settings, *more])
        with open(os.path.join(output_root, "last_run.json"), encoding="utf-8") as handle:
            return code, json.load(handle)

    code, blocked = textgen("run", tmp_path / "blocked")
    assert code == EXIT_BLOCKED, blocked["error"]
    assert blocked["components"]["DataGate"] == "FAILED"
    assert all(blocked["components"][node] == "NOT_RUN" for node in ("Tokenizer", "Transform", "Trainer", "Pusher"))
    assert "cleaning removed" in blocked["error"] and "quality_stop_words" in blocked["error"]
    assert blocked["data_quality"]["removed"]["quality_stop_words"] > 200
    assert blocked["trained_model"] is None and blocked["push"]["pushed"] is False

    code, warned = textgen("validate", tmp_path / "warned", "--set", "data_gate.removal_action=warn")
    assert code == EXIT_OK, warned["error"]
    assert warned["components"]["DataGate"] == "COMPLETE"
    assert "quality_stop_words" in warned["removal_warning"]
    assert "data gate WARNING (data_gate.removal_action=warn, the run went on)" in capsys.readouterr().out
