"""`textgen`: the command-line entry point.

    textgen run       run the whole pipeline locally (LocalDagRunner, Beam DirectRunner, SQLite MLMD)
    textgen validate  ingest and validate a data drop locally, without training
    textgen compile   compile the same pipeline to a KFP v2 pipeline spec YAML
    textgen generate  generate text from an exported or pushed model
    textgen options   list every configuration key with its default
    textgen promote   point a serving label (stable/canary) at a pushed version
    textgen rollback  serve the previous (or a given) pushed version as stable
    textgen submit    submit one run of the compiled pipeline to a KFP host
    textgen schedule  create a recurring run of the compiled pipeline on a KFP host

This module holds the argument parser and the dispatch only: the commands are in
`textgen_cli.commands` (heavy imports such as TFX and TensorFlow happen inside them, so `--help` is
instant), the exit codes and the mapping of expected failures to one line in `pipeline.errors`,
and the progress logging in `textgen_cli.logs`.
"""

import argparse
from typing import Any, Callable, List, Optional

import pydantic
from annotated_types import Ge, Gt, Le, Lt
from pydantic.fields import FieldInfo

from components.trainer.options import GenerationOptions
from pipeline import config as config_module
from pipeline import errors
from pipeline.errors import EXIT_BLOCKED, EXIT_BUSY, EXIT_FAILED, EXIT_OK, EXIT_USAGE  # noqa: F401  (callers use textgen_cli.cli.EXIT_*)
from textgen_cli import commands, logs

# The commands that load TensorFlow (the others answer without it): it is imported first, through
# `logs.load_tensorflow`, which keeps its import-time noise off the terminal.
TENSORFLOW_COMMANDS = ("run", "validate", "compile", "generate", "promote", "rollback")


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors are one `textgen: <message>` line, like every other
    expected failure (pipeline.errors), and exit with EXIT_USAGE (64), not argparse's 2, which
    `textgen run` and `validate` use for a blocked data gate."""

    def error(self, message: str):
        command = self.prog.split(" ", 1)[1] + ": " if " " in self.prog else ""
        line = errors.one_line(Exception(message))  # argparse quotes bad values: a URL's password is redacted
        self.exit(EXIT_USAGE, f"textgen: {command}{line} (see `{self.prog} --help`)\n")


_BOUND_SYMBOLS = {Ge: ">=", Gt: ">", Le: "<=", Lt: "<"}


def _allowed_range(field: FieldInfo) -> str:
    """A numeric option's bounds as text: `in (0, 1]`, `>= 0`."""

    def limit(bound) -> str:
        return f"{getattr(bound, type(bound).__name__.lower()):g}"

    lower = [bound for bound in field.metadata if isinstance(bound, (Ge, Gt))]
    upper = [bound for bound in field.metadata if isinstance(bound, (Le, Lt))]
    if lower and upper:
        opening, closing = "[" if isinstance(lower[0], Ge) else "(", "]" if isinstance(upper[0], Le) else ")"
        return f"in {opening}{limit(lower[0])}, {limit(upper[0])}{closing}"
    return " and ".join(f"{_BOUND_SYMBOLS[type(bound)]} {limit(bound)}" for bound in lower + upper) or "any value"


def _generation_value(name: str) -> Callable[[str], Any]:
    """An argparse `type` for the `GenerationOptions` field `name`: converts the flag's text and
    refuses a value outside the field's bounds, naming the allowed range (the signature's
    defaults and the command line share one definition of what is valid)."""
    field = GenerationOptions.model_fields[name]
    convert = field.annotation

    def parse(text: str):
        value = convert(text)  # a ValueError: argparse reports "invalid int/float value"
        try:
            GenerationOptions(**{name: value})
        except pydantic.ValidationError:
            raise argparse.ArgumentTypeError(f"must be {_allowed_range(field)}, got {text}") from None
        return value

    parse.__name__ = convert.__name__
    return parse


def _add_config_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", metavar="FILE", help="YAML file of config overrides (see `textgen options`).")
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="Override one config key, e.g. --set training.train_steps=100 (repeatable; YAML-typed value).",
    )


def _add_serving_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--output-root", help="Output root of the local runs (its serving/ and registry/). Default: runs/local."
    )
    parser.add_argument("--serving-dir", help="TF Serving model base path (default: OUTPUT_ROOT/serving).")
    parser.add_argument(
        "--no-registry", action="store_true", help="Change models.config only; leave the registry alias."
    )
    _add_config_arguments(parser)


def _add_kfp_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--spec", default="runs/kubeflow/pipeline.yaml", help="Compiled pipeline spec (textgen compile)."
    )
    parser.add_argument("--host", help="KFP API endpoint (kubeflow.host), e.g. https://kfp.example.com/pipeline.")
    parser.add_argument("--namespace", help="Kubernetes/KFP namespace (kubeflow.namespace).")
    parser.add_argument("--experiment", help="KFP experiment name (kubeflow.experiment); created if missing.")
    parser.add_argument(
        "--pipeline-root",
        help="Artifact root for the run, gs:// or s3:// (default: the root the spec "
        "was compiled with, else kubeflow.pipeline_root).",
    )
    parser.add_argument(
        "--token-env", default="KFP_TOKEN", help="Environment variable holding a bearer token (default KFP_TOKEN)."
    )
    parser.add_argument(
        "--token-file", help="File holding a bearer token (wins over --token-env), e.g. a mounted SA token."
    )
    parser.add_argument("--dry-run", action="store_true", help="Print the request as JSON instead of sending it.")
    _add_config_arguments(parser)


def build_parser() -> argparse.ArgumentParser:
    """The `textgen` argument parser (every option documented in its help)."""
    parser = _Parser(
        prog="textgen",
        description=__doc__.split("\n\n")[0],
        epilog=errors.epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="Show all library logs, not just progress.")
    subcommands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = subcommands.add_parser(
        "run",
        help="Run the whole pipeline locally.",
        description="Run ExampleGen -> validation -> data gate -> Transform -> Trainer -> Evaluator -> Pusher "
        "locally, then write the run's summary to OUTPUT_ROOT/runs/RUN_ID.json and OUTPUT_ROOT/last_run.json "
        "and print sample generations. One run or validate at a time holds an output root (exit 75 "
        "when another does).",
        epilog="Configuration keys (for --config files and --set):\n  " + "\n  ".join(config_module.describe_options()),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    validate = subcommands.add_parser(
        "validate",
        help="Ingest and validate a data drop, without training.",
        description="Run ExampleGen -> statistics -> schema, drift and skew checks -> data gate locally, print the "
        "data-quality summary and the anomalies, and (when the gate passes) record this span as the next "
        "drift baseline. Exit status 2 when the data gate blocks, 75 when another run holds the output root.",
    )
    for command in (run, validate):
        command.add_argument(
            "--data-root",
            help="Directory of corpus files (.txt, .jsonl, .csv, .tsv, .tfrecord; "
            "optionally .gz/.bz2). Default: the bundled data/corpus.",
        )
        command.add_argument(
            "--output-root",
            help="Root of all run outputs (pipeline root, metadata.sqlite, serving/, "
            "last_run.json). Default: runs/local.",
        )
        command.add_argument(
            "--no-cache", action="store_true", help="Re-execute every component even if inputs are unchanged."
        )
        _add_config_arguments(command)
    run.set_defaults(handler=commands.run)
    validate.set_defaults(handler=commands.validate)

    compile_ = subcommands.add_parser(
        "compile",
        help="Compile the pipeline to a KFP v2 pipeline spec YAML.",
        description="Compile the same pipeline with KubeflowV2DagRunner to OUTPUT_DIR/pipeline.yaml.",
    )
    compile_.add_argument(
        "--output-dir", default="runs/kubeflow", help="Where to write pipeline.yaml (default: runs/kubeflow)."
    )
    compile_.add_argument("--image", help="Container image the components run in (kubeflow.image).")
    compile_.add_argument(
        "--pipeline-root",
        help="Artifact root on the cluster, gs:// or s3://, e.g. gs://bucket/root "
        "(kubeflow.pipeline_root); recorded in the spec for submit/schedule.",
    )
    compile_.add_argument("--data-root", help="Corpus location the cluster reads (kubeflow.data_root).")
    compile_.add_argument("--serving-dir", help="TF Serving model base path on the cluster (kubeflow.serving_dir).")
    compile_.add_argument(
        "--beam-arg",
        dest="beam_args",
        action="append",
        metavar="ARG",
        help="A Beam pipeline option for the data steps on the cluster; repeat for each. Replaces kubeflow.beam_args "
        "(default: DirectRunner, one worker process per core of the pod). E.g. --beam-arg=--runner=DataflowRunner "
        "--beam-arg=--project=P --beam-arg=--region=R --beam-arg=--temp_location=gs://B/tmp",
    )
    compile_.add_argument(
        "--env",
        action="append",
        metavar="NAME=VALUE",
        help="An environment variable of every step's pod (kubeflow.env; no credentials), e.g. "
        "--env S3_ENDPOINT=http://minio-service.kubeflow:9000 --env AWS_REGION=us-east-1.",
    )
    compile_.add_argument(
        "--secret-env",
        dest="secret_env",
        action="append",
        metavar="NAME=SECRET/KEY",
        help="A Kubernetes secret key as an environment variable of every step (kubeflow.secret_env), "
        "e.g. --secret-env AWS_ACCESS_KEY_ID=mlpipeline-minio-artifact/accesskey.",
    )
    compile_.add_argument(
        "--config-map-env",
        dest="config_map_env",
        action="append",
        metavar="NAME=CONFIGMAP/KEY",
        help="A Kubernetes config map key as an environment variable of every step (kubeflow.config_map_env).",
    )
    _add_config_arguments(compile_)
    compile_.set_defaults(handler=commands.compile_)

    generate = subcommands.add_parser("generate", help="Generate text from an exported model.")
    generate.add_argument(
        "--model",
        required=True,
        metavar="PATH_OR_VERSION",
        help="A SavedModel directory, a serving base directory (the version its models.config labels "
        "stable, else its highest), "
        "or a pushed version number (looked up under OUTPUT_ROOT/serving).",
    )
    generate.add_argument(
        "--output-root",
        default=config_module.PipelineConfig().output_root,
        help="Run output root whose serving/ holds pushed versions (default: runs/local).",
    )
    generate.add_argument(
        "prompts",
        nargs="*",
        help="One or more prompts (with --chat: user messages, each answered as a conversation of its own).",
    )
    generate.add_argument(
        "--chat",
        action="store_true",
        help="Send each prompt as a user turn through the model's chat template and print the "
        "assistant's reply (a model trained on conversations).",
    )
    generate.add_argument(
        "--system", metavar="TEXT", default=None, help="With --chat: a system turn before each user message."
    )
    generate.add_argument(
        "--messages",
        metavar="FILE",
        default=None,
        help="Conversations to reply to, through the model's chat template (roles system, user, "
        'assistant): a JSON list of {role, content} turns, or a {"messages": [...]} record as in the '
        "training data; a JSON Lines file (.jsonl) holds one conversation per line, each answered "
        "in the same call.",
    )
    generate.add_argument(
        "--max-new-tokens",
        type=_generation_value("max_new_tokens"),
        default=GenerationOptions().max_new_tokens,
        help="Tokens to generate per prompt, >= 1 (default: %(default)s).",
    )
    generate.add_argument(
        "--temperature",
        type=_generation_value("temperature"),
        default=GenerationOptions().temperature,
        help="Sampling temperature, >= 0; 0 for greedy decoding (default: %(default)s).",
    )
    generate.add_argument(
        "--top-k",
        type=_generation_value("top_k"),
        default=GenerationOptions().top_k,
        help="Keep the K most likely tokens, >= 0; 0 disables top-k (default: %(default)s).",
    )
    generate.add_argument(
        "--top-p",
        type=_generation_value("top_p"),
        default=GenerationOptions().top_p,
        help="Nucleus sampling mass in (0, 1]; 1 disables top-p (default: %(default)s).",
    )
    generate.add_argument(
        "--seed",
        type=int,
        default=0,
        help="Seed of the sampling; the same seed, model and flags give the same text (default: %(default)s).",
    )
    generate.add_argument("--json", action="store_true", help="Print one JSON object per prompt.")
    generate.set_defaults(handler=commands.generate)

    promote = subcommands.add_parser(
        "promote",
        help="Point a serving label at a pushed version.",
        description="Rewrites SERVING_DIR/models.config atomically so LABEL points at VERSION (TF Serving re-reads it "
        "every --model_config_file_poll_wait_seconds) and moves the matching registry alias "
        "(stable -> registry.production_alias, canary -> canary).",
    )
    promote.add_argument("version", type=int, help="A pushed version number under the serving directory.")
    promote.add_argument("--label", choices=["stable", "canary"], default="stable")
    _add_serving_arguments(promote)
    promote.set_defaults(handler=commands.promote)

    rollback = subcommands.add_parser(
        "rollback",
        help="Serve the previous (or a given) pushed version as stable.",
        description="Like `promote VERSION --label stable`, where VERSION defaults to the newest pushed version "
        "older than the current stable one.",
    )
    rollback.add_argument("--to", type=int, help="Version to roll back to (default: the previous one).")
    _add_serving_arguments(rollback)
    rollback.set_defaults(handler=commands.rollback)

    submit = subcommands.add_parser("submit", help="Submit one run of the compiled pipeline to a KFP host.")
    submit.add_argument("--run-name", help="Display name of the run (default: pipeline name and UTC time).")
    _add_kfp_arguments(submit)
    submit.set_defaults(handler=commands.submit)

    schedule = subcommands.add_parser(
        "schedule",
        help="Create a recurring run of the compiled pipeline on a KFP host.",
        description="Creates a KFP recurring run. CRON has six fields, seconds first "
        "(SECOND MINUTE HOUR DAY-OF-MONTH MONTH DAY-OF-WEEK), e.g. '0 0 2 * * *' for 02:00 daily.",
    )
    schedule.add_argument("--cron", required=True, help="Six-field KFP cron expression or @daily/@hourly/@every 6h.")
    schedule.add_argument("--name", help="Display name of the recurring run.")
    schedule.add_argument("--max-concurrency", type=int, default=1, help="Runs allowed at once (1-10, default 1).")
    schedule.add_argument(
        "--catchup",
        action="store_true",
        help="Start the runs missed while paused (default: skip them, no_catchup=true).",
    )
    schedule.add_argument("--start-time", help="ISO-8601 time the schedule starts (default: now).")
    schedule.add_argument("--end-time", help="ISO-8601 time the schedule ends (default: never).")
    _add_kfp_arguments(schedule)
    schedule.set_defaults(handler=commands.schedule)

    options = subcommands.add_parser("options", help="List every configuration key and its default.")
    options.set_defaults(handler=commands.options)
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    """Parses `argv`, runs the command, and returns its exit code (see pipeline.errors)."""
    args = build_parser().parse_args(argv)
    logs.configure(args.verbose)
    try:
        if args.command in TENSORFLOW_COMMANDS:
            logs.load_tensorflow()
        return args.handler(args)
    except Exception as exc:
        code = errors.report(exc)
        if code is None:
            raise
        return code


def console() -> None:
    """The `textgen` console script: `main`, then the process exits through
    `components.filesystems.exit_process` (tensorflow-io's S3 file system aborts a plain exit)."""
    from components.filesystems import exit_process

    exit_process(main())


if __name__ == "__main__":
    console()
