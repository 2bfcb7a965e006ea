"""Ingestion benchmark: ExampleGen (read + clean) + StatisticsGen throughput, Beam DirectRunner
in-memory vs multi-processing, in one run.

The shared corpus (`../shared/data/tinyshakespeare.txt`) is replicated into a temporary directory
(several files, so the runner has work to spread) up to `--mb` megabytes. Each mode runs the real
executors: our `TextCorpusExampleGenExecutor` (readers, cleaning with exact and near-duplicate
removal, quarantine report, hash split, GZIP TFRecords) and TFX's StatisticsGen executor (TFDV)
on its output. Throughput is input megabytes per wall-clock second of both executors together.

    in_memory          --direct_running_mode=in_memory --direct_num_workers=1 (the project default)
    multi_processing   --direct_running_mode=multi_processing --direct_num_workers=2

Each mode also runs once on a tiny corpus (`--fixed-mb`, default 0.1 MB): its time is the mode's
fixed cost (Beam set-up, TFX's packaging of itself, and for multi-processing starting worker
processes that import TensorFlow/TFX/TFDV), and (large - tiny) gives the marginal throughput.

ExampleGen runs with the pipeline's default cleaning, i.e. every curation filter except the
toxicity filter (off by default): PII scrubbing, language ID, quality rules, decontamination,
exact and near-duplicate removal.

`--datatrove` adds Hugging Face datatrove as the named baseline, in its own environment
(`benchmarks/make_datatrove_env.sh`; datatrove is not a project dependency): its JsonlReader,
Gopher repetition + quality filters and its four MinHash deduplication stages
(`benchmarks/datatrove_baseline.py`) on the same documents (the replicated .txt written as .jsonl,
one paragraph per record, before timing). Compare its MB/s per core with ExampleGen's (without
StatisticsGen, which datatrove has no counterpart for).

Usage:
    python benchmarks/ingest_throughput.py [--mb 100] [--files 16] [--corpus PATH] [--fixed-mb 0.1]
        [--modes in_memory,multi_processing] [--datatrove] [--datatrove-workers 1]

Prints a table and writes benchmarks/results/ingest_throughput.json with the load average before
and after and the CPU other processes used meanwhile (`machine.LoadGuard`): it refuses to start
above load 1.5 unless --allow-high-load, and a run where others used more than a quarter core is
marked NOT VALID.
"""

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import machine  # noqa: E402  (benchmarks/machine.py)

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

DEFAULT_CORPUS = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data", "tinyshakespeare.txt")
RESULTS = os.path.join(os.path.dirname(__file__), "results", "ingest_throughput.json")
DATATROVE_ENV = os.path.join(os.path.expanduser("~"), ".cache", "textgen-tfx", "bench-datatrove")
MODES = {
    "in_memory": ["--direct_running_mode=in_memory", "--direct_num_workers=1"],
    "multi_processing": ["--direct_running_mode=multi_processing", "--direct_num_workers=2"],
}


def replicate_corpus(corpus: str, directory: str, megabytes: float, files: int) -> int:
    """Writes copies of `corpus` into `files` .txt files totalling about `megabytes`; returns bytes."""
    with open(corpus, "rb") as handle:
        text = handle.read().rstrip(b"\n") + b"\n\n"
    copies = max(1, round(megabytes * 1e6 / len(text)))
    total = 0
    for index in range(files):
        share = copies // files + (1 if index < copies % files else 0)
        if share:
            with open(os.path.join(directory, f"part-{index:03d}.txt"), "wb") as out:
                for _ in range(share):
                    out.write(text)
            total += share * len(text)
    return total


def replicate_tiny(corpus: str, directory: str, megabytes: float, files: int) -> int:
    """Writes the first `megabytes` of `corpus` (whole paragraphs) spread over `files` files; returns bytes."""
    with open(corpus, "rb") as handle:
        head = handle.read(int(megabytes * 1e6))
    paragraphs = head[: head.rfind(b"\n\n")].split(b"\n\n")
    total = 0
    for index in range(files):
        part = b"\n\n".join(paragraphs[index::files]) + b"\n"
        with open(os.path.join(directory, f"part-{index:03d}.txt"), "wb") as out:
            out.write(part)
        total += len(part)
    return total


def corpus_as_jsonl(corpus_dir: str, jsonl_dir: str) -> None:
    """Writes each .txt file of `corpus_dir` as .jsonl, one blank-line separated paragraph per
    record (the documents our .txt reader makes), for datatrove's JsonlReader."""
    os.makedirs(jsonl_dir)
    for name in sorted(os.listdir(corpus_dir)):
        with open(os.path.join(corpus_dir, name), encoding="utf-8") as handle:
            paragraphs = [p.strip("\n") for p in handle.read().split("\n\n") if p.strip()]
        with open(os.path.join(jsonl_dir, name.replace(".txt", ".jsonl")), "w", encoding="utf-8") as out:
            for index, text in enumerate(paragraphs):
                out.write(json.dumps({"text": text, "id": f"{name}:{index}"}) + "\n")


def run_datatrove(jsonl_dir: str, work_dir: str, env_dir: str, workers: int, total_bytes: int) -> dict:
    """Runs `datatrove_baseline.py` in the datatrove environment; returns its timings and MB/s."""
    python = os.path.join(env_dir, "bin", "python")
    if not os.path.exists(python):
        sys.exit(f"no datatrove environment at {env_dir}: run benchmarks/make_datatrove_env.sh first")
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "datatrove_baseline.py")
    done = subprocess.run(
        [python, script, "--input", jsonl_dir, "--work", work_dir, "--workers", str(workers)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode:
        sys.exit(f"datatrove baseline failed:\n{done.stderr[-3000:]}")
    outcome = json.loads(done.stdout.strip().splitlines()[-1])
    mb_per_s = total_bytes / 1e6 / outcome["total_s"]
    return dict(outcome, mb_per_s=mb_per_s, mb_per_s_per_core=mb_per_s / workers)


def run_mode(beam_args, corpus_dir: str, work_dir: str) -> dict:
    """Runs ExampleGen then StatisticsGen with `beam_args`; returns seconds per stage and the report."""
    from tfx.components.statistics_gen import executor as statistics_executor
    from tfx.dsl.components.base.base_beam_executor import BaseBeamExecutor
    from tfx.proto import example_gen_pb2
    from tfx.types import artifact_utils, standard_artifacts, standard_component_specs
    from tfx.utils import proto_utils

    from components.example_gen import ingest_report
    from components.example_gen.component import custom_config
    from components.example_gen.executor import TextCorpusExampleGenExecutor
    from pipeline.config import PipelineConfig
    from pipeline.pipeline import cleaning_options

    context = BaseBeamExecutor.Context(beam_pipeline_args=list(beam_args), tmp_dir=os.path.join(work_dir, "tmp"))
    examples = standard_artifacts.Examples()
    examples.uri = os.path.join(work_dir, "examples")
    properties = {
        standard_component_specs.INPUT_BASE_KEY: corpus_dir,
        standard_component_specs.INPUT_CONFIG_KEY: proto_utils.proto_to_json(
            example_gen_pb2.Input(splits=[example_gen_pb2.Input.Split(name="corpus", pattern="*.txt")])
        ),
        standard_component_specs.OUTPUT_CONFIG_KEY: proto_utils.proto_to_json(
            example_gen_pb2.Output(
                split_config=example_gen_pb2.SplitConfig(
                    splits=[
                        example_gen_pb2.SplitConfig.Split(name="train", hash_buckets=9),
                        example_gen_pb2.SplitConfig.Split(name="eval", hash_buckets=1),
                    ]
                )
            )
        ),
        standard_component_specs.CUSTOM_CONFIG_KEY: json.dumps(
            custom_config(PipelineConfig().example_gen, cleaning_options(PipelineConfig()))
        ),
    }
    start = time.perf_counter()
    TextCorpusExampleGenExecutor(context).Do({}, {standard_component_specs.EXAMPLES_KEY: [examples]}, properties)
    example_gen_s = time.perf_counter() - start

    statistics = standard_artifacts.ExampleStatistics()
    statistics.uri = os.path.join(work_dir, "statistics")
    statistics.split_names = artifact_utils.encode_split_names(["train", "eval"])
    start = time.perf_counter()
    statistics_executor.Executor(context).Do(
        {standard_component_specs.EXAMPLES_KEY: [examples]},
        {standard_component_specs.STATISTICS_KEY: [statistics]},
        {standard_component_specs.EXCLUDE_SPLITS_KEY: "[]"},
    )
    statistics_gen_s = time.perf_counter() - start
    return {
        "example_gen_s": example_gen_s,
        "statistics_gen_s": statistics_gen_s,
        "report": ingest_report.read_report(examples.uri),
    }


def run_both_stages(beam_args, corpus_dir: str, work_dir: str, total_bytes: int) -> dict:
    """`run_mode` plus seconds, worker count and MB/s (overall and per core)."""
    outcome = run_mode(beam_args, corpus_dir, work_dir)
    seconds = outcome["example_gen_s"] + outcome["statistics_gen_s"]
    workers = int(beam_args[1].split("=")[1])
    return dict(
        outcome,
        seconds=seconds,
        workers=workers,
        mb_per_s=total_bytes / 1e6 / seconds,
        mb_per_s_per_core=total_bytes / 1e6 / seconds / workers,
    )


def bytecode_cache() -> str:
    """Whether imports (which each multi-processing worker repeats) can use compiled bytecode."""
    if os.environ.get("PYTHONPYCACHEPREFIX"):
        return f"pycache prefix {os.environ['PYTHONPYCACHEPREFIX']}"
    return "disabled (PYTHONDONTWRITEBYTECODE)" if os.environ.get("PYTHONDONTWRITEBYTECODE") else "default"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", default=DEFAULT_CORPUS)
    parser.add_argument("--mb", type=float, default=100.0, help="Size of the replicated corpus in MB.")
    parser.add_argument("--files", type=int, default=16, help="Number of files the corpus is spread over.")
    parser.add_argument(
        "--fixed-mb", type=float, default=0.1, help="Size of the tiny corpus timing the fixed cost (0: skip)."
    )
    parser.add_argument("--modes", default=",".join(MODES), help="Comma-separated runner modes to measure.")
    parser.add_argument(
        "--datatrove", action="store_true", help="Also run the datatrove baseline (its own environment)."
    )
    parser.add_argument("--datatrove-env", default=DATATROVE_ENV)
    parser.add_argument("--datatrove-workers", type=int, default=1)
    machine.add_load_arguments(parser)
    args = parser.parse_args()
    modes = {mode: MODES[mode] for mode in args.modes.split(",")}
    if not os.path.exists(args.corpus):
        sys.exit(f"corpus not found: {args.corpus} (the shared data folder is absent)")

    scratch = tempfile.mkdtemp(prefix="ingest-bench-")
    try:
        corpus_dir, tiny_dir = os.path.join(scratch, "corpus"), os.path.join(scratch, "tiny")
        os.makedirs(corpus_dir)
        os.makedirs(tiny_dir)
        total_bytes = replicate_corpus(args.corpus, corpus_dir, args.mb, args.files)
        tiny_bytes = replicate_tiny(args.corpus, tiny_dir, args.fixed_mb, args.files) if args.fixed_mb else 0
        guard = machine.LoadGuard(args)
        results, fixed, datatrove = {}, {}, None
        if args.datatrove:
            jsonl_dir = os.path.join(scratch, "jsonl")
            corpus_as_jsonl(corpus_dir, jsonl_dir)
            datatrove = run_datatrove(
                jsonl_dir, os.path.join(scratch, "datatrove"), args.datatrove_env, args.datatrove_workers, total_bytes
            )
        for mode, beam_args in modes.items():
            if tiny_bytes:
                fixed[mode] = run_both_stages(beam_args, tiny_dir, os.path.join(scratch, "tiny-" + mode), tiny_bytes)
            results[mode] = run_both_stages(beam_args, corpus_dir, os.path.join(scratch, mode), total_bytes)
            if tiny_bytes:
                marginal_s = results[mode]["seconds"] - fixed[mode]["seconds"]
                results[mode]["fixed_s"] = fixed[mode]["seconds"]
                results[mode]["marginal_mb_per_s"] = (
                    (total_bytes - tiny_bytes) / 1e6 / marginal_s if marginal_s > 0 else None
                )
        speedup = (
            results["in_memory"]["seconds"] / results["multi_processing"]["seconds"]
            if len(results) == len(MODES)
            else None
        )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    load = guard.finish()
    print(
        f"\n{machine.command_line()}\ncorpus: {total_bytes / 1e6:.1f} MB ({args.files} files of replicated "
        f"{os.path.basename(args.corpus)}); {guard.banner()}"
    )
    print(
        "| runner | workers | ExampleGen s | ExampleGen MB/s per core | StatisticsGen s | total s | MB/s | MB/s per core "
        "| fixed s (tiny corpus) | marginal MB/s |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for mode, r in results.items():
        fixed_s, marginal = r.get("fixed_s"), r.get("marginal_mb_per_s")
        r["example_gen_mb_per_s_per_core"] = total_bytes / 1e6 / r["example_gen_s"] / r["workers"]
        print(
            f"| {mode} | {r['workers']} | {r['example_gen_s']:.1f} | {r['example_gen_mb_per_s_per_core']:.2f} "
            f"| {r['statistics_gen_s']:.1f} | {r['seconds']:.1f} | {r['mb_per_s']:.2f} | {r['mb_per_s_per_core']:.2f} "
            f"| {'-' if fixed_s is None else f'{fixed_s:.1f}'} | {'-' if marginal is None else f'{marginal:.2f}'} |"
        )
    if datatrove:
        print(
            f"| datatrove (JsonlReader + Gopher + MinHash) | {datatrove['workers']} | {datatrove['total_s']:.1f} "
            f"| {datatrove['mb_per_s_per_core']:.2f} | - | {datatrove['total_s']:.1f} | {datatrove['mb_per_s']:.2f} "
            f"| {datatrove['mb_per_s_per_core']:.2f} | - | - |"
        )
        print(
            f"datatrove: {datatrove['documents_in']} documents in, {datatrove['documents_after_filters']} after the "
            f"Gopher filters, {datatrove['documents_out']} after MinHash dedup; stage seconds {datatrove['seconds']}"
        )
    if speedup is not None:
        print(f"multi-processing speed-up: {speedup:.2f}x (goal >= 1.6x)")
    report = next(iter(results.values()))["report"]
    print(f"documents read {report['documents_read']}, kept {report['documents_kept']}, removed {report['removed']}")

    os.makedirs(os.path.dirname(RESULTS), exist_ok=True)
    with open(RESULTS, "w", encoding="utf-8") as handle:
        json.dump(
            {
                "corpus_bytes": total_bytes,
                "files": args.files,
                "results": results,
                "speedup": speedup,
                "datatrove": datatrove,
                "load": load,
                "command": machine.command_line(),
                "tiny_corpus_bytes": tiny_bytes,
                "fixed_cost_runs": fixed,
                "bytecode_cache": bytecode_cache(),
                "machine": machine.machine_description(),
                "platform": platform.platform(),
                "python": platform.python_version(),
            },
            handle,
            indent=2,
        )
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
