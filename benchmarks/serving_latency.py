"""Serving latency under concurrency: N client threads calling the exported model through a batcher.

TF Serving's binary cannot run on this machine, so this drives the exported SavedModel in-process:
`tf.saved_model.load` + the signature functions, behind a batching layer configured like
`pusher.batching` (max_batch_size, batch_timeout_micros, num_batch_threads, max_enqueued_batches),
as TF Serving's `--enable_batching` would be: a partial batch waits at most batch_timeout_micros
for more requests, up to num_batch_threads batches run at once. Each client sends one prompt per
request and waits for the answer (closed loop), for `--seconds` per concurrency.

Requests measured:
  generate   the `generate` signature, greedy, `--new-tokens` new tokens (a generative request)
  score      the `score` signature (one forward pass: a non-generative request, like the anchor's)
Reported per concurrency: P50 / P99 latency, requests/s, and for generate new tokens/s. The anchor
is P99 < 8 ms at 1,200 requests/s for a non-generative model on TF Serving.

Note: TF Serving's batching session batches every input along dimension 0; the `generate`
signature's scalar inputs (max_new_tokens, temperature, ...) have none, so with --enable_batching
a server batches `serving_default` (prompts only) requests; here requests with equal scalars are
batched, which is what that path does.

The model: `--model DIR` (an exported SavedModel, e.g. runs/local/serving/<version>), or by
default a random model of `--preset` exported with a transform graph learned from the bundled
corpus (so it tokenizes like a pipeline run). Prints a table, writes
benchmarks/results/serving_latency.json.

    python benchmarks/serving_latency.py [--model DIR] [--concurrency 1 4 16] [--seconds 10] [--new-tokens 16]
"""

import argparse
import os
import queue
import sys
import tempfile
import threading
import time
from concurrent.futures import Future
from typing import Callable, Dict, List

import numpy as np

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import machine  # noqa: E402
import tensorflow as tf  # noqa: E402
import tensorflow_transform as tft  # noqa: E402

from components.pusher.options import BatchingOptions  # noqa: E402
from components.trainer.options import GenerationOptions, ModelOptions  # noqa: E402

ANCHOR = {"p99_ms": 8.0, "requests_per_s": 1200.0}
PROMPTS = ["the customer asked about", "please reset my", "thank you for", "our release adds", "we are sorry that"]


class Batcher:
    """Collects single-prompt requests into batches like TF Serving's batching layer.

    `run_batch(prompts [n] string tensor)` -> dict of [n, ...] outputs; each caller gets its row.
    """

    def __init__(self, run_batch: Callable[[tf.Tensor], Dict[str, tf.Tensor]], config: BatchingOptions):
        self._run_batch = run_batch
        self._config = config
        self._requests: "queue.Queue" = queue.Queue(maxsize=config.max_enqueued_batches * config.max_batch_size)
        self._slots = threading.Semaphore(config.num_batch_threads)
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._collect, daemon=True)
        self._thread.start()

    def submit(self, prompt: str) -> Future:
        future: Future = Future()
        self._requests.put((prompt, future))
        return future

    def _collect(self) -> None:
        """Forms batches: the first request, then more until max_batch_size or the timeout."""
        while not self._stopped.is_set():
            try:
                batch = [self._requests.get(timeout=0.1)]
            except queue.Empty:
                continue
            deadline = time.perf_counter() + self._config.batch_timeout_micros / 1e6
            while len(batch) < self._config.max_batch_size:
                remaining = deadline - time.perf_counter()
                if remaining <= 0:
                    break
                try:
                    batch.append(self._requests.get(timeout=remaining))
                except queue.Empty:
                    break
            self._slots.acquire()
            threading.Thread(target=self._execute, args=(batch,), daemon=True).start()

    def _execute(self, batch: list) -> None:
        try:
            outputs = self._run_batch(tf.constant([prompt for prompt, _ in batch]))
            arrays = {name: value.numpy() for name, value in outputs.items()}
            for row, (_, future) in enumerate(batch):
                future.set_result({name: value[row] for name, value in arrays.items()})
        except Exception as error:  # noqa: BLE001 - handed to every waiting client
            for _, future in batch:
                future.set_exception(error)
        finally:
            self._slots.release()

    def stop(self) -> None:
        self._stopped.set()
        self._thread.join()


def drive(batcher: Batcher, concurrency: int, seconds: float) -> dict:
    """`concurrency` closed-loop clients for `seconds`; latency percentiles and throughput."""
    latencies: List[float] = []
    tokens: List[int] = []
    lock = threading.Lock()
    end = time.perf_counter() + seconds

    def client(index: int) -> None:
        turn = index
        while time.perf_counter() < end:
            start = time.perf_counter()
            result = batcher.submit(PROMPTS[turn % len(PROMPTS)]).result()
            elapsed = time.perf_counter() - start
            with lock:
                latencies.append(elapsed)
                tokens.append(int(result.get("num_generated_tokens", 0)))
            turn += 1

    started = time.perf_counter()
    threads = [threading.Thread(target=client, args=(index,)) for index in range(concurrency)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - started
    milliseconds = 1000 * np.array(latencies)
    return {
        "concurrency": concurrency,
        "requests": len(latencies),
        "p50_ms": float(np.percentile(milliseconds, 50)),
        "p99_ms": float(np.percentile(milliseconds, 99)),
        "requests_per_s": len(latencies) / wall,
        "new_tokens_per_s": sum(tokens) / wall,
    }


def build_model(preset: str, export_dir: str) -> str:
    """Exports a random `preset` model with a SentencePiece tokenizer learned from the bundled corpus."""
    from components.tokenizer.ids import EOS_ID
    from components.tokenizer.learn import learn_model
    from components.trainer.model.backbone import build_backbone
    from components.trainer.serving.export import export_serving_model
    from components.transform.standalone import analyze_and_transform

    with open(os.path.join(ROOT, "data", "corpus", "support_replies.txt"), encoding="utf-8") as handle:
        documents = [part.strip() for part in handle.read().split("\n\n") if part.strip()][:400]
    vocab_size = 1024
    tokenizer_path = os.path.join(export_dir, "sentencepiece.model")
    os.makedirs(export_dir, exist_ok=True)
    with open(tokenizer_path, "wb") as handle:
        handle.write(learn_model(documents, vocab_size))
    transform_dir = analyze_and_transform(documents, tokenizer_path, os.path.join(export_dir, "transform"))
    config = ModelOptions(preset=preset)
    tf.keras.utils.set_random_seed(0)
    backbone = build_backbone(config, vocab_size)
    embeddings = backbone.token_embedding.embeddings  # a random model must not stop at [EOS] early
    embeddings.assign(tf.tensor_scatter_nd_update(embeddings, [[EOS_ID]], tf.zeros([1, config.model_dim])))
    model_dir = os.path.join(export_dir, "model")
    export_serving_model(
        backbone, tft.TFTransformOutput(transform_dir), GenerationOptions(temperature=0.0, top_k=0), model_dir
    )
    return model_dir


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", help="An exported SavedModel; default: export a random --preset model.")
    parser.add_argument("--preset", default="10m")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--new-tokens", type=int, default=16)
    machine.add_load_arguments(parser)
    args = parser.parse_args()
    guard = machine.LoadGuard(args)

    model_dir = args.model or build_model(args.preset, tempfile.mkdtemp(prefix="serving_latency_"))
    model = tf.saved_model.load(model_dir)
    batching = BatchingOptions()
    generate = model.signatures["generate"]
    score = model.signatures["score"]
    requests = {
        "generate": lambda prompts: generate(
            prompts=prompts,
            max_new_tokens=tf.constant(args.new_tokens),
            temperature=tf.constant(0.0),
            top_k=tf.constant(0),
            top_p=tf.constant(1.0),
            seed=tf.constant(0, tf.int64),
        ),
        "score": lambda prompts: score(texts=prompts),
    }
    rows = []
    for name, run_batch in requests.items():
        for size in sorted({1, batching.max_batch_size}):  # trace each batch shape before timing
            run_batch(tf.constant(PROMPTS * (size // len(PROMPTS) + 1))[:size])
        batcher = Batcher(run_batch, batching)
        for concurrency in args.concurrency:
            result = {"request": name, **drive(batcher, concurrency, args.seconds)}
            rows.append(result)
            print(result, flush=True)
        batcher.stop()
    load = guard.finish()

    print(f"\n{machine.command_line()}\nmodel {model_dir}; batching {batching.model_dump()}; {guard.banner()}")
    print("| request | clients | requests | P50 ms | P99 ms | requests/s | new tokens/s |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for row in rows:
        print(
            f"| {row['request']} | {row['concurrency']} | {row['requests']} | {row['p50_ms']:.1f} | {row['p99_ms']:.1f} | "
            f"{row['requests_per_s']:.1f} | {row['new_tokens_per_s']:.0f} |"
        )
    print(
        f"| anchor: non-generative model on TF Serving | - | - | - | < {ANCHOR['p99_ms']:.0f} | {ANCHOR['requests_per_s']:,.0f} | - |"
    )
    path = machine.write_results(
        "serving_latency",
        {
            "command": machine.command_line(),
            "machine": machine.machine_description(),
            "load": load,
            "model": model_dir,
            "batching": batching.model_dump(),
            "new_tokens": args.new_tokens,
            "anchor": ANCHOR,
            "rows": rows,
        },
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
