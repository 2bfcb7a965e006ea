"""The `textgen` commands: each takes the parsed arguments (see `textgen_cli.cli`) and returns an
exit code, or raises an expected failure that `pipeline.errors` turns into one line.

Heavy imports (TFX, TensorFlow, MLflow, kfp) happen inside the commands so `--help` is instant.
"""

import argparse
import datetime
import json
import logging
import os
from typing import Any, Callable, Dict

import yaml

from pipeline import config as config_module
from pipeline import errors
from pipeline.errors import EXIT_OK

# A failed gate means the data was refused (exit 2), not that the run broke (exit 1).
BLOCKING_GATES = ("DataGate", "TokenGate")


def _load_config(args: argparse.Namespace, **top_level: Any) -> config_module.PipelineConfig:
    """The config from --config and --set, then the command's dedicated flags (`top_level`)."""
    try:
        return config_module.load_config(args.config, args.overrides, **top_level)
    except yaml.YAMLError as exc:  # a --set value (config files are checked by load_config)
        # Only what is wrong, not the YAML parser's quote of the value: it may hold a secret.
        problem = "; ".join(filter(None, (getattr(exc, "context", None), getattr(exc, "problem", None))))
        raise errors.UsageError(f"a --set value is not valid YAML{': ' + problem if problem else ''}") from exc


def _check_locations(cfg: config_module.PipelineConfig) -> None:
    """Refuses, before anything is created, a location whose URI scheme this process cannot open
    (naming the scheme) and a local data root that is not a directory. Registers the object-store
    file systems for the run (components/filesystems.py)."""
    from components import filesystems
    from components.resources import resolve

    data_root = resolve(cfg.data_root)
    locations = {"data root": data_root, "output root": cfg.output_root}
    if cfg.data_gate.state_uri:
        locations["data_gate.state_uri"] = cfg.data_gate.state_uri
    if cfg.model.checkpoint:
        locations["model.checkpoint"] = cfg.model.checkpoint
    try:
        filesystems.check_schemes(locations)
    except filesystems.SchemeError as exc:
        raise errors.UsageError(str(exc)) from exc
    if filesystems.is_local(data_root) and not os.path.isdir(data_root):
        raise FileNotFoundError(f"data root {data_root} is not a directory")


def _check_checkpoint(cfg: config_module.PipelineConfig) -> None:
    """Refuses, before the pipeline starts, a `model.checkpoint` the run could not fine-tune: its
    config.json, safetensors headers and (when the run tokenizes with the checkpoint's tokenizer)
    the tokenizer's size are checked without reading a weight
    (components/trainer/checkpoint/preflight.py). A checkpoint that is there but wrong is a
    configuration the run cannot use: exit 64, nothing ran. A checkpoint directory that does not
    exist is a missing input, as a missing data root is: exit 1."""
    if not cfg.model.checkpoint:
        return
    from components.trainer.checkpoint import preflight
    from components.trainer.checkpoint.errors import CheckpointError

    directory = cfg.model.checkpoint
    try:  # a missing directory raises FileNotFoundError (exit 1)
        # auto and checkpoint tokenize with the checkpoint's own tokenizer; reuse with the
        # production model's, which the Tokenizer stage checks against the checkpoint.
        own = cfg.tokenizer.policy in ("auto", "checkpoint")
        tokenizer = preflight.checkpoint_tokenizer(directory) if own else None
        checked = preflight.check_checkpoint(directory, cfg.model, tokenizer)
    except CheckpointError as exc:
        raise errors.UsageError(f"model.checkpoint: {exc}") from exc
    logging.getLogger(__name__).info(
        "Checked model.checkpoint %s: %s, %d weight tensors as its config.json describes",
        directory,
        checked.config.model_type,
        checked.tensors,
    )


def _local_run(args: argparse.Namespace, validation_only: bool) -> int:
    """`run` (the whole pipeline) and `validate` (a partial run through the data validation):
    runs locally, prints the report, and exits 0, or reports the run's error in one line and
    exits 2 (a gate blocked) or 1 (any other failure); exits 75 at once, changing nothing, when
    another run holds the output root (pipeline/run_lock.py)."""
    cfg = _load_config(
        args, data_root=args.data_root, output_root=args.output_root, enable_cache=False if args.no_cache else None
    )
    from pipeline import run_lock

    run_lock.check_free(cfg.layout)  # before the slow checks; run_locally holds the lock itself
    _check_locations(cfg)
    if not validation_only:  # validate stops before the checkpoint is used
        _check_checkpoint(cfg)
    from pipeline.local_runner import run_locally  # imports TFX: after the fast refusals
    from pipeline.pipeline import DATA_VALIDATION_LAST_NODE
    from pipeline.run_summary import report_lines

    summary = run_locally(cfg, through=DATA_VALIDATION_LAST_NODE if validation_only else None)
    print("\n".join(report_lines(summary, cfg.layout.summary_path, command=args.command)))
    if cfg.layout.local_root != cfg.output_root:
        print(f"ML Metadata and the embedded registry (SQLite, not on an object store): {cfg.layout.local_root}")
    if not summary["succeeded"]:
        raise _run_failure(summary)
    return EXIT_OK


def _run_failure(summary: Dict[str, Any]) -> errors.CommandError:
    """The expected failure of a run that did not succeed, from its summary: `Blocked` (exit 2)
    when a data gate stopped it, else a failure (exit 1); its message is the run's error."""
    blocked = any(summary["components"].get(gate) == "FAILED" for gate in BLOCKING_GATES)
    message = summary.get("error") or "the pipeline run failed"
    return errors.Blocked(message) if blocked else errors.CommandError(message)


def run(args: argparse.Namespace) -> int:
    return _local_run(args, validation_only=False)


def validate(args: argparse.Namespace) -> int:
    return _local_run(args, validation_only=True)


def compile_(args: argparse.Namespace) -> int:
    kubeflow_overrides = {
        key: value
        for key, value in {
            "image": args.image,
            "pipeline_root": args.pipeline_root,
            "data_root": args.data_root,
            "serving_dir": args.serving_dir,
        }.items()
        if value is not None
    }
    if args.beam_args:
        kubeflow_overrides["beam_args"] = args.beam_args
    for section in ("env", "secret_env", "config_map_env"):
        pairs = _name_value_pairs(getattr(args, section) or [], f"--{section.replace('_', '-')}")
        if pairs:
            kubeflow_overrides[section] = pairs
    cfg = _load_config(args, kubeflow=kubeflow_overrides or None)
    from kubeflow.compile import compile_pipeline
    from kubeflow.oss_compat import RootError
    from kubeflow.pod_config import PodConfigError

    try:
        path = compile_pipeline(cfg, args.output_dir)
    except (RootError, PodConfigError) as exc:  # e.g. a minio:// pipeline root, an embedded registry
        raise errors.UsageError(str(exc)) from exc
    print(f"wrote KFP v2 pipeline spec: {path}")
    return EXIT_OK


def _location(path_or_uri: str) -> str:
    """An absolute local path, or an object-store URI whose file systems are registered in this
    process (refused by name when its scheme cannot be opened)."""
    from components import filesystems

    if filesystems.is_local(path_or_uri):
        return os.path.abspath(path_or_uri)
    try:
        filesystems.check_schemes({"location": path_or_uri})
    except filesystems.SchemeError as exc:
        raise errors.UsageError(str(exc)) from exc
    return path_or_uri


def _name_value_pairs(items, flag: str) -> Dict[str, str]:
    """["NAME=VALUE", ...] (a repeated flag) as a dict; refuses an item without '='."""
    pairs = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise errors.UsageError(f"{flag} {item.split('=')[0]!r} must look like NAME=VALUE")
        pairs[name] = value
    return pairs


def generate(args: argparse.Namespace) -> int:
    from pipeline import samples

    serving_dir = _location(config_module.PipelineConfig(output_root=args.output_root).layout.serving_dir)
    _location(args.model)
    model_dir = samples.resolve_model_dir(args.model, serving_dir)  # FileNotFoundError: no such model
    if args.chat or args.messages or args.system is not None:
        return _chat(args, model_dir)
    if not args.prompts:
        raise errors.UsageError("generate: give one or more prompts (or --messages FILE)")
    try:
        continuations = samples.generate(
            model_dir, args.prompts, args.max_new_tokens, args.temperature, args.top_k, args.seed, top_p=args.top_p
        )
    except samples.UnusableModel as exc:
        raise errors.CommandError(str(exc)) from exc
    for prompt, continuation in zip(args.prompts, continuations):
        print(
            json.dumps({"prompt": prompt, "continuation": continuation}, ensure_ascii=False)
            if args.json
            else f"{prompt}{continuation}\n"
        )
    return EXIT_OK


def _chat(args: argparse.Namespace, model_dir: str) -> int:
    """`generate --chat/--messages`: replies through the model's chat template (`chat` signature)."""
    from pipeline import samples

    if args.messages:
        if args.prompts:
            raise errors.UsageError("generate: --messages takes whole conversations; give no prompts with it")
        if args.system is not None:
            raise errors.UsageError(
                "generate: --system is for --chat prompts; with --messages put a system turn in the conversation"
            )
        try:
            conversations = samples.read_conversations(args.messages)
        except ValueError as exc:
            raise errors.UsageError(f"generate: --messages {exc}") from exc
    elif not args.prompts:
        raise errors.UsageError("generate: --chat needs one or more user messages")
    else:
        system = [("system", args.system)] if args.system is not None else []
        conversations = [system + [("user", prompt)] for prompt in args.prompts]
    try:
        samples.check_conversations(model_dir, conversations)
    except ValueError as exc:
        raise errors.UsageError(f"generate: {exc}") from exc
    try:
        replies = samples.chat(
            model_dir, conversations, args.max_new_tokens, args.temperature, args.top_k, args.seed, top_p=args.top_p
        )
    except samples.UnusableModel as exc:
        raise errors.CommandError(str(exc)) from exc
    for conversation, reply in zip(conversations, replies):
        if args.json:
            print(
                json.dumps(
                    {
                        "messages": [{"role": r, "content": c} for r, c in conversation],
                        "reply": reply.text,
                        "stopped": reply.stopped,
                        "num_tokens": reply.num_tokens,
                    },
                    ensure_ascii=False,
                )
            )
        else:
            print(reply.text + ("" if reply.stopped else "  [cut at --max-new-tokens]") + "\n")
    return EXIT_OK


def options(args: argparse.Namespace) -> int:
    print("\n".join(config_module.describe_options()))
    return EXIT_OK


_NOTHING_CHANGED = "; nothing changed (--no-registry changes serving only)"


def _existing_registry(cfg: config_module.PipelineConfig):
    """The model registry of the output root; refuses (creating nothing) when there is none."""
    from components.registry.model_registry import ModelRegistry

    try:
        return ModelRegistry.from_config(cfg.registry, cfg.pusher.model_name, cfg.layout.registry_dir, create=False)
    except LookupError as exc:  # no embedded store under this output root
        raise errors.Refused(f"{exc}{_NOTHING_CHANGED}") from exc
    except ValueError as exc:  # registry.credentials_file unreadable or malformed
        raise errors.UsageError(str(exc)) from exc


def _serving_change(args: argparse.Namespace, change: Callable) -> int:
    """Runs a promote/rollback `change(serving_dir, model_name, registry)` and prints the result.

    serving_ops checks the version (and the registry's record of it) before it rewrites anything,
    so a refused change leaves models.config and the registry aliases as they were."""
    cfg = _load_config(args, output_root=args.output_root)
    from components.pusher import serving_ops

    serving_dir = _location(args.serving_dir or cfg.layout.serving_dir)
    model_registry = _existing_registry(cfg) if cfg.registry.enabled and not args.no_registry else None
    try:
        result = change(serving_dir, cfg.pusher.model_name, model_registry)
    except serving_ops.ServingChangeError as exc:  # no such pushed version, nothing to roll back to
        raise errors.Refused(str(exc)) from exc
    except (KeyError, IndexError):
        raise  # a bug, not a version the registry does not know
    except LookupError as exc:  # the registry has no version pushed as that serving version
        raise errors.Refused(f"{exc}{_NOTHING_CHANGED}") from exc
    print(json.dumps(dict(result, serving_dir=serving_dir), indent=2))
    return EXIT_OK


def promote(args: argparse.Namespace) -> int:
    from components.pusher import serving_ops

    return _serving_change(args, lambda d, name, reg: serving_ops.promote(d, name, args.version, args.label, reg))


def rollback(args: argparse.Namespace) -> int:
    from components.pusher import serving_ops

    return _serving_change(args, lambda d, name, reg: serving_ops.rollback(d, name, args.to, reg))


def _kfp_request(args: argparse.Namespace, send: Callable) -> int:
    """Runs `send(kubeflow.submit, config, KfpTarget, (--pipeline-root, kubeflow.pipeline_root))`
    for submit/schedule and prints its JSON result. What kubeflow.submit refuses (a ValueError:
    cron, pipeline root, placeholder bucket, spec, host, token file) is a usage error; a missing
    spec, an unreachable host, one that does not answer within kubeflow.request_timeout or one that
    answers with an HTTP error is a failure."""
    cfg = _load_config(args)
    from kubeflow import submit as kfp_submit

    target = kfp_submit.KfpTarget(
        host=args.host or cfg.kubeflow.host,
        namespace=args.namespace or cfg.kubeflow.namespace,
        experiment=args.experiment or cfg.kubeflow.experiment,
        token_env=args.token_env,
        token_file=args.token_file or "",
        request_timeout=cfg.kubeflow.request_timeout,
    )
    try:
        result: Dict[str, Any] = send(kfp_submit, cfg, target, (args.pipeline_root, cfg.kubeflow.pipeline_root))
    except ValueError as exc:
        raise errors.UsageError(str(exc)) from exc
    except kfp_submit.HostError as exc:  # the host cannot be reached, or answered with an HTTP error
        raise errors.CommandError(str(exc)) from exc
    print(json.dumps(result, indent=2, sort_keys=True))
    return EXIT_OK


def submit(args: argparse.Namespace) -> int:
    def send(kfp_submit, cfg, target, roots):
        run_name = (
            args.run_name or f"{cfg.pipeline_name} {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M:%S}"
        )
        return kfp_submit.submit(target, args.spec, run_name, *roots, dry=args.dry_run)

    return _kfp_request(args, send)


def schedule(args: argparse.Namespace) -> int:
    def send(kfp_submit, cfg, target, roots):
        trigger = kfp_submit.Schedule(
            cron=args.cron,
            max_concurrency=args.max_concurrency,
            catchup=args.catchup,
            start_time=args.start_time,
            end_time=args.end_time,
        )
        return kfp_submit.schedule(
            target, args.spec, args.name or f"{cfg.pipeline_name} schedule", *roots, trigger, dry=args.dry_run
        )

    return _kfp_request(args, send)
