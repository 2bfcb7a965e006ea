"""The summary of a run is built from that run's executions only (pipeline/run_summary.py), when
other runs of the same pipeline share the ML Metadata store.

The store is a real MLMD SQLite store written the way TFX's launcher records a run (a
`pipeline` context, one `pipeline_run` context per run named by its run id, one `node` context
per component named `<pipeline>.<node id>`, every execution associated with all three, output
artifacts attributed through OUTPUT events keyed by the output name), without running a pipeline.
The case is the one from issue 41: run 1 is still going when run 2 starts, and run 1 pushes after
run 2's context was created.
"""

import json
import os

from ml_metadata.metadata_store import metadata_store
from ml_metadata.proto import metadata_store_pb2
from tfx import v1 as tfx

from pipeline.layout import OutputLayout
from pipeline.run_summary import summarize_run, write_run_summary

PIPELINE = "textgen"
NODES = ["ExampleGen", "Trainer", "Pusher"]
COMPLETE, RUNNING = metadata_store_pb2.Execution.COMPLETE, metadata_store_pb2.Execution.RUNNING


class _Store:
    """An MLMD store with TFX's context types and one execution type and the PushedModel type."""

    def __init__(self, path: str):
        self.connection = tfx.orchestration.metadata.sqlite_metadata_connection_config(path)
        self.store = metadata_store.MetadataStore(self.connection)
        types = {
            name: self.store.put_context_type(metadata_store_pb2.ContextType(name=name))
            for name in ("pipeline", "pipeline_run", "node")
        }
        self.run_type = types["pipeline_run"]
        self.execution_type = self.store.put_execution_type(metadata_store_pb2.ExecutionType(name="Component"))
        self.pushed_type = self.store.put_artifact_type(metadata_store_pb2.ArtifactType(name="PushedModel"))
        contexts = [metadata_store_pb2.Context(type_id=types["pipeline"], name=PIPELINE)]
        contexts += [metadata_store_pb2.Context(type_id=types["node"], name=f"{PIPELINE}.{node}") for node in NODES]
        ids = self.store.put_contexts(contexts)
        self.pipeline = self.store.get_contexts_by_id(ids[:1])[0]
        self.nodes = dict(zip(NODES, self.store.get_contexts_by_id(ids[1:])))
        self.runs = {}

    def start_run(self, run_id: str) -> None:
        [context_id] = self.store.put_contexts([metadata_store_pb2.Context(type_id=self.run_type, name=run_id)])
        self.runs[run_id] = self.store.get_contexts_by_id([context_id])[0]

    def execute(self, run_id: str, node: str, state, pushed_version: int = 0) -> None:
        """Records an execution of `node` in run `run_id`; a Pusher's records its pushed model."""
        execution = metadata_store_pb2.Execution(type_id=self.execution_type, last_known_state=state)
        outputs = []
        if pushed_version:
            artifact = metadata_store_pb2.Artifact(
                type_id=self.pushed_type, uri=f"/out/pushed/{run_id}", state=metadata_store_pb2.Artifact.LIVE
            )
            for name, value in (("pushed", 1), ("pushed_version", pushed_version)):
                artifact.custom_properties[name].int_value = value
            artifact.custom_properties["pushed_destination"].string_value = f"/out/serving/{pushed_version}"
            artifact.custom_properties["serving_label"].string_value = "stable"
            event = metadata_store_pb2.Event(type=metadata_store_pb2.Event.OUTPUT)
            event.path.steps.add().key = "pushed_model"
            outputs.append((artifact, event))
        self.store.put_execution(execution, outputs, [self.pipeline, self.runs[run_id], self.nodes[node]])

    def record_tokenizer(self, run_id: str, chat_template_sha256: str = "") -> None:
        """Records a Tokenizer execution of run `run_id` whose artifact has the properties the
        Tokenizer stage sets (a chat template's sha256 only when it wrote one)."""
        name = f"{PIPELINE}.Tokenizer"
        node = self.store.get_context_by_type_and_name("node", name)
        if node is None:
            [node_id] = self.store.put_contexts(
                [metadata_store_pb2.Context(type_id=self.nodes[NODES[0]].type_id, name=name)]
            )
            node = self.store.get_contexts_by_id([node_id])[0]
        artifact_type = self.store.put_artifact_type(metadata_store_pb2.ArtifactType(name="Tokenizer"))
        artifact = metadata_store_pb2.Artifact(type_id=artifact_type, uri=f"/out/tokenizer/{run_id}")
        artifact.custom_properties["source"].string_value = "learned"
        artifact.custom_properties["vocab_size"].int_value = 1024
        if chat_template_sha256:
            artifact.custom_properties["chat_template_sha256"].string_value = chat_template_sha256
        event = metadata_store_pb2.Event(type=metadata_store_pb2.Event.OUTPUT)
        event.path.steps.add().key = "tokenizer"
        execution = metadata_store_pb2.Execution(type_id=self.execution_type, last_known_state=COMPLETE)
        self.store.put_execution(execution, [(artifact, event)], [self.pipeline, self.runs[run_id], node])


def _summary(store: _Store, run_id: str) -> dict:
    return summarize_run(store.connection, PIPELINE, run_id, NODES)


def test_each_run_is_summarized_from_its_own_executions(tmp_path):
    store = _Store(str(tmp_path / "metadata.sqlite"))
    store.start_run("run-1")
    store.execute("run-1", "ExampleGen", COMPLETE)
    store.execute("run-1", "Trainer", COMPLETE)
    store.start_run("run-2")  # the newer run: its context is created before run 1 has pushed
    store.execute("run-2", "ExampleGen", RUNNING)
    store.execute("run-1", "Pusher", COMPLETE, pushed_version=1)

    first = _summary(store, "run-1")
    assert first["run_id"] == "run-1"
    assert first["components"] == {"ExampleGen": "COMPLETE", "Trainer": "COMPLETE", "Pusher": "COMPLETE"}
    assert (first["push"]["pushed"], first["push"]["version"]) == (True, 1)
    second = _summary(store, "run-2")
    assert second["components"] == {"ExampleGen": "RUNNING", "Trainer": "NOT_RUN", "Pusher": "NOT_RUN"}
    assert second["push"] == {"pushed": False, "reason": "the Pusher did not run"}

    store.execute("run-2", "Pusher", COMPLETE, pushed_version=2)  # run 2 pushes too: run 1 still reads its own
    assert _summary(store, "run-1")["push"]["version"] == 1
    assert _summary(store, "run-2")["push"]["version"] == 2


def test_a_run_that_recorded_nothing_has_an_empty_summary_not_another_runs(tmp_path):
    store = _Store(str(tmp_path / "metadata.sqlite"))
    store.start_run("run-1")
    store.execute("run-1", "Pusher", COMPLETE, pushed_version=1)
    summary = summarize_run(store.connection, PIPELINE, "run-2", NODES, error=RuntimeError("compile failed"))
    assert summary["run_id"] == "run-2" and not summary["succeeded"]
    assert set(summary["components"].values()) == {"NOT_RUN"} and not summary["push"]["pushed"]


def test_each_run_writes_its_own_summary_and_last_run_is_the_newest(tmp_path):
    store = _Store(str(tmp_path / "metadata.sqlite"))
    layout = OutputLayout(str(tmp_path / "out"))
    for run_id, version in (("run-1", 1), ("run-2", 2)):
        store.start_run(run_id)
        store.execute(run_id, "Pusher", COMPLETE, pushed_version=version)
        write_run_summary(_summary(store, run_id), layout)
    assert sorted(os.listdir(tmp_path / "out" / "runs")) == ["run-1.json", "run-2.json"]
    with open(layout.run_summary_path("run-1"), encoding="utf-8") as handle:
        assert json.load(handle)["push"]["version"] == 1
    with (
        open(layout.summary_path, encoding="utf-8") as handle,
        open(layout.run_summary_path("run-2"), encoding="utf-8") as newest,
    ):
        assert json.load(handle) == json.load(newest)
    assert sorted(os.listdir(tmp_path / "out")) == ["last_run.json", "runs"]  # no temporary file left


def test_the_summary_records_whether_the_runs_tokenizer_has_a_chat_template(tmp_path):
    """What tells the report a chat model from a text model: the Tokenizer artifact's
    chat_template_sha256, set when the stage wrote the template the export's chat signature uses."""
    store = _Store(str(tmp_path / "metadata.sqlite"))
    for run_id, sha256 in (("run-1", ""), ("run-2", "ab12")):
        store.start_run(run_id)
        store.record_tokenizer(run_id, sha256)
    assert _summary(store, "run-1")["tokenizer"]["chat_template_sha256"] is None
    assert _summary(store, "run-2")["tokenizer"] == {
        "source": "learned",
        "vocab_size": 1024,
        "number_splitting": None,
        "chat_template_sha256": "ab12",
    }
