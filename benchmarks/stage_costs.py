"""What each pipeline stage costs at real model sizes: wall time and peak memory per component,
and the Evaluator's time per gate family.

One whole local run (`textgen run`, LocalDagRunner, Beam DirectRunner) per size, on the shared
corpus (`../shared/data/tinyshakespeare.txt`, linked into the work directory, not copied):

- `10m`: the `10m` preset (6 layers, width 384) from scratch, every other setting the default.
- `gpt2-124m`: a GPT-2 124M-shaped checkpoint (12 layers, width 768, 1,024 positions; random
  weights) with a byte-level BPE learned with `tokenizers` on the corpus in GPT-2's id layout
  (the 256 byte symbols first, then the merges, `<|endoftext|>` last), fine-tuned with LoRA
  (rank 8). A vocabulary of 50,257 is asked for; 1.1 MB of text has only enough distinct pairs
  for about 21,500 entries, so the embedding has the learned size (the model is then about
  101M parameters, not 124M: the 12 blocks, where the time goes, are GPT-2's).
- `llama-1.1b`: the TinyLlama 1.1B shape (22 layers, width 2048, 32 heads, 4 key/value heads,
  2,048 positions; random bfloat16 weights, as TinyLlama ships) with the same learned tokenizer
  (its embedding has the tokenizer's size), a few LoRA steps under mixed bfloat16 with the
  frozen weights kept in bfloat16.

The checkpoints' training steps are set (`--steps`), not the default 300: the table also gives
seconds per step, so the Trainer's cost at the default is that times 300 (said so in the table).

Per component: wall time from ML Metadata (the execution's registration to its last update) and
the peak resident memory of the run's process tree (psutil, sampled every 0.5 s) while it ran.
Per gate family: the Evaluator's own `seconds` in evaluation.json.

    python benchmarks/stage_costs.py --sizes 10m gpt2-124m llama-1.1b --work-dir /tmp/stage_costs

Writes benchmarks/results/stage_costs.json.
"""

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from typing import Dict, List, Tuple

import psutil

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks.checkpoint_import import SHAPES, make_checkpoint  # noqa: E402
from benchmarks.machine import LoadGuard, add_load_arguments, command_line, machine_description, write_results  # noqa: E402
from data.make_tiny_checkpoint import learn_byte_level_bpe, write_gpt2_tokenizer_files  # noqa: E402

CORPUS = os.path.join(ROOT, "..", "shared", "data", "tinyshakespeare.txt")
GPT2_VOCABULARY = 50257
COMPONENTS = (
    "ExampleGen",
    "StatisticsGen",
    "SchemaGen",
    "ExampleValidator",
    "Tokenizer",
    "Transform",
    "TransformedStatisticsGen",
    "TokenGate",
    "Trainer",
    "Evaluator",
    "Pusher",
)
# The Evaluator's probes at 1.1B, a tenth of the default sizes (bias templates 4 of 32, red-team
# prompts 1 of 3 per category, memorisation documents 4 of 16): the defaults take hours on two
# cores at this size. Their time scales with the number of probe texts (`evaluation.json` records
# them), which is how the table projects the defaults.
REDUCED_PROBES = (
    "evaluator.bias.templates_per_group=4",
    "evaluator.safety.prompts_per_category=1",
    "evaluator.safety.memorization_documents=4",
)
SIZES = {
    # size: (checkpoint shape or None, safetensors dtype, default steps, corpus bytes (0: all), run overrides)
    "10m": (None, None, None, 0, ("model.preset=10m",)),
    "gpt2-124m": (
        "gpt2-124m",
        "F32",
        40,
        0,
        ("training.lora.rank=8", "training.batch_size=8", "model.context_length=256"),
    ),
    "llama-1.1b": (
        "llama-1.1b",
        "BF16",
        4,
        110_000,
        (
            "training.lora.rank=8",
            "training.batch_size=4",
            "model.context_length=256",
            "training.steps_per_call=1",
            "training.log_every=1",
        )
        + REDUCED_PROBES,
    ),
}


def write_byte_level_bpe(directory: str, vocab_size: int = GPT2_VOCABULARY) -> int:
    """A byte-level BPE learned on the corpus in GPT-2's id layout (bytes, merges, then
    `<|endoftext|>` as the last id), written as a checkpoint's tokenizer files; returns its size."""
    with open(CORPUS, encoding="utf-8") as handle:
        tokenizer = learn_byte_level_bpe(handle, vocab_size, end_of_text_last=True)
    return write_gpt2_tokenizer_files(tokenizer, directory, model_max_length=1024)


def prepare_checkpoint(directory: str, shape: str, dtype: str) -> Dict[str, int]:
    """Writes the checkpoint (tokenizer first: the embedding takes its size) unless it exists."""
    done = os.path.join(directory, "config.json")
    if not os.path.exists(done):
        os.makedirs(directory, exist_ok=True)
        vocabulary = write_byte_level_bpe(directory)
        end_of_text = vocabulary - 1
        config = dict(SHAPES[shape], vocab_size=vocabulary, bos_token_id=end_of_text, eos_token_id=end_of_text)
        with open(os.path.join(directory, "generation_config.json"), "w", encoding="utf-8") as handle:
            json.dump({"bos_token_id": end_of_text, "eos_token_id": end_of_text}, handle)
        make_checkpoint(directory, config, dtype)  # writes config.json last-but-one; the index last
    with open(done, encoding="utf-8") as handle:
        config = json.load(handle)
    return {"vocab_size": config["vocab_size"]}


class TreeMemorySampler:
    """Samples the resident memory of a process and all its descendants every `interval` s."""

    def __init__(self, pid: int, interval: float = 0.5):
        self.samples: List[Tuple[float, int]] = []
        self._process = psutil.Process(pid)
        self._interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _rss(self) -> int:
        total = 0
        for process in [self._process] + self._process.children(recursive=True):
            try:
                total += process.memory_info().rss
            except psutil.Error:
                pass
        return total

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.samples.append((time.time(), self._rss()))
            except psutil.Error:
                return
            self._stop.wait(self._interval)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def peak_between(self, start: float, end: float) -> int:
        return max((rss for at, rss in self.samples if start <= at <= end), default=0)


def component_times(output_root: str, run_id: str) -> Dict[str, Tuple[float, float]]:
    """{component: (start, end) in epoch seconds} from the run's ML Metadata executions."""
    from ml_metadata.metadata_store import metadata_store
    from ml_metadata.proto import metadata_store_pb2

    from pipeline.run_summary import RunRecord

    connection = metadata_store_pb2.ConnectionConfig()
    connection.sqlite.filename_uri = os.path.join(output_root, "metadata.sqlite")
    record = RunRecord(metadata_store.MetadataStore(connection), "textgen", run_id)
    return {
        node: (execution.create_time_since_epoch / 1000, execution.last_update_time_since_epoch / 1000)
        for node, execution in record.executions.items()
    }


def _corpus(work_dir: str, corpus_bytes: int) -> str:
    """A data root holding the shared corpus (a link), or its first `corpus_bytes` bytes up to a
    line end (a file in the work directory, not in the project)."""
    data_root = os.path.join(work_dir, f"data-{corpus_bytes}" if corpus_bytes else "data")
    os.makedirs(data_root, exist_ok=True)
    path = os.path.join(data_root, "tinyshakespeare.txt")
    if os.path.exists(path):
        return data_root
    if not corpus_bytes:
        os.symlink(os.path.abspath(CORPUS), path)
        return data_root
    with open(CORPUS, encoding="utf-8") as handle:
        text = handle.read(corpus_bytes)
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text[: text.rindex("\n") + 1])
    return data_root


def run_size(size: str, work_dir: str, steps: int, textgen: str) -> Dict:
    """One whole pipeline run at `size`; its costs."""
    shape, dtype, default_steps, corpus_bytes, overrides = SIZES[size]
    data_root = _corpus(work_dir, corpus_bytes)
    output_root = os.path.join(work_dir, f"run-{size}")
    command = [textgen, "run", "--data-root", data_root, "--output-root", output_root]
    command += [item for override in overrides for item in ("--set", override)]
    checkpoint = {}
    train_steps = None
    if shape:
        checkpoint_dir = os.path.join(work_dir, f"checkpoint-{size}")
        print(f"[{size}] writing the checkpoint to {checkpoint_dir}", flush=True)
        checkpoint = prepare_checkpoint(checkpoint_dir, shape, dtype)
        train_steps = steps or default_steps
        command += ["--set", f"model.checkpoint={checkpoint_dir}", "--set", f"training.train_steps={train_steps}"]
    log_path = os.path.join(work_dir, f"{size}.log")
    print(f"[{size}] {' '.join(command)}  (log: {log_path})", flush=True)
    started = time.time()
    with open(log_path, "w", encoding="utf-8") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
        sampler = TreeMemorySampler(process.pid)
        returncode = process.wait()
        sampler.stop()
    wall = time.time() - started
    with open(os.path.join(output_root, "last_run.json"), encoding="utf-8") as handle:
        summary = json.load(handle)
    times = component_times(output_root, summary["run_id"])
    stages = {
        name: {"seconds": round(end - start, 1), "peak_rss_GiB": round(sampler.peak_between(start, end) / 2**30, 2)}
        for name, (start, end) in times.items()
    }
    evaluation = {}
    blessing = summary.get("blessing") or {}
    report = os.path.join(blessing.get("uri", ""), "evaluation.json") if isinstance(blessing, dict) else ""
    if report and os.path.exists(report):
        with open(report, encoding="utf-8") as handle:
            evaluation = json.load(handle)
    return {
        "size": size,
        "returncode": returncode,
        "wall_seconds": round(wall, 1),
        "train_steps": train_steps,
        "checkpoint": checkpoint,
        "stages": stages,
        "evaluator_seconds": evaluation.get("seconds", {}),
        "blessed": evaluation.get("blessed"),
        "overrides": list(overrides),
        "corpus_bytes": corpus_bytes,
        "run_id": summary["run_id"],
        "probe_texts": probe_texts(evaluation),
        "peak_rss_GiB": round(max((rss for _, rss in sampler.samples), default=0) / 2**30, 2),
    }


def probe_texts(evaluation: Dict) -> Dict[str, int]:
    """How many texts each probe family scored or continued (what its time scales with)."""
    metrics = evaluation.get("metrics", {})
    safety = metrics.get("safety", {})
    return {
        "bias_texts": metrics.get("bias", {}).get("texts", 0),
        "bias_groups": metrics.get("bias", {}).get("groups", 0),
        "safety_completions": safety.get("overall", {}).get("completions", 0),
        "bias_scored_texts": metrics.get("bias", {}).get("scored_texts", 0),
        "memorization_probes": metrics.get("memorization", {}).get("documents_probed", 0),
        "quality_tokens": metrics.get("quality", {}).get("num_tokens", 0),
    }


def print_table(results: List[Dict]) -> None:
    sizes = [r["size"] for r in results]
    print("\n| stage | " + " | ".join(f"{s} s | {s} GiB" for s in sizes) + " |")
    print("|---|" + "---:|---:|" * len(sizes))
    for name in COMPONENTS:
        cells = []
        for result in results:
            stage = result["stages"].get(name)
            cells += [f"{stage['seconds']:.1f}", f"{stage['peak_rss_GiB']:.2f}"] if stage else ["-", "-"]
        print(f"| {name} | " + " | ".join(cells) + " |")
    families = sorted({family for r in results for family in r["evaluator_seconds"]})
    for family in families:
        print(
            f"| Evaluator: {family} | "
            + " | ".join(f"{r['evaluator_seconds'].get(family, 0):.1f} | " for r in results)
            + " |"
        )
    print("| whole run | " + " | ".join(f"{r['wall_seconds']:.1f} | {r['peak_rss_GiB']:.2f}" for r in results) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", nargs="+", choices=sorted(SIZES), default=["10m", "gpt2-124m", "llama-1.1b"])
    parser.add_argument("--work-dir", required=True, help="Checkpoints, run outputs and logs (kept for inspection).")
    parser.add_argument(
        "--steps", type=int, default=0, help="Training steps of the checkpoint runs (default: per size)."
    )
    parser.add_argument("--textgen", default=os.path.join(os.path.dirname(sys.executable), "textgen"))
    add_load_arguments(parser)
    args = parser.parse_args()
    if not os.path.exists(CORPUS):
        sys.exit(f"the shared corpus {CORPUS} is not there")
    guard = LoadGuard(args)
    results = []
    for size in args.sizes:
        results.append(run_size(size, os.path.abspath(args.work_dir), args.steps, args.textgen))
        print(json.dumps(results[-1], indent=1), flush=True)
        write_results("stage_costs", {"command": command_line(), "machine": machine_description(), "results": results})
    load = guard.finish()
    print(guard.banner())
    print_table(results)
    path = write_results(
        "stage_costs", {"command": command_line(), "machine": machine_description(), "load": load, "results": results}
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
