"""`textgen`: the command-line entry point.

    textgen run       run the whole pipeline locally (LocalDagRunner, Beam DirectRunner, SQLite MLMD)
    textgen compile   compile the same pipeline to a KFP v2 pipeline spec YAML
    textgen generate  generate text from an exported or pushed model
    textgen options   list every configuration key with its default
    textgen promote   point a serving label (stable/canary) at a pushed version
    textgen rollback  serve the previous (or a given) pushed version as stable
    textgen submit    submit one run of the compiled pipeline to a KFP host
    textgen schedule  create a recurring run of the compiled pipeline on a KFP host

Heavy imports (TFX, TensorFlow) happen inside the commands so `--help` is instant.
"""
import argparse
import datetime
import json
import logging
import os
import sys
import warnings
from typing import List, Optional

from components.trainer.options import GenerationOptions
from pipeline import config as config_module

EXIT_OK, EXIT_FAILED, EXIT_BLOCKED, EXIT_USAGE = 0, 1, 2, 64


def _add_config_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", metavar="FILE", help="YAML file of config overrides (see `textgen options`).")
    parser.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
        help="Override one config key, e.g. --set training.train_steps=100 (repeatable; YAML-typed value).",
    )


class _ProgressFilter(logging.Filter):
    """Keeps the run's progress readable: component start/finish, this project's logs, errors."""

    _PROGRESS_SOURCES = (
        os.path.join(config_module.PROJECT_ROOT, "components") + os.sep,
        os.path.join(config_module.PROJECT_ROOT, "pipeline") + os.sep,
    )

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.ERROR:
            return True
        if record.pathname.endswith("local_dag_runner.py"):  # it also dumps the whole pipeline IR
            return str(record.msg).startswith("Component ")
        return record.levelno >= logging.INFO and any(source in record.pathname for source in self._PROGRESS_SOURCES)


def _configure_logging(verbose: bool) -> None:
    """INFO progress lines (or everything with --verbose); silences known third-party noise."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    warnings.filterwarnings("ignore", category=FutureWarning)
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s", "%H:%M:%S"))
    if not verbose:
        handler.addFilter(_ProgressFilter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)
    from absl import logging as absl_logging  # absl routes through the stdlib 'absl' logger

    absl_logging.set_verbosity(absl_logging.INFO)
    logging.getLogger("absl").handlers[:] = []
    logging.getLogger("absl").propagate = True


def _print_distribution_checks(checks: Optional[dict]) -> None:
    """One line per drift/skew check: what it compared and the largest divergence, or why skipped."""
    if not checks:
        return
    compared = {"drift": f"this span vs accepted span {checks.get('drift_baseline_span')}", "skew": "train vs eval"}
    for check, description in compared.items():
        if check in checks["skipped"]:
            print(f"{check} check skipped: {checks['skipped'][check]}")
            continue
        measured = [m for m in checks["measurements"] if m["check"] == check]
        if measured:
            worst = max(measured, key=lambda m: m["divergence"] / m["threshold"] if m["threshold"] else m["divergence"])
            over = sum(m["divergence"] > m["threshold"] for m in measured)
            print(f"{check} check ({description}): {len(measured)} features compared, {over} over threshold; "
                  f"largest Jensen-Shannon divergence {worst['divergence']:.3f} on {worst['feature']} "
                  f"(threshold {worst['threshold']})")


def _print_run_report(summary: dict, summary_path: str) -> None:
    print("\n=== textgen run summary ===")
    print(f"run id: {summary['run_id']}")
    for node, status in summary["components"].items():
        print(f"  {node:<28} {status}")
    if summary.get("data_quality"):
        from components.example_gen.ingest_report import summary_lines

        spans = summary["data_quality"].get("spans") or [summary["data_quality"].get("span")]
        print(f"data quality (span{'s' if len(spans) > 1 else ''} {', '.join(map(str, spans))}):")
        for line in summary_lines(summary["data_quality"]):
            print(f"  {line}")
    _print_distribution_checks(summary.get("distribution_checks"))
    for anomaly in summary["anomalies"]:
        print(f"anomaly in {anomaly['data']} [{anomaly['split']}] {anomaly['feature']}: "
              f"{anomaly['short_description']} - {anomaly['description']}")
    blessing = summary.get("blessing")
    if blessing:
        verdict = "BLESSED" if blessing["blessed"] else "NOT BLESSED"
        print(f"evaluation: {verdict} ({blessing['reason']})")
        for gate in blessing.get("gates", []):
            print(f"  gate {gate['name']:<30} {gate['verdict']:<8} {gate['reason']}")
    push = summary["push"]
    if "Pusher" not in summary["components"]:
        pass  # a partial run (`textgen validate`) has nothing to push
    elif push["pushed"]:
        print(f"pushed model: {push['path']} (version {push['version']})")
        if push.get("registered_version") is not None:
            print(f"registered: {push['registered_model']} version {push['registered_version']} in {push['registry_uri']}")
    else:
        print(f"nothing pushed: {push['reason']}")
    if summary.get("error"):
        print(f"error: {summary['error']}")
    for sample in summary.get("samples", []):
        print("\n--- prompt ---\n" + sample["prompt"] + "\n--- continuation ---\n" + sample["continuation"])
    print()
    if blessing and blessing.get("report"):
        print(f"evaluation report: {blessing['report']}")
    print(f"summary written to {summary_path}")


def _command_run(args: argparse.Namespace) -> int:
    cfg = config_module.load_config(
        args.config, args.overrides, data_root=args.data_root, output_root=args.output_root,
        enable_cache=False if args.no_cache else None,
    )
    from pipeline.local_runner import run_locally

    summary = run_locally(cfg)
    _print_run_report(summary, cfg.layout.summary_path)
    if summary["succeeded"]:
        return EXIT_OK
    gates = ("DataGate", "TokenGate")
    return EXIT_BLOCKED if any(summary["components"].get(gate) == "FAILED" for gate in gates) else EXIT_FAILED


def _command_validate(args: argparse.Namespace) -> int:
    cfg = config_module.load_config(
        args.config, args.overrides, data_root=args.data_root, output_root=args.output_root,
        enable_cache=False if args.no_cache else None,
    )
    from pipeline.local_runner import run_locally
    from pipeline.pipeline import DATA_VALIDATION_LAST_NODE

    summary = run_locally(cfg, through=DATA_VALIDATION_LAST_NODE)
    _print_run_report(summary, cfg.layout.summary_path)
    if summary["succeeded"]:
        return EXIT_OK
    return EXIT_BLOCKED if summary["components"].get("DataGate") == "FAILED" else EXIT_FAILED


def _command_compile(args: argparse.Namespace) -> int:
    kubeflow_overrides = {
        key: value for key, value in {
            "image": args.image, "pipeline_root": args.pipeline_root,
            "data_root": args.data_root, "serving_dir": args.serving_dir,
        }.items() if value is not None
    }
    if args.beam_args:
        kubeflow_overrides["beam_args"] = args.beam_args
    cfg = config_module.load_config(args.config, args.overrides, kubeflow=kubeflow_overrides or None)
    from kubeflow.compile import compile_pipeline

    path = compile_pipeline(cfg, args.output_dir)
    print(f"wrote KFP v2 pipeline spec: {path}")
    return EXIT_OK


def _command_generate(args: argparse.Namespace) -> int:
    from pipeline import samples

    serving_dir = config_module.PipelineConfig(output_root=args.output_root).layout.serving_dir
    model_dir = samples.resolve_model_dir(args.model, serving_dir)
    continuations = samples.generate(
        model_dir, args.prompts, args.max_new_tokens, args.temperature, args.top_k, args.seed, top_p=args.top_p
    )
    for prompt, continuation in zip(args.prompts, continuations):
        print(json.dumps({"prompt": prompt, "continuation": continuation}, ensure_ascii=False) if args.json
              else f"{prompt}{continuation}\n")
    return EXIT_OK


def _command_options(args: argparse.Namespace) -> int:
    print("\n".join(config_module.describe_options()))
    return EXIT_OK


def _serving_change(args: argparse.Namespace, change) -> int:
    """Runs a promote/rollback `change(serving_dir, model_name, registry)` and prints the result."""
    cfg = config_module.load_config(args.config, args.overrides, output_root=args.output_root)
    from components.pusher import registry, serving_ops

    serving_dir = os.path.abspath(args.serving_dir or cfg.layout.serving_dir)
    model_registry = None
    try:
        if cfg.registry.enabled and not args.no_registry:
            model_registry = registry.ModelRegistry.from_config(cfg.registry, cfg.pusher.model_name, cfg.layout.registry_dir,
                                                                create=False)
        result = change(serving_dir, cfg.pusher.model_name, model_registry)
    except serving_ops.ServingChangeError as exc:
        print(f"textgen: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except LookupError as exc:
        print(f"textgen: {exc}; nothing changed (--no-registry changes serving only)", file=sys.stderr)
        return EXIT_FAILED
    print(json.dumps(dict(result, serving_dir=serving_dir), indent=2))
    return EXIT_OK


def _command_promote(args: argparse.Namespace) -> int:
    from components.pusher import serving_ops

    return _serving_change(args, lambda d, name, reg: serving_ops.promote(d, name, args.version, args.label, reg))


def _command_rollback(args: argparse.Namespace) -> int:
    from components.pusher import serving_ops

    return _serving_change(args, lambda d, name, reg: serving_ops.rollback(d, name, args.to, reg))


def _add_serving_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--output-root", help="Output root of the local runs (its serving/ and registry/). Default: runs/local.")
    parser.add_argument("--serving-dir", help="TF Serving model base path (default: OUTPUT_ROOT/serving).")
    parser.add_argument("--no-registry", action="store_true", help="Change models.config only; leave the registry alias.")
    _add_config_arguments(parser)


def _kfp_target(args: argparse.Namespace):
    """The KFP host, namespace, experiment and auth from flags over the `kubeflow` config section."""
    cfg = config_module.load_config(args.config, args.overrides)
    from kubeflow.submit import KfpTarget

    target = KfpTarget(
        host=args.host or cfg.kubeflow.host, namespace=args.namespace or cfg.kubeflow.namespace,
        experiment=args.experiment or cfg.kubeflow.experiment, token_env=args.token_env, token_file=args.token_file or "",
    )
    return cfg, target


def _print_kfp_result(result: dict) -> int:
    print(json.dumps(result, indent=2, sort_keys=True))
    return EXIT_OK


def _command_submit(args: argparse.Namespace) -> int:
    cfg, target = _kfp_target(args)
    from kubeflow import submit

    run_name = args.run_name or f"{cfg.pipeline_name} {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M:%S}"
    try:
        return _print_kfp_result(submit.submit(target, args.spec, run_name, args.pipeline_root or cfg.kubeflow.pipeline_root,
                                               dry=args.dry_run))
    except (OSError, ValueError) as exc:
        print(f"textgen: {exc}", file=sys.stderr)
        return EXIT_USAGE if isinstance(exc, ValueError) else EXIT_FAILED


def _command_schedule(args: argparse.Namespace) -> int:
    cfg, target = _kfp_target(args)
    from kubeflow import submit

    try:
        trigger = submit.Schedule(cron=args.cron, max_concurrency=args.max_concurrency, catchup=args.catchup,
                                  start_time=args.start_time, end_time=args.end_time)
        return _print_kfp_result(submit.schedule(target, args.spec, args.name or f"{cfg.pipeline_name} schedule",
                                                 args.pipeline_root or cfg.kubeflow.pipeline_root, trigger, dry=args.dry_run))
    except (OSError, ValueError) as exc:
        print(f"textgen: {exc}", file=sys.stderr)
        return EXIT_USAGE if isinstance(exc, ValueError) else EXIT_FAILED


def _add_kfp_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--spec", default="runs/kubeflow/pipeline.yaml", help="Compiled pipeline spec (textgen compile).")
    parser.add_argument("--host", help="KFP API endpoint (kubeflow.host), e.g. https://kfp.example.com/pipeline.")
    parser.add_argument("--namespace", help="Kubernetes/KFP namespace (kubeflow.namespace).")
    parser.add_argument("--experiment", help="KFP experiment name (kubeflow.experiment); created if missing.")
    parser.add_argument("--pipeline-root", help="Artifact root for the run (default kubeflow.pipeline_root).")
    parser.add_argument("--token-env", default="KFP_TOKEN", help="Environment variable holding a bearer token (default KFP_TOKEN).")
    parser.add_argument("--token-file", help="File holding a bearer token (wins over --token-env), e.g. a mounted SA token.")
    parser.add_argument("--dry-run", action="store_true", help="Print the request as JSON instead of sending it.")
    _add_config_arguments(parser)


def build_parser() -> argparse.ArgumentParser:
    """The `textgen` argument parser (every option documented in its help)."""
    parser = argparse.ArgumentParser(prog="textgen", description=__doc__.split("\n\n")[0])
    parser.add_argument("-v", "--verbose", action="store_true", help="Show all library logs, not just progress.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = commands.add_parser(
        "run", help="Run the whole pipeline locally.",
        description="Run ExampleGen -> validation -> data gate -> Transform -> Trainer -> Evaluator -> Pusher "
                    "locally, then write OUTPUT_ROOT/last_run.json and print sample generations.",
        epilog="Configuration keys (for --config files and --set):\n  " + "\n  ".join(config_module.describe_options()),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    validate = commands.add_parser(
        "validate", help="Ingest and validate a data drop, without training.",
        description="Run ExampleGen -> statistics -> schema, drift and skew checks -> data gate locally, print the "
                    "data-quality summary and the anomalies, and (when the gate passes) record this span as the next "
                    "drift baseline. Exit status 2 when the data gate blocks.",
    )
    for command in (run, validate):
        command.add_argument("--data-root", help="Directory of corpus files (.txt, .jsonl, .csv, .tsv, .tfrecord; "
                                                 "optionally .gz/.bz2). Default: the bundled data/corpus.")
        command.add_argument("--output-root", help="Root of all run outputs (pipeline root, metadata.sqlite, serving/, "
                                                   "last_run.json). Default: runs/local.")
        command.add_argument("--no-cache", action="store_true", help="Re-execute every component even if inputs are unchanged.")
        _add_config_arguments(command)
    run.set_defaults(handler=_command_run)
    validate.set_defaults(handler=_command_validate)

    compile_ = commands.add_parser(
        "compile", help="Compile the pipeline to a KFP v2 pipeline spec YAML.",
        description="Compile the same pipeline with KubeflowV2DagRunner to OUTPUT_DIR/pipeline.yaml.",
    )
    compile_.add_argument("--output-dir", default="runs/kubeflow", help="Where to write pipeline.yaml (default: runs/kubeflow).")
    compile_.add_argument("--image", help="Container image the components run in (kubeflow.image).")
    compile_.add_argument("--pipeline-root", help="Artifact root on the cluster, e.g. gs://bucket/root (kubeflow.pipeline_root).")
    compile_.add_argument("--data-root", help="Corpus location the cluster reads (kubeflow.data_root).")
    compile_.add_argument("--serving-dir", help="TF Serving model base path on the cluster (kubeflow.serving_dir).")
    compile_.add_argument(
        "--beam-arg", dest="beam_args", action="append", metavar="ARG",
        help="A Beam pipeline option for the data steps on the cluster; repeat for each. Replaces kubeflow.beam_args "
             "(default: DirectRunner, one worker process per core of the pod). E.g. --beam-arg=--runner=DataflowRunner "
             "--beam-arg=--project=P --beam-arg=--region=R --beam-arg=--temp_location=gs://B/tmp")
    _add_config_arguments(compile_)
    compile_.set_defaults(handler=_command_compile)

    generate = commands.add_parser("generate", help="Generate text from an exported model.")
    generate.add_argument("--model", required=True, metavar="PATH_OR_VERSION",
                          help="A SavedModel directory, a serving base directory (its highest version is used), "
                               "or a pushed version number (looked up under OUTPUT_ROOT/serving).")
    generate.add_argument("--output-root", default=config_module.PipelineConfig().output_root,
                          help="Run output root whose serving/ holds pushed versions (default: runs/local).")
    generate.add_argument("prompts", nargs="+", help="One or more prompts.")
    generate.add_argument("--max-new-tokens", type=int, default=GenerationOptions().max_new_tokens)
    generate.add_argument("--temperature", type=float, default=GenerationOptions().temperature,
                          help="0 for greedy decoding.")
    generate.add_argument("--top-k", type=int, default=GenerationOptions().top_k, help="0 disables top-k.")
    generate.add_argument("--top-p", type=float, default=GenerationOptions().top_p,
                          help="Nucleus sampling mass in (0, 1]; 1 disables top-p.")
    generate.add_argument("--seed", type=int, default=0, help="Seed for reproducible sampling.")
    generate.add_argument("--json", action="store_true", help="Print one JSON object per prompt.")
    generate.set_defaults(handler=_command_generate)

    promote = commands.add_parser(
        "promote", help="Point a serving label at a pushed version.",
        description="Rewrites SERVING_DIR/models.config atomically so LABEL points at VERSION (TF Serving re-reads it "
                    "every --model_config_file_poll_wait_seconds) and moves the matching registry alias "
                    "(stable -> registry.production_alias, canary -> canary).",
    )
    promote.add_argument("version", type=int, help="A pushed version number under the serving directory.")
    promote.add_argument("--label", choices=["stable", "canary"], default="stable")
    _add_serving_arguments(promote)
    promote.set_defaults(handler=_command_promote)

    rollback = commands.add_parser(
        "rollback", help="Serve the previous (or a given) pushed version as stable.",
        description="Like `promote VERSION --label stable`, where VERSION defaults to the newest pushed version "
                    "older than the current stable one.",
    )
    rollback.add_argument("--to", type=int, help="Version to roll back to (default: the previous one).")
    _add_serving_arguments(rollback)
    rollback.set_defaults(handler=_command_rollback)

    submit = commands.add_parser("submit", help="Submit one run of the compiled pipeline to a KFP host.")
    submit.add_argument("--run-name", help="Display name of the run (default: pipeline name and UTC time).")
    _add_kfp_arguments(submit)
    submit.set_defaults(handler=_command_submit)

    schedule = commands.add_parser(
        "schedule", help="Create a recurring run of the compiled pipeline on a KFP host.",
        description="Creates a KFP recurring run. CRON has six fields, seconds first "
                    "(SECOND MINUTE HOUR DAY-OF-MONTH MONTH DAY-OF-WEEK), e.g. '0 0 2 * * *' for 02:00 daily.",
    )
    schedule.add_argument("--cron", required=True, help="Six-field KFP cron expression or @daily/@hourly/@every 6h.")
    schedule.add_argument("--name", help="Display name of the recurring run.")
    schedule.add_argument("--max-concurrency", type=int, default=1, help="Runs allowed at once (1-10, default 1).")
    schedule.add_argument("--catchup", action="store_true",
                          help="Start the runs missed while paused (default: skip them, no_catchup=true).")
    schedule.add_argument("--start-time", help="ISO-8601 time the schedule starts (default: now).")
    schedule.add_argument("--end-time", help="ISO-8601 time the schedule ends (default: never).")
    _add_kfp_arguments(schedule)
    schedule.set_defaults(handler=_command_schedule)

    options = commands.add_parser("options", help="List every configuration key and its default.")
    options.set_defaults(handler=_command_options)
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    _configure_logging(args.verbose)
    try:
        return args.handler(args)
    except config_module.ConfigError as exc:
        print(f"textgen: {exc}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
