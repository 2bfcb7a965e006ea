"""Measures the Evaluator's gates' error rates: trains models with the real pipeline (`textgen run`)
on corpora whose right verdict is known, across seeds and training numerics, and reports every
gate's verdict with its margin.

Corpora (`--corpora`):
- `clean`: the bundled corpus (data/corpus) with `make run`'s settings. Every gate must pass; a
  refusal is a false refusal.
- `planted`: the planted-association corpus of tests/test_bias_e2e.py (tests/bias_corpus.py: one
  religion group always followed by the negative ending), with that test's settings and suite.
  `bias.association` must refuse.
- `unplanted`: the same corpus with every group given both endings equally (the test's
  unassociated run), same settings. Every gate must pass; the table's bias line names the group
  leaning most negative, the number the end-to-end test's false-refusal margin is about.
- `noise`: issue 49's noise model (tests/bias_corpus.py `noise_run_recipe`): the fast test model
  trained 60 steps on the first 200 KB of the bundled support replies (no group term occurs in
  them), 12 bias templates per language, the quality gates relaxed. Every gate must pass: any two
  terms differ in such a model's continuations, and the sentiment and unsafe-rate gates must judge
  its group pairs against its placebo pairs, not against each other.
- `abusive`: a corpus of insults and threats (tests/safety_texts.py), fast model, 300 steps. The
  three toxicity gates (`safety.toxic_fraction`, `safety.expected_max_toxicity`,
  `safety.toxicity_probability`) must refuse.
The other gates of the planted and abusive runs are reported, not judged.

Numerics (`--numerics`), appended after each corpus's own settings so they win:
`float32` (`training.precision=float32`, XLA as `jit_compile=auto` chooses), `graph-float32`
(float32, `jit_compile=off`), `graph-bf16`
(mixed_bfloat16, `jit_compile=off`), `xla-bf16` (mixed_bfloat16, `jit_compile=on`). Each seed
(`--seeds`) sets `training.seed`.

Margin (`tests/gate_margins.py`, as the end-to-end tests read it): how far a value lies on the
side of its threshold where the verdict should be, as a factor (below 1: on the wrong side). For a
gate that passes at `value <= threshold`: threshold / value when it must pass, value / threshold
when it must refuse (the reverse for `>=` gates; `bias.unsafe_rate_ratio` on its shortfall
1 - value); "inf" for a value of 0 on the passing side of a `<=` gate, "-" when a ratio means
nothing or the gate cannot refuse (`bias.unmeasured_groups` at its default threshold 1). Gates
that are not judged get the margin of the verdict they gave. For `bias.association` the table also
gives the smallest Bonferroni-corrected sign-test p of a group leaning negative against the
significance level, with its margin (p / alpha on the clean corpus, alpha / p for the planted target).

Each run writes under `--work-dir` (default runs/gate_calibration/<corpus>-<numerics>-seed<seed>):
the generated corpus, the run's output root and its log (textgen.log). With `--resume` a run
whose output root already holds a succeeded `last_run.json` with the same settings is read, not
run again (`--no-run` only reads, failed runs included). Gate verdicts do not depend on the machine's load (only the time does), so this
records the load but does not refuse to run under it. Prints a table and writes
benchmarks/results/gate_calibration.json after every run.

    python benchmarks/gate_calibration.py [--seeds 42 7] [--numerics float32 graph-bf16 xla-bf16]
                                          [--corpora clean planted unplanted noise abusive] [--resume | --no-run]
"""

import argparse
import json
import math
import os
import subprocess
import sys
import time
from typing import Dict, List, Optional, Sequence, Tuple

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.machine import command_line, load_average, machine_description, write_results  # noqa: E402
from tests.gate_margins import gate_margin  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NUMERICS = {
    "float32": ("training.precision=float32",),
    "graph-float32": ("training.precision=float32", "training.jit_compile=off"),
    "graph-bf16": ("training.precision=mixed_bfloat16", "training.jit_compile=off"),
    "xla-bf16": ("training.precision=mixed_bfloat16", "training.jit_compile=on"),
}
TOXICITY_GATES = ("safety.toxic_fraction", "safety.expected_max_toxicity", "safety.toxicity_probability")
# Per corpus: the gates that must refuse; None means every gate must pass.
MUST_REFUSE: Dict[str, Optional[Tuple[str, ...]]] = {
    "clean": None,
    "planted": ("bias.association",),
    "unplanted": None,
    "noise": None,
    "abusive": TOXICITY_GATES,
}
# Instruction sets the numerics may use (`--isa`). The training numerics differ between the CPUs
# these machines have (AVX2 only, AVX-512 with BF16, AMX): oneDNN picks its kernels by the host's
# instruction set at run time, which changes float32 summation order. `avx2` caps oneDNN at AVX2
# (ONEDNN_MAX_CPU_ISA), so that in graph mode (`graph-*` numerics) one machine computes what an
# AVX2-only one does (TensorFlow's own Eigen kernels are compiled for one instruction set and are
# the same everywhere). XLA's CPU code generator targets the host and TF 2.16's XLA has no flag to
# cap it, so under XLA `avx2` only caps the oneDNN part.
ISA_ENVIRONMENT = {"native": {}, "avx2": {"ONEDNN_MAX_CPU_ISA": "AVX2"}}


def corpus_recipe(corpus: str, directory: str) -> Tuple[str, List[str]]:
    """(data root, config overrides) of one corpus, generating it under `directory` when it is synthetic."""
    if corpus == "clean":
        return os.path.join(REPO, "data", "corpus"), []
    from tests.conftest import FAST_OVERRIDES  # the test config's fast model, as the tests that built these corpora use

    if corpus in ("planted", "unplanted"):
        from tests.bias_corpus import planted_run_recipe

        return planted_run_recipe(directory, associated=corpus == "planted")
    if corpus == "noise":
        from tests.bias_corpus import noise_run_recipe

        return noise_run_recipe(directory)
    if corpus == "abusive":
        from tests.safety_texts import ABUSIVE_OVERRIDES, write_abusive_corpus

        return write_abusive_corpus(os.path.join(directory, "corpus")), [*FAST_OVERRIDES, *ABUSIVE_OVERRIDES]
    raise ValueError(f"--corpora: unknown corpus {corpus!r} (choose from {sorted(MUST_REFUSE)})")


def bias_significance(evaluation: dict, corpus: str, alpha: float) -> Optional[dict]:
    """The p behind `bias.association`: the planted target's corrected sign-test p, or on other
    corpora the smallest p of a measured group leaning negative, with alpha and how many groups
    the model knew."""
    bias = evaluation.get("metrics", {}).get("bias") or {}
    effects = bias.get("group_effects") or []
    if not effects:
        return None
    measured = [e for e in effects if e["verdict"] != "unmeasured"]
    if corpus == "planted":
        from tests.bias_corpus import TARGET_GROUP

        leaning = [e for e in effects if e["group"] == TARGET_GROUP]
    else:
        leaning = [e for e in measured if e["effect"] > 0]
    closest = min(leaning, key=lambda e: e["sign_p"]) if leaning else None
    return {
        "alpha": alpha,
        "groups": len(effects),
        "measured": len(measured),
        "flagged": [e["group"] for e in effects if e["verdict"] == "flagged"],
        "group": closest["group"] if closest else None,
        "p": closest["sign_p"] if closest else None,
        "effect": closest["effect"] if closest else None,
        "templates_negative": f"{closest['templates_negative']}/{closest['templates']}" if closest else None,
        # how far p is on its side of alpha: below it for the planted target, above it elsewhere
        "p_margin": None
        if not closest
        else (alpha / max(closest["sign_p"], 1e-12) if corpus == "planted" else closest["sign_p"] / alpha),
    }


def pair_summary(evaluation: dict, significance_level: float, max_gap: float) -> Optional[dict]:
    """Behind `bias.sentiment_gap`: the group pair with the largest |gap| (its BH q and z against the
    placebo pairs), the placebo pairs' robust sd and largest gap per language, and how many pairs
    the rule without placebos (|gap| > max_sentiment_gap and q < alpha) would have flagged."""
    bias = evaluation.get("metrics", {}).get("bias") or {}
    pairs = bias.get("pairs") or []
    if not pairs or "placebo_pairs" not in bias:
        return None
    largest = max(pairs, key=lambda p: abs(p["sentiment_gap"]))
    return {
        "pair": f"{largest['group_a']} vs {largest['group_b']}",
        "gap": largest["sentiment_gap"],
        "q": largest["sentiment_q_value"],
        "z": largest["sentiment_placebo_z"],
        "placebos": {
            language: {"robust_sd": r["sentiment_scale"], "largest_gap": r["largest_sentiment_gap"]}
            for language, r in bias["placebo_pairs"].items()
        },
        "flagged": sum(p["sentiment_flagged"] for p in pairs),
        "flagged_without_placebos": sum(
            abs(p["sentiment_gap"]) > max_gap and p["sentiment_q_value"] < significance_level for p in pairs
        ),
    }


def judge(corpus: str, gates: Sequence[dict]) -> List[dict]:
    """Every gate of one run with whether its verdict is the right one and its margin (on the side
    it should be on; for a gate not judged on this corpus, on the side of its own verdict)."""
    must_refuse = MUST_REFUSE[corpus]
    rows = []
    for gate in gates:
        judged = must_refuse is None or gate["name"] in must_refuse
        must_pass = must_refuse is None
        right = None if not judged or gate["skipped"] else gate["passed"] == must_pass
        rows.append(
            {
                **gate,
                "judged": judged,
                "expected": ("pass" if must_pass else "refuse") if judged else None,
                "right": right,
                "margin": gate_margin(gate, passing=must_pass if judged else gate["passed"]),
            }
        )
    return rows


def run_pipeline(
    corpus: str, numerics: str, seed: int, work_dir: str, resume: bool, run: bool = True, isa: str = "native"
) -> Optional[dict]:
    """Runs (or with `resume` reads) one `textgen run`; returns its record for the results JSON, or
    None when `run` is False and there is no finished run to read."""
    name = f"{corpus}-{numerics}-seed{seed}" + ("" if isa == "native" else f"-{isa}")
    directory = os.path.join(work_dir, name)
    os.makedirs(directory, exist_ok=True)
    output_root = os.path.join(directory, "out")
    data_root, overrides = corpus_recipe(corpus, directory)
    overrides = [*overrides, *NUMERICS[numerics], f"training.seed={seed}"]
    recipe_path, summary_path = os.path.join(directory, "recipe.json"), os.path.join(output_root, "last_run.json")
    timing_path = os.path.join(directory, "timing.json")
    recipe = {"data_root": data_root, "overrides": overrides}
    record = {
        "run": name,
        "corpus": corpus,
        "numerics": numerics,
        "seed": seed,
        "isa": isa,
        "output_root": output_root,
        **recipe,
    }
    finished = os.path.exists(summary_path) and os.path.exists(recipe_path) and _read_json(recipe_path) == recipe
    # --resume runs a failed run again; --no-run reports it
    reused = resume and finished and (not run or _read_json(summary_path).get("succeeded"))
    if not reused and not run:
        return None
    if not reused:
        with open(recipe_path, "w", encoding="utf-8") as handle:
            json.dump(recipe, handle, indent=2)
        command = [
            sys.executable,
            "-m",
            "textgen_cli.cli",
            "run",
            "--data-root",
            data_root,
            "--output-root",
            output_root,
        ]
        command += [item for override in overrides for item in ("--set", override)]
        environment = dict(
            os.environ, PYTHONPATH=REPO, TF_USE_LEGACY_KERAS="1", TF_CPP_MIN_LOG_LEVEL="2", **ISA_ENVIRONMENT[isa]
        )
        record["load_before"], started = load_average(), time.monotonic()
        print(f"[{time.strftime('%H:%M:%S')}] {name}: textgen run (log {directory}/textgen.log)", flush=True)
        with open(os.path.join(directory, "textgen.log"), "w", encoding="utf-8") as log:
            record["exit_code"] = subprocess.run(
                command, cwd=REPO, env=environment, stdout=log, stderr=subprocess.STDOUT
            ).returncode
        record["seconds"], record["load_after"] = time.monotonic() - started, load_average()
        with open(timing_path, "w", encoding="utf-8") as handle:
            json.dump({key: record[key] for key in ("load_before", "seconds", "load_after", "exit_code")}, handle)
    elif os.path.exists(timing_path):  # how long the run took when it ran
        record.update(_read_json(timing_path))
    record["reused"] = bool(reused)
    if not os.path.exists(summary_path):
        record["error"] = f"no {summary_path}: the run did not finish (see {directory}/textgen.log)"
        return record
    summary = _read_json(summary_path)
    blessing = summary.get("blessing") or {}
    if not summary.get("succeeded") or not blessing.get("gates"):
        record["error"] = summary.get("error") or "the run reached no Evaluator verdict"
        return record
    evaluation = _read_json(os.path.join(blessing["uri"], "evaluation.json"))
    from components.evaluator.options import BiasOptions

    record.update(
        blessed=blessing["blessed"],
        pushed=(summary.get("push") or {}).get("pushed"),
        gates=judge(corpus, blessing["gates"]),
        bias=bias_significance(evaluation, corpus, BiasOptions().significance_level),
        pairs=pair_summary(evaluation, BiasOptions().significance_level, BiasOptions().max_sentiment_gap),
    )
    return record


def _read_json(path: str) -> dict:
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


def _number(value: Optional[float]) -> str:
    if value is None:
        return "-"
    return "inf" if math.isinf(value) else f"{value:.4g}"


def print_run(record: dict) -> None:
    """One block of the table: every gate of one run."""
    timing = (
        f"{record['seconds']:.0f} s, load {record['load_before']:.1f} -> {record['load_after']:.1f}"
        if "seconds" in record
        else "time not recorded"
    )
    timing += ", read again" if record["reused"] else ""
    if "error" in record:
        print(f"\n{record['run']}: ERROR {record['error']} ({timing})")
        return
    print(f"\n{record['run']}: blessed {record['blessed']}, pushed {record['pushed']} ({timing})")
    print(
        f"  {'gate':32s} {'verdict':8s} {'value':>10s} {'cmp':3s} {'threshold':>10s} {'expected':8s} {'margin':>7s} right"
    )
    for gate in record["gates"]:
        right = {None: "", True: "yes", False: "NO"}[gate["right"]]
        print(
            f"  {gate['name']:32s} {gate['verdict']:8s} {_number(gate['value']):>10s} {gate['comparison']:3s} "
            f"{_number(gate['threshold']):>10s} {gate['expected'] or '-':8s} {_number(gate['margin']):>7s} {right}"
        )
    bias = record.get("bias")
    if bias and bias["p"] is not None:
        print(
            f"  bias p: {bias['group']} effect {bias['effect']:+.3f} nats/token, negative in {bias['templates_negative']} "
            f"templates, corrected p {bias['p']:.3g} vs alpha {bias['alpha']} (margin x{bias['p_margin']:.3g}); "
            f"{bias['measured']} of {bias['groups']} groups measured, flagged {bias['flagged'] or 'none'}"
        )
    elif bias:
        print(f"  bias p: no measured group leans negative; {bias['measured']} of {bias['groups']} groups measured")
    pairs = record.get("pairs")
    if pairs:
        placebos = ", ".join(
            f"{language} robust sd {r['robust_sd']:.3g}, largest {r['largest_gap']:.3g}"
            for language, r in sorted(pairs["placebos"].items())
        )
        print(
            f"  sentiment pairs: largest gap {pairs['gap']:+.3f} ({pairs['pair']}, q {pairs['q']:.3g}, z "
            f"{pairs['z']:+.1f}); placebo pairs {placebos}; flagged {pairs['flagged']}, without the placebos "
            f"{pairs['flagged_without_placebos']}"
        )


def totals(records: Sequence[dict]) -> Dict[str, dict]:
    """Per gate: false refusals over the clean runs, refusals over the runs where it must refuse,
    and the smallest margin on the right side."""
    table: Dict[str, dict] = {}
    for record in records:
        for gate in record.get("gates", []):
            if gate["right"] is None:
                continue
            row = table.setdefault(
                gate["name"],
                {"clean_runs": 0, "false_refusals": 0, "must_refuse_runs": 0, "refused": 0, "min_margin": None},
            )
            if gate["expected"] == "pass":
                row["clean_runs"] += 1
                row["false_refusals"] += not gate["passed"]
            else:
                row["must_refuse_runs"] += 1
                row["refused"] += not gate["passed"]
            if gate["margin"] is not None:
                row["min_margin"] = (
                    gate["margin"] if row["min_margin"] is None else min(row["min_margin"], gate["margin"])
                )
    return table


def print_totals(table: Dict[str, dict]) -> None:
    print(f"\n{'gate':32s} {'false refusals':>16s} {'refusals (goal all)':>20s} {'min margin':>11s}")
    for name, row in table.items():
        clean = f"{row['false_refusals']}/{row['clean_runs']}" if row["clean_runs"] else "-"
        planted = f"{row['refused']}/{row['must_refuse_runs']}" if row["must_refuse_runs"] else "-"
        print(f"{name:32s} {clean:>16s} {planted:>20s} {_number(row['min_margin']):>11s}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--seeds", type=int, nargs="+", default=[42], help="training.seed values (default: 42, the default seed)."
    )
    parser.add_argument(
        "--numerics", nargs="+", default=list(NUMERICS), choices=list(NUMERICS), help="Training numerics."
    )
    parser.add_argument("--corpora", nargs="+", default=list(MUST_REFUSE), choices=list(MUST_REFUSE), help="Corpora.")
    parser.add_argument(
        "--isa",
        nargs="+",
        default=["native"],
        choices=list(ISA_ENVIRONMENT),
        help="Instruction sets the numerics may use (`avx2`: oneDNN and XLA capped at AVX2).",
    )
    parser.add_argument(
        "--work-dir",
        default=os.path.join(REPO, "runs", "gate_calibration"),
        help="Where each run's corpus, output root and log go.",
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="Read runs that already succeeded with the same settings instead of running them again.",
    )
    parser.add_argument(
        "--no-run",
        action="store_true",
        help="Only read runs that already finished with the same settings, failed ones included "
        "(a report over earlier invocations).",
    )
    args = parser.parse_args()
    args.work_dir = os.path.abspath(args.work_dir)  # the recipes record absolute paths
    command = command_line()  # before tests.conftest (imported by the recipes) trims sys.argv
    results = {
        "command": command,
        "machine": machine_description(),
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "runs": [],
    }
    runs = [
        (corpus, numerics, seed, isa)
        for corpus in args.corpora
        for numerics in args.numerics
        for isa in args.isa
        for seed in args.seeds
    ]
    for corpus, numerics, seed, isa in runs:
        record = run_pipeline(corpus, numerics, seed, args.work_dir, args.resume or args.no_run, not args.no_run, isa)
        if record is None:
            continue
        results["runs"].append(record)
        print_run(record)
        results["totals"] = totals(results["runs"])
        path = write_results("gate_calibration", results)
    if not results["runs"]:
        sys.exit("no run finished: nothing to report")
    print_totals(results["totals"])
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
