"""The summary of one pipeline run: built from ML Metadata, written as `runs/<run id>.json` and
`last_run.json`, and put in plain words for the terminal (`report_lines`).

Everything in the summary comes from what the components of that run recorded in MLMD (execution
states, output artifacts and their custom properties), so it reports what happened, not what
the runner expected, and never what another run of the same pipeline did.
"""

import json
import os
import shlex
from typing import Any, Dict, List, Optional, Sequence

from ml_metadata.metadata_store import metadata_store
from ml_metadata.proto import metadata_store_pb2

from components.data_gate.anomalies import Anomaly, read_anomalies

_OUTPUT_EVENTS = (metadata_store_pb2.Event.OUTPUT, metadata_store_pb2.Event.DECLARED_OUTPUT)


def _custom_properties(artifact: metadata_store_pb2.Artifact) -> Dict[str, Any]:
    values = {}
    for key, value in artifact.custom_properties.items():
        kind = value.WhichOneof("value")
        values[key] = getattr(value, kind) if kind in ("int_value", "double_value", "string_value") else str(value)
    return values


class RunRecord:
    """The executions and output artifacts of one pipeline run, keyed by component id: those
    ML Metadata associates with the run's `pipeline_run` context, whatever other runs of the same
    pipeline (before, during or after it) recorded in the same store."""

    def __init__(self, store: metadata_store.MetadataStore, pipeline_name: str, run_id: str):
        self.store = store
        self.run_id = run_id
        self.executions: Dict[str, metadata_store_pb2.Execution] = {}
        self.outputs: Dict[str, Dict[str, List[metadata_store_pb2.Artifact]]] = {}
        self._load_run(pipeline_name)

    def _load_run(self, pipeline_name: str) -> None:
        run = self.store.get_context_by_type_and_name("pipeline_run", self.run_id)
        if run is None:  # the run stopped before its first component was registered
            return
        node_prefix = f"{pipeline_name}."
        node_type = self.store.get_context_type("node")
        for execution in self.store.get_executions_by_context(run.id):
            node_contexts = [
                context
                for context in self.store.get_contexts_by_execution(execution.id)
                if context.name.startswith(node_prefix) and context.type_id == node_type.id
            ]
            if node_contexts:
                node_id = node_contexts[0].name[len(node_prefix) :]
                self.executions[node_id] = execution
                self.outputs[node_id] = self._output_artifacts(execution.id)

    def _output_artifacts(self, execution_id: int) -> Dict[str, List[metadata_store_pb2.Artifact]]:
        """The execution's output artifacts grouped by output key (e.g. 'model', 'blessing')."""
        events = [e for e in self.store.get_events_by_execution_ids([execution_id]) if e.type in _OUTPUT_EVENTS]
        artifacts = {a.id: a for a in self.store.get_artifacts_by_id([e.artifact_id for e in events])} if events else {}
        grouped: Dict[str, List[metadata_store_pb2.Artifact]] = {}
        for event in events:
            key = event.path.steps[0].key if event.path.steps else ""
            grouped.setdefault(key, []).append(artifacts[event.artifact_id])
        return grouped

    def status(self, node_id: str) -> str:
        execution = self.executions.get(node_id)
        if execution is None:
            return "NOT_RUN"
        return metadata_store_pb2.Execution.State.Name(execution.last_known_state)

    def output(self, node_id: str, key: str) -> Optional[metadata_store_pb2.Artifact]:
        """The first artifact a component wrote under output `key`, if it ran."""
        artifacts = self.outputs.get(node_id, {}).get(key) or []
        return artifacts[0] if artifacts else None


VALIDATORS = {
    "ExampleValidator": "raw data",
    "DistributionValidator": "raw data distribution",
    "TransformedExampleValidator": "token data",
}


def _anomalies(record: RunRecord) -> List[Dict[str, Any]]:
    """Every anomaly either validator recorded, labelled with the data it was found in."""
    found = []
    for node, data in VALIDATORS.items():
        artifact = record.output(node, "anomalies")
        if artifact is not None:
            split_names = artifact.properties["split_names"].string_value
            found += [dict(anomaly.to_dict(), data=data) for anomaly in read_anomalies(artifact.uri, split_names)]
    return found


def _distribution_checks(record: RunRecord) -> Optional[Dict[str, Any]]:
    """What the drift and skew checks compared: every divergence with its threshold, the span
    drift was measured against, and why a check was skipped."""
    artifact = record.output("DistributionValidator", "anomalies")
    if artifact is None:
        return None
    properties = _custom_properties(artifact)
    baseline_span = properties.get("drift_baseline_span", -1)
    return {
        "drift_baseline_span": None if baseline_span == -1 else baseline_span,
        "measurements": json.loads(properties.get("measurements") or "[]"),
        "skipped": json.loads(properties.get("skipped") or "{}"),
    }


def _blessing(record: RunRecord) -> Optional[Dict[str, Any]]:
    artifact = record.output("Evaluator", "blessing")
    if artifact is None:
        return None
    properties = _custom_properties(artifact)
    return {
        "blessed": properties.get("blessed") == 1,
        "reason": properties.get("reason"),
        "metrics": {"perplexity": properties.get("perplexity")},
        "thresholds": {"max_perplexity": properties.get("max_perplexity")},
        "model": properties.get("current_model"),
        "uri": artifact.uri,
        "gates": json.loads(properties["gates"]) if properties.get("gates") else [],
        "baseline_model": properties.get("baseline_model"),
        "report": properties.get("report"),
    }


def _push(record: RunRecord, component_ids: Sequence[str]) -> Dict[str, Any]:
    """Where the model was pushed, or why it was not."""
    artifact = record.output("Pusher", "pushed_model")
    if artifact is not None:
        properties = _custom_properties(artifact)
        if properties.get("pushed") == 1:
            return {
                "pushed": True,
                "path": properties.get("pushed_destination"),
                "version": properties.get("pushed_version"),
                "label": properties.get("serving_label"),
                "registered_model": properties.get("registered_model_name"),
                "registered_version": properties.get("registered_model_version"),
                "registry_uri": properties.get("registry_uri"),
            }
        return {"pushed": False, "reason": properties.get("push_skipped_reason")}
    stopped_at = next((node for node in component_ids if record.status(node) == "FAILED"), None)
    reason = f"the run stopped at {stopped_at}" if stopped_at else "the Pusher did not run"
    return {"pushed": False, "reason": reason}


def _data_quality(record: RunRecord) -> Optional[Dict[str, Any]]:
    """ExampleGen's ingest report (read/kept/repaired/quarantined/removed counts) and its span."""
    artifact = record.output("ExampleGen", "examples")
    properties = _custom_properties(artifact) if artifact is not None else {}
    if not properties.get("ingest_report"):
        return None
    quality = json.loads(properties["ingest_report"])
    # TFX's ExampleGen driver records the span as a custom property (older drivers: a property).
    span = properties.get("span")
    if span is None and "span" in artifact.properties:
        span = artifact.properties["span"].int_value
    quality["span"] = span
    return quality


def _tokenizer(record: RunRecord) -> Optional[Dict[str, Any]]:
    """Which tokenizer the run used (source, size), how it splits numbers (numbers.py), and the
    sha256 of its chat template (None for a model of plain text).

    The Tokenizer stage records `chat_template_sha256` in the same step that writes the template
    and its grammar beside the tokenizer files; Transform's graph and the export carry those files,
    and the export adds the `chat` signature exactly when they are there. So it says, from ML
    Metadata and without loading the model, whether the run's model answers conversations.
    """
    artifact = record.output("Tokenizer", "tokenizer")
    if artifact is None:
        return None
    properties = _custom_properties(artifact)
    splitting = properties.get("number_splitting")
    return {
        "source": properties.get("source"),
        "vocab_size": properties.get("vocab_size"),
        "number_splitting": json.loads(splitting) if splitting else None,
        "chat_template_sha256": properties.get("chat_template_sha256") or None,
    }


def _chat_model(summary: Dict[str, Any]) -> bool:
    """Whether the run's model was trained on conversations (its tokenizer has a chat template)."""
    return bool((summary.get("tokenizer") or {}).get("chat_template_sha256"))


def _tokenizer_line(tokenizer: Optional[Dict[str, Any]]) -> List[str]:
    """'tokenizer: learned, 1,024 tokens; every digit is a token of its own', or its warning."""
    if not tokenizer or not tokenizer.get("number_splitting"):
        return []
    splitting = tokenizer["number_splitting"]
    if splitting["merges_digits"]:
        numbers = (
            f"WARNING: digits merge ({1 - splitting['alone_fraction']:.0%} of the sample's digits share a token "
            "with another character; models copy numbers poorly: docs/tokenizers.md, Numbers)"
        )
    else:
        numbers = "every digit is a token of its own"
    return [f"tokenizer: {tokenizer['source']}, {tokenizer['vocab_size']:,} tokens; {numbers}"]


def _removal_warning(record: RunRecord) -> Optional[str]:
    """What the DataGate let through with `data_gate.removal_action=warn` (None when nothing)."""
    artifact = record.output("DataGate", "result")
    return (_custom_properties(artifact).get("removal_warning") or None) if artifact is not None else None


def summarize_run(
    connection_config: metadata_store_pb2.ConnectionConfig,
    pipeline_name: str,
    run_id: str,
    component_ids: Sequence[str],
    error: Optional[BaseException] = None,
) -> Dict[str, Any]:
    """The summary of run `run_id` of `pipeline_name` (see module docstring)."""
    record = RunRecord(metadata_store.MetadataStore(connection_config), pipeline_name, run_id)
    blessing = _blessing(record)
    trainer_model = record.output("Trainer", "model")
    return {
        "pipeline_name": pipeline_name,
        "run_id": record.run_id,
        "succeeded": error is None,
        "error": str(error) if error else None,
        "components": {node: record.status(node) for node in component_ids},
        "data_quality": _data_quality(record),
        "removal_warning": _removal_warning(record),
        "anomalies": _anomalies(record),
        "distribution_checks": _distribution_checks(record),
        "tokenizer": _tokenizer(record),
        "blessing": blessing,
        "push": _push(record, component_ids),
        "trained_model": trainer_model.uri if trainer_model is not None else None,
    }


def write_summary(summary: Dict[str, Any], path: str) -> None:
    """Writes the summary as indented JSON (UTF-8, non-ASCII kept readable), through a temporary
    file renamed into place, so a reader never sees half a summary."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    temporary = f"{path}.{os.getpid()}.tmp"
    with open(temporary, "w", encoding="utf-8") as handle:
        json.dump(summary, handle, indent=2, ensure_ascii=False)
        handle.write("\n")
    os.replace(temporary, path)


def write_run_summary(summary: Dict[str, Any], layout) -> None:
    """Writes a finished run's summary as `runs/<run id>.json` and as `last_run.json` (an
    `OutputLayout`'s paths): the run lock lets one run at a time finish, so the newest written is
    the newest completed."""
    write_summary(summary, layout.run_summary_path(summary["run_id"]))
    write_summary(summary, layout.summary_path)


def _distribution_check_lines(checks: Optional[Dict[str, Any]]) -> List[str]:
    """One line per drift/skew check: what it compared and the largest divergence, or why skipped."""
    if not checks:
        return []
    lines = []
    compared = {"drift": f"this span vs accepted span {checks.get('drift_baseline_span')}", "skew": "train vs eval"}
    for check, description in compared.items():
        if check in checks["skipped"]:
            lines.append(f"{check} check skipped: {checks['skipped'][check]}")
            continue
        measured = [m for m in checks["measurements"] if m["check"] == check]
        if measured:
            worst = max(measured, key=lambda m: m["divergence"] / m["threshold"] if m["threshold"] else m["divergence"])
            over = sum(m["divergence"] > m["threshold"] for m in measured)
            lines.append(
                f"{check} check ({description}): {len(measured)} features compared, {over} over threshold; "
                f"largest Jensen-Shannon divergence {worst['divergence']:.3f} on {worst['feature']} "
                f"(threshold {worst['threshold']})"
            )
    return lines


def _push_lines(summary: Dict[str, Any]) -> List[str]:
    """Where the model was pushed and registered, or why not; nothing for a partial run."""
    push = summary["push"]
    if "Pusher" not in summary["components"]:
        return []  # a partial run (`textgen validate`) has nothing to push
    if not push["pushed"]:
        return [f"nothing pushed: {push['reason']}"]
    lines = [f"pushed model: {push['path']} (version {push['version']})"]
    if push.get("registered_version") is not None:
        lines.append(
            f"registered: {push['registered_model']} version {push['registered_version']} in {push['registry_uri']}"
        )
    return lines


# What the `next:` line asks a pushed model: a text model continues a text, a chat model answers
# a user message through its template (a raw continuation of a chat model is no use).
NEXT_PROMPT = "Once upon a time"
NEXT_CHAT_MESSAGE = "How do I turn on sync on my phone?"


def _next_step_lines(summary: Dict[str, Any]) -> List[str]:
    """After a push, what to do with it: generate from the stable version (a chat model: answer a
    user message with --chat), watch the training in TensorBoard, browse an embedded registry;
    nothing when nothing was pushed."""
    push = summary["push"]
    if not push.get("pushed"):
        return []
    model = shlex.quote(os.path.dirname(push["path"]))
    if _chat_model(summary):
        lines = ["next:", f"  textgen generate --model {model} --chat {shlex.quote(NEXT_CHAT_MESSAGE)}"]
    else:
        lines = ["next:", f"  textgen generate --model {model} {shlex.quote(NEXT_PROMPT)}"]
    if summary.get("trained_model"):  # .../Trainer/model/<id>: the TensorBoard summaries are in .../Trainer/model_run/
        trainer_dir = os.path.dirname(os.path.dirname(summary["trained_model"]))
        lines.append(f"  tensorboard --logdir {shlex.quote(os.path.join(trainer_dir, 'model_run'))}")
    if str(push.get("registry_uri", "")).startswith("sqlite:"):  # the embedded registry: no server to browse it
        lines.append(f"  mlflow ui --backend-store-uri {shlex.quote(push['registry_uri'])}")
    return lines


def _anomaly_line(anomaly: Dict[str, Any]) -> str:
    """`anomaly in <data> [<split>] <feature>: <words> [<TFDV type>] - <description>`."""
    fields = {field: anomaly.get(field) for field in Anomaly._fields}
    found = Anomaly(**dict(fields, types=fields["types"] or []))  # a summary written before types were kept
    return f"anomaly in {anomaly['data']} [{found.split}] {found.feature}: {found.label()} - {found.description}"


def report_lines(summary: Dict[str, Any], summary_path: str, command: str = "run") -> List[str]:
    """The run report the CLI prints after `run` and `validate` (`command`, named in its heading),
    from a summary as written to `summary_path` (`last_run.json`). Printed one per line; a sample's
    prompt or continuation (a chat model's user message or reply) may itself span several lines."""
    lines = ["", f"=== textgen {command} summary ===", f"run id: {summary['run_id']}"]
    lines += [f"  {node:<28} {status}" for node, status in summary["components"].items()]
    if summary.get("data_quality"):
        from components.example_gen.ingest_report import summary_lines  # imports Beam: only when there is a report

        spans = summary["data_quality"].get("spans") or [summary["data_quality"].get("span")]
        lines.append(f"data quality (span{'s' if len(spans) > 1 else ''} {', '.join(map(str, spans))}):")
        lines += [f"  {line}" for line in summary_lines(summary["data_quality"])]
    if summary.get("removal_warning"):
        lines += [
            "data gate WARNING (data_gate.removal_action=warn, the run went on): "
            + summary["removal_warning"].splitlines()[0]
        ] + summary["removal_warning"].splitlines()[1:-1]
    lines += _distribution_check_lines(summary.get("distribution_checks"))
    lines += [_anomaly_line(anomaly) for anomaly in summary["anomalies"]]
    lines += _tokenizer_line(summary.get("tokenizer"))
    blessing = summary.get("blessing")
    if blessing:
        lines.append(f"evaluation: {'BLESSED' if blessing['blessed'] else 'NOT BLESSED'} ({blessing['reason']})")
        lines += [
            f"  gate {gate['name']:<30} {gate['verdict']:<8} {gate['reason']}" for gate in blessing.get("gates", [])
        ]
    lines += _push_lines(summary)
    if summary.get("error"):
        lines.append(f"error: {summary['error']}")
    for sample in summary.get("samples", []):
        asked, answered = ("user", "reply") if sample.get("chat") else ("prompt", "continuation")
        lines += ["", f"--- {asked} ---", sample["prompt"], f"--- {answered} ---", sample["continuation"]]
    lines.append("")
    if blessing and blessing.get("report"):
        lines.append(f"evaluation report: {blessing['report']}")
    lines.append(f"summary written to {summary_path}")
    return lines + _next_step_lines(summary)
