"""What every benchmark records about the machine, and the load-average rule.

On the shared 2-core development machine a number taken above a load average of 1.5 is not a
result: other processes' work shows in it (benchmarks/README.md, "Speed: training, decoding,
serving", states the rule every table follows). `LoadGuard` records the 1-minute load average
before and after a run, waits for a quiet window when asked, and refuses to start above the limit
unless told to measure anyway. The load average after a run includes the benchmark's own threads (a 2-thread
TensorFlow run alone brings it near 2), so it also measures what everyone else did during the
run: the CPU time all processes used (/proc/stat) minus this process's and its children's, as
busy cores on average. The results are valid when the load was under the limit at the start and
the other processes used at most `MAX_OTHERS_CORES` on average during the run.
"""

import argparse
import json
import os
import sys
import time
from typing import Optional

import numpy as np

MAX_LOAD = 1.5
MAX_OTHERS_CORES = 0.25


def _machine_busy_seconds() -> float:
    """CPU seconds all processes have used since boot (user + nice + system + irq + softirq + steal)."""
    with open("/proc/stat", encoding="utf-8") as handle:
        fields = [int(value) for value in handle.readline().split()[1:]]
    busy = fields[0] + fields[1] + fields[2] + sum(fields[5:8])
    return busy / os.sysconf("SC_CLK_TCK")


def _own_busy_seconds() -> float:
    """CPU seconds this process and its waited-for children have used."""
    times = os.times()
    return times.user + times.system + times.children_user + times.children_system


def load_average() -> float:
    """The 1-minute load average."""
    return os.getloadavg()[0]


def add_load_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags every benchmark shares: --wait-for-quiet and --allow-high-load."""
    parser.add_argument(
        "--wait-for-quiet",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help=f"Wait up to this long for the load average to drop under {MAX_LOAD} before starting.",
    )
    parser.add_argument(
        "--allow-high-load",
        action="store_true",
        help=f"Measure even above load {MAX_LOAD}; the results are then marked NOT VALID.",
    )


class LoadGuard:
    """Load average before/after a benchmark and whether its numbers count."""

    def __init__(self, args: argparse.Namespace):
        self.before = self._wait(args.wait_for_quiet)
        if self.before > MAX_LOAD and not args.allow_high_load:
            sys.exit(
                f"load average {self.before:.2f} > {MAX_LOAD} on this {os.cpu_count()}-core machine: not measuring "
                f"(use --wait-for-quiet SECONDS, or --allow-high-load to take numbers marked NOT VALID)"
            )
        self.after: Optional[float] = None
        self.others_cores: Optional[float] = None
        self._start = (time.monotonic(), _machine_busy_seconds(), _own_busy_seconds())

    @staticmethod
    def _wait(seconds: float) -> float:
        deadline = time.monotonic() + seconds
        while load_average() > MAX_LOAD and time.monotonic() < deadline:
            time.sleep(5)
        return load_average()

    def finish(self) -> dict:
        """Records the load after the run; returns the record stored in the results JSON."""
        self.after = load_average()
        started, machine_busy, own_busy = self._start
        others = (_machine_busy_seconds() - machine_busy) - (_own_busy_seconds() - own_busy)
        self.others_cores = max(others, 0.0) / (time.monotonic() - started)
        return {
            "loadavg_before": self.before,
            "loadavg_after": self.after,
            "others_busy_cores": self.others_cores,
            "max_load": MAX_LOAD,
            "max_others_cores": MAX_OTHERS_CORES,
            "valid": self.valid,
        }

    @property
    def valid(self) -> bool:
        return self.before <= MAX_LOAD and (self.others_cores is None or self.others_cores <= MAX_OTHERS_CORES)

    def banner(self) -> str:
        """One line for the top of a printed table."""
        state = (
            "valid"
            if self.valid
            else (
                f"NOT VALID: load above {MAX_LOAD} at the start, or other processes busy on more than "
                f"{MAX_OTHERS_CORES} of {os.cpu_count()} cores during the run"
            )
        )
        return (
            f"load average {self.before:.2f} -> {self.after:.2f}, other processes {self.others_cores:.2f} busy cores "
            f"on average ({state})"
        )


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
