"""Push latency and half-written-version exposure: our atomic push vs a direct copy.

Baseline (`direct copy`): what the stock TFX Pusher does on a filesystem, copying the files straight
into `<base>/<version>/` (saved_model.pb last), with the same tf.io.gfile copy calls as ours. Ours: copy into a hidden staging directory, rename.
A reader thread polls the base path the whole time and counts the listings in which a version
directory exists without a complete SavedModel (saved_model.pb + variables index + variables data
of the full size). Prints a table and writes benchmarks/results/push_atomicity.json.

    python benchmarks/push_atomicity.py [--size-mb 64] [--pushes 5]
"""

import argparse
import json
import os
import shutil
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from components.versioned_push import existing_versions, push_saved_model  # noqa: E402

DATA_FILE = os.path.join("variables", "variables.data-00000-of-00001")


def make_model(directory: str, size_mb: int) -> int:
    os.makedirs(os.path.join(directory, "variables"))
    with open(os.path.join(directory, DATA_FILE), "wb") as handle:
        for _ in range(size_mb):
            handle.write(os.urandom(1 << 20))
    with open(os.path.join(directory, "variables", "variables.index"), "wb") as handle:
        handle.write(b"index")
    with open(os.path.join(directory, "saved_model.pb"), "wb") as handle:
        handle.write(b"graph")
    return size_mb << 20


def direct_copy(model: str, base: str) -> None:
    """The baseline: copy (with the same tf.io.gfile calls as ours) straight into the final
    version directory, saved_model.pb last."""
    import tensorflow as tf

    versions = existing_versions(base)
    final = os.path.join(base, str((versions[-1] + 1) if versions else 1))
    for relative in ("variables/variables.index", DATA_FILE, "saved_model.pb"):
        tf.io.gfile.makedirs(os.path.dirname(os.path.join(final, relative)))
        tf.io.gfile.copy(os.path.join(model, relative), os.path.join(final, relative))


def measure(name, push, model, data_bytes, pushes):
    base = tempfile.mkdtemp(prefix="push-bench-")
    stop, polls, incomplete = threading.Event(), [0], [0]

    def complete(path):
        data = os.path.join(path, DATA_FILE)
        return (
            os.path.exists(os.path.join(path, "saved_model.pb"))
            and os.path.exists(os.path.join(path, "variables", "variables.index"))
            and os.path.exists(data)
            and os.path.getsize(data) == data_bytes
        )

    def reader():
        while not stop.is_set():
            polls[0] += 1
            for entry in os.listdir(base):
                path = os.path.join(base, entry)
                if entry.isdigit() and not complete(path):
                    incomplete[0] += 1

    thread = threading.Thread(target=reader)
    thread.start()
    times = []
    for _ in range(pushes):
        start = time.perf_counter()
        push(model, base)
        times.append(time.perf_counter() - start)
    stop.set()
    thread.join()
    shutil.rmtree(base)
    return {
        "method": name,
        "median_push_s": sorted(times)[len(times) // 2],
        "reader_polls": polls[0],
        "polls_seeing_incomplete_version": incomplete[0],
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-mb", type=int, default=64)
    parser.add_argument("--pushes", type=int, default=5)
    args = parser.parse_args()
    model = tempfile.mkdtemp(prefix="push-bench-model-")
    shutil.rmtree(model)
    data_bytes = make_model(model, args.size_mb)
    rows = [
        measure("ours (staging dir + rename)", lambda m, b: push_saved_model(m, b), model, data_bytes, args.pushes),
        measure("direct copy (stock Pusher style)", direct_copy, model, data_bytes, args.pushes),
    ]
    shutil.rmtree(model)
    result = {"size_mb": args.size_mb, "pushes": args.pushes, "loadavg": os.getloadavg(), "rows": rows}
    print(f"model {args.size_mb} MB, {args.pushes} pushes each, load average {result['loadavg'][0]:.2f}")
    print("| method | median push s | reader polls | polls that saw an incomplete version |")
    print("|---|---:|---:|---:|")
    for row in rows:
        print(
            f"| {row['method']} | {row['median_push_s']:.3f} | {row['reader_polls']:,} | {row['polls_seeing_incomplete_version']:,} |"
        )
    os.makedirs(os.path.join(os.path.dirname(__file__), "results"), exist_ok=True)
    with open(os.path.join(os.path.dirname(__file__), "results", "push_atomicity.json"), "w") as handle:
        json.dump(result, handle, indent=2)


if __name__ == "__main__":
    main()
