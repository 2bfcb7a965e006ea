"""Runs the pipeline locally: LocalDagRunner, Beam DirectRunner, ML Metadata in SQLite.

After the run (successful or not) it writes `OUTPUT_ROOT/last_run.json` from ML Metadata and,
when a model was pushed, adds generations for the sample prompts.
"""
import logging
import os
from typing import Any, Dict, Optional

from tfx import v1 as tfx
from tfx.orchestration import pipeline as pipeline_py

from components.resources import resolve
from pipeline import samples
from pipeline.config import PipelineConfig
from pipeline.layout import PipelinePaths
from pipeline.pipeline import COMPONENT_IDS, create_pipeline, uncacheable_nodes
from pipeline.run_summary import summarize_latest_run, write_summary

log = logging.getLogger(__name__)


def _sample_generations(config: PipelineConfig, summary: Dict[str, Any]) -> list:
    push = summary["push"]
    if not push.get("pushed") or not config.generation.num_samples:
        return []
    prompts = samples.load_prompts(resolve(config.generation.prompts_file), config.generation.num_samples)
    log.info("Generating continuations of %d sample prompts with %s", len(prompts), push["path"])
    continuations = samples.generate(
        push["path"], prompts, config.generation.max_new_tokens, config.generation.temperature, config.generation.top_k,
        top_p=config.generation.top_p,
    )
    return [{"prompt": p, "continuation": c} for p, c in zip(prompts, continuations)]


class _LocalDagRunner(tfx.orchestration.LocalDagRunner):
    """LocalDagRunner that never serves the given nodes from the cache (TFX's DSL sets caching per
    pipeline only; the compiled IR carries it per node)."""

    def __init__(self, uncacheable: frozenset):
        super().__init__()
        self._uncacheable = uncacheable

    def run_with_ir(self, pipeline, run_options=None, **kwargs):
        for node in pipeline.nodes:
            if node.pipeline_node.node_info.id in self._uncacheable:
                node.pipeline_node.execution_options.caching_options.enable_cache = False
        return super().run_with_ir(pipeline, run_options=run_options, **kwargs)


def run_locally(config: PipelineConfig, through: Optional[str] = None) -> Dict[str, Any]:
    """Runs the whole pipeline once; returns the summary also written to `last_run.json`.

    With `through` (a node id), a TFX partial run of that node and everything upstream of it.
    """
    os.makedirs(config.layout.local_root, exist_ok=True)
    connection = tfx.orchestration.metadata.sqlite_metadata_connection_config(os.path.abspath(config.layout.metadata_path))
    paths = PipelinePaths.local(config)
    pipeline = create_pipeline(config, paths, connection)
    run_options = pipeline_py.RunOptions(to_nodes=[through]) if through else None
    error = None
    try:
        _LocalDagRunner(uncacheable_nodes(config, paths)).run(pipeline, run_options=run_options)
    except Exception as exc:  # the summary records any component failure; the CLI reports it
        log.debug("The pipeline run failed", exc_info=True)  # the CLI reports it, in one line
        error = exc
    component_ids = COMPONENT_IDS[: COMPONENT_IDS.index(through) + 1] if through else COMPONENT_IDS
    summary = summarize_latest_run(connection, config.pipeline_name, component_ids, error)
    summary["samples"] = _sample_generations(config, summary)
    write_summary(summary, config.layout.summary_path)
    return summary
