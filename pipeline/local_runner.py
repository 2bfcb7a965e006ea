"""Runs the pipeline locally: LocalDagRunner, Beam DirectRunner, ML Metadata in SQLite.

A run holds its output root's run lock (pipeline/run_lock.py) from start to summary, under a run
id of its own that names its ML Metadata `pipeline_run` context. After the run (successful or
not) it writes the summary of exactly that pipeline run, read from ML Metadata, with
generations for the sample prompts when a model was pushed, to `OUTPUT_ROOT/runs/<run id>.json`
and `OUTPUT_ROOT/last_run.json`.
"""

import logging
import os
from typing import Any, Dict, Optional

from tfx import v1 as tfx
from tfx.dsl.compiler import constants
from tfx.orchestration import pipeline as pipeline_py
from tfx.orchestration.portable import runtime_parameter_utils

from components.resources import resolve
from pipeline import run_lock, samples
from pipeline.config import PipelineConfig
from pipeline.layout import PipelinePaths
from pipeline.pipeline import COMPONENT_IDS, create_pipeline, uncacheable_nodes
from pipeline.run_summary import summarize_run, write_run_summary

log = logging.getLogger(__name__)


def _sample_generations(config: PipelineConfig, summary: Dict[str, Any]) -> list:
    push = summary["push"]
    if not push.get("pushed") or not config.generation.num_samples:
        return []
    if samples.open_model(push["path"]).has_chat:  # a chat model answers sample user messages
        messages = samples.load_prompts(resolve(config.generation.chat_prompts_file), config.generation.num_samples)
        log.info("Answering %d sample user messages with %s (its chat template)", len(messages), push["path"])
        replies = samples.chat(
            push["path"],
            [[("user", message)] for message in messages],
            config.generation.max_new_tokens,
            config.generation.temperature,
            config.generation.top_k,
            top_p=config.generation.top_p,
        )
        return [
            {"prompt": message, "continuation": reply.text, "chat": True} for message, reply in zip(messages, replies)
        ]
    prompts = samples.load_prompts(resolve(config.generation.prompts_file), config.generation.num_samples)
    log.info("Generating continuations of %d sample prompts with %s", len(prompts), push["path"])
    continuations = samples.generate(
        push["path"],
        prompts,
        config.generation.max_new_tokens,
        config.generation.temperature,
        config.generation.top_k,
        top_p=config.generation.top_p,
    )
    return [{"prompt": p, "continuation": c} for p, c in zip(prompts, continuations)]


class _LocalDagRunner(tfx.orchestration.LocalDagRunner):
    """LocalDagRunner that runs under the given run id (TFX's own would be the start time, which
    the summary could not tell from another run's) and never serves the given nodes from the
    cache (TFX's DSL sets caching per pipeline only; the compiled IR carries it per node)."""

    def __init__(self, run_id: str, uncacheable: frozenset):
        super().__init__()
        self._run_id = run_id
        self._uncacheable = uncacheable

    def run_with_ir(self, pipeline, run_options=None, **kwargs):
        # Bound here, LocalDagRunner's own substitution finds no run-id parameter left to fill.
        runtime_parameter_utils.substitute_runtime_parameter(
            pipeline, {constants.PIPELINE_RUN_ID_PARAMETER_NAME: self._run_id}
        )
        for node in pipeline.nodes:
            if node.pipeline_node.node_info.id in self._uncacheable:
                node.pipeline_node.execution_options.caching_options.enable_cache = False
        return super().run_with_ir(pipeline, run_options=run_options, **kwargs)


def run_locally(config: PipelineConfig, through: Optional[str] = None) -> Dict[str, Any]:
    """Runs the whole pipeline once; returns the summary also written to `runs/<run id>.json` and
    `last_run.json`. Raises `pipeline.errors.Busy`, changing nothing, when another run holds the
    output root.

    With `through` (a node id), a TFX partial run of that node and everything upstream of it.
    """
    with run_lock.hold(config.layout) as holder:
        log.info("Run %s on %s", holder.run_id, config.output_root)
        connection = tfx.orchestration.metadata.sqlite_metadata_connection_config(
            os.path.abspath(config.layout.metadata_path)
        )
        paths = PipelinePaths.local(config)
        pipeline = create_pipeline(config, paths, connection)
        run_options = pipeline_py.RunOptions(to_nodes=[through]) if through else None
        error = None
        try:
            _LocalDagRunner(holder.run_id, uncacheable_nodes(config, paths)).run(pipeline, run_options=run_options)
        except Exception as exc:  # the summary records any component failure; the CLI reports it
            log.debug("The pipeline run failed", exc_info=True)  # the CLI reports it, in one line
            error = exc
        component_ids = COMPONENT_IDS[: COMPONENT_IDS.index(through) + 1] if through else COMPONENT_IDS
        summary = summarize_run(connection, config.pipeline_name, holder.run_id, component_ids, error)
        summary["samples"] = _sample_generations(config, summary)
        write_run_summary(summary, config.layout)
    return summary
