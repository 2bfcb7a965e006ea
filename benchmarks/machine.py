"""What every benchmark records about the machine, and the load-average rule.

On the shared 2-core development machine a number taken above a load average of 1.5 is not a
result (DESIGN.md, section 5). `LoadGuard` records the 1-minute load average before and after a
run, waits for a quiet window when asked, refuses to start above the limit unless told to
measure anyway, and marks the results valid only when the load stayed under the limit.
"""
import argparse
import json
import os
import sys
import time
from typing import Optional

import numpy as np

MAX_LOAD = 1.5


def load_average() -> float:
    """The 1-minute load average."""
    return os.getloadavg()[0]


def add_load_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags every benchmark shares: --wait-for-quiet and --allow-high-load."""
    parser.add_argument("--wait-for-quiet", type=float, default=0.0, metavar="SECONDS",
                        help=f"Wait up to this long for the load average to drop under {MAX_LOAD} before starting.")
    parser.add_argument("--allow-high-load", action="store_true",
                        help=f"Measure even above load {MAX_LOAD}; the results are then marked NOT VALID.")


class LoadGuard:
    """Load average before/after a benchmark and whether its numbers count."""

    def __init__(self, args: argparse.Namespace):
        self.before = self._wait(args.wait_for_quiet)
        if self.before > MAX_LOAD and not args.allow_high_load:
            sys.exit(f"load average {self.before:.2f} > {MAX_LOAD} on this {os.cpu_count()}-core machine: not measuring "
                     f"(use --wait-for-quiet SECONDS, or --allow-high-load to take numbers marked NOT VALID)")
        self.after: Optional[float] = None

    @staticmethod
    def _wait(seconds: float) -> float:
        deadline = time.monotonic() + seconds
        while load_average() > MAX_LOAD and time.monotonic() < deadline:
            time.sleep(5)
        return load_average()

    def finish(self) -> dict:
        """Records the load after the run; returns the record stored in the results JSON."""
        self.after = load_average()
        return {"loadavg_before": self.before, "loadavg_after": self.after, "max_load": MAX_LOAD, "valid": self.valid}

    @property
    def valid(self) -> bool:
        return self.before <= MAX_LOAD and (self.after is None or self.after <= MAX_LOAD)

    def banner(self) -> str:
        """One line for the top of a printed table."""
        state = "valid" if self.valid else f"NOT VALID: load above {MAX_LOAD} on {os.cpu_count()} cores"
        return f"load average {self.before:.2f} -> {self.after:.2f} ({state})"


def machine_description() -> dict:
    """CPU model, core count, memory and TensorFlow-relevant facts for the results JSON."""
    model = "unknown"
    if os.path.exists("/proc/cpuinfo"):
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            model = next((line.split(":", 1)[1].strip() for line in handle if line.startswith("model name")), model)
    memory_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return {"cpu": model, "cores": os.cpu_count(), "memory_GiB": round(memory_gib, 1)}


def copy_bandwidth_bytes_per_s(megabytes: int = 512, repeats: int = 5) -> float:
    """Best of `repeats` numpy array copies, counting bytes read + written (STREAM 'copy')."""
    source = np.ones(megabytes * 2**20 // 4, np.float32)
    target = np.empty_like(source)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        np.copyto(target, source)
        best = min(best, time.perf_counter() - start)
    return 2 * source.nbytes / best


def write_results(name: str, results: dict) -> str:
    """Writes `results` as benchmarks/results/<name>.json; returns the path."""
    directory = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, f"{name}.json")
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(results, handle, indent=2)
    return path


def command_line() -> str:
    """The command that produced the results, as typed."""
    return "python " + " ".join([os.path.relpath(sys.argv[0])] + sys.argv[1:])
