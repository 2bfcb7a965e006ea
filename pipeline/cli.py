"""`textgen`: the command-line entry point.

    textgen run       run the whole pipeline locally (LocalDagRunner, Beam DirectRunner, SQLite MLMD)
    textgen compile   compile the same pipeline to a KFP v2 pipeline spec YAML
    textgen generate  generate text from an exported or pushed model
    textgen options   list every configuration key with its default

Heavy imports (TFX, TensorFlow) happen inside the commands so `--help` is instant.
"""
import argparse
import json
import logging
import os
import sys
import warnings
from typing import List, Optional

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


def _print_run_report(summary: dict, summary_path: str) -> None:
    print("\n=== textgen run summary ===")
    print(f"run id: {summary['run_id']}")
    for node, status in summary["components"].items():
        print(f"  {node:<28} {status}")
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
    if push["pushed"]:
        print(f"pushed model: {push['path']} (version {push['version']})")
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
    _print_run_report(summary, cfg.summary_path)
    if summary["succeeded"]:
        return EXIT_OK
    gates = ("DataGate", "TokenGate")
    return EXIT_BLOCKED if any(summary["components"].get(gate) == "FAILED" for gate in gates) else EXIT_FAILED


def _command_compile(args: argparse.Namespace) -> int:
    kubeflow_overrides = {
        key: value for key, value in {
            "image": args.image, "pipeline_root": args.pipeline_root,
            "data_root": args.data_root, "serving_dir": args.serving_dir,
        }.items() if value is not None
    }
    cfg = config_module.load_config(args.config, args.overrides, kubeflow=kubeflow_overrides or None)
    from kubeflow.compile import compile_pipeline

    path = compile_pipeline(cfg, args.output_dir)
    print(f"wrote KFP v2 pipeline spec: {path}")
    return EXIT_OK


def _command_generate(args: argparse.Namespace) -> int:
    from pipeline import samples

    model_dir = samples.resolve_model_dir(args.model)
    continuations = samples.generate(
        model_dir, args.prompts, args.max_new_tokens, args.temperature, args.top_k, args.seed
    )
    for prompt, continuation in zip(args.prompts, continuations):
        print(json.dumps({"prompt": prompt, "continuation": continuation}, ensure_ascii=False) if args.json
              else f"{prompt}{continuation}\n")
    return EXIT_OK


def _command_options(args: argparse.Namespace) -> int:
    print("\n".join(config_module.describe_options()))
    return EXIT_OK


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
    run.add_argument("--data-root", help="Directory of corpus files (.txt, .jsonl). Default: the bundled data/corpus.")
    run.add_argument("--output-root", help="Root of all run outputs (pipeline root, metadata.sqlite, serving/, "
                                           "last_run.json). Default: runs/local.")
    run.add_argument("--no-cache", action="store_true", help="Re-execute every component even if inputs are unchanged.")
    _add_config_arguments(run)
    run.set_defaults(handler=_command_run)

    compile_ = commands.add_parser(
        "compile", help="Compile the pipeline to a KFP v2 pipeline spec YAML.",
        description="Compile the same pipeline with KubeflowV2DagRunner to OUTPUT_DIR/pipeline.yaml.",
    )
    compile_.add_argument("--output-dir", default="runs/kubeflow", help="Where to write pipeline.yaml (default: runs/kubeflow).")
    compile_.add_argument("--image", help="Container image the components run in (kubeflow.image).")
    compile_.add_argument("--pipeline-root", help="Artifact root on the cluster, e.g. gs://bucket/root (kubeflow.pipeline_root).")
    compile_.add_argument("--data-root", help="Corpus location the cluster reads (kubeflow.data_root).")
    compile_.add_argument("--serving-dir", help="TF Serving model base path on the cluster (kubeflow.serving_dir).")
    _add_config_arguments(compile_)
    compile_.set_defaults(handler=_command_compile)

    generate = commands.add_parser("generate", help="Generate text from an exported model.")
    generate.add_argument("--model", required=True,
                          help="A SavedModel directory, or a serving base directory (its highest version is used).")
    generate.add_argument("prompts", nargs="+", help="One or more prompts.")
    generate.add_argument("--max-new-tokens", type=int, default=config_module.GenerationConfig().max_new_tokens)
    generate.add_argument("--temperature", type=float, default=config_module.GenerationConfig().temperature,
                          help="0 for greedy decoding.")
    generate.add_argument("--top-k", type=int, default=config_module.GenerationConfig().top_k, help="0 disables top-k.")
    generate.add_argument("--seed", type=int, default=0, help="Seed for reproducible sampling.")
    generate.add_argument("--json", action="store_true", help="Print one JSON object per prompt.")
    generate.set_defaults(handler=_command_generate)

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
