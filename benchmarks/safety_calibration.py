"""Calibrates the safety gate: how often the default toxicity scorer flags text that is not toxic
(clean corpus text, word salad, character garble, random ASCII) and how often it catches abuse,
and what that means for the three HELM-style gates under the default sampling plan.

For each text set of tests/safety_texts.py it scores `--texts` completions with the configured
scorer (components.evaluator.scorers.ClassifierScorer by default) and reports the score quantiles
and the fraction at or above each candidate toxicity threshold. It then simulates `--trials`
evaluations of a model whose completions are drawn from each set, with the default plan
(evaluator.safety: prompts_per_category per (category, language), completions_per_prompt k; the
Chinese prompts' completions of an English-text model score 0, as the lexicon scores them), and
reports each gate's median value, its margin to the threshold (threshold / value for sets that must
pass, value / threshold for the abusive set) and the fraction of trials the gate refuses.

This measures accuracy, not speed, so the load average does not matter. Prints a table and writes
benchmarks/results/safety_calibration.json.

    python benchmarks/safety_calibration.py [--texts 3000] [--trials 2000]
"""

import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from components.evaluator.options import SafetyOptions  # noqa: E402
from components.evaluator.scorers import load_scorer  # noqa: E402
from tests.safety_texts import CATEGORIES, simulate_gates, text_sets  # noqa: E402

THRESHOLDS = (0.5, 0.6, 0.7, 0.8, 0.9)
MUST_REFUSE = ("abusive",)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--texts", type=int, default=3000, help="Completions per text set.")
    parser.add_argument("--trials", type=int, default=2000, help="Simulated evaluations per text set.")
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="evaluator.safety option to change, e.g. --set toxicity_threshold=0.7 (repeatable).",
    )
    args = parser.parse_args()
    safety = SafetyOptions(**{key: float(value) for key, value in (item.split("=", 1) for item in args.overrides)})
    scorer = load_scorer(safety.scorer, safety)
    rng = np.random.default_rng(0)
    result = {"safety_options": safety.model_dump(), "texts_per_set": args.texts, "trials": args.trials, "sets": {}}
    print(
        f"scorer {safety.scorer}; {args.texts} completions per set; {args.trials} simulated evaluations "
        f"({CATEGORIES * safety.prompts_per_category} prompts per language, k={safety.completions_per_prompt})\n"
    )
    print(f"{'set':12s} {'p50':>6s} {'p90':>6s} {'p99':>6s} " + " ".join(f"{'>=' + str(t):>7s}" for t in THRESHOLDS))
    for name, texts in text_sets(args.texts).items():
        scores = np.array([score.score for score in scorer.score(texts, ["en"] * len(texts))])
        flagged = {str(t): float(np.mean(scores >= t)) for t in THRESHOLDS}
        result["sets"][name] = {
            "p50": float(np.median(scores)),
            "p90": float(np.quantile(scores, 0.9)),
            "p99": float(np.quantile(scores, 0.99)),
            "flagged_at": flagged,
            "gates": simulate_gates(scores, safety, args.trials, rng),
        }
        row = result["sets"][name]
        print(
            f"{name:12s} {row['p50']:6.3f} {row['p90']:6.3f} {row['p99']:6.3f} "
            + " ".join(f"{flagged[str(t)]:7.4f}" for t in THRESHOLDS)
        )
    print(f"\ngates at toxicity_threshold {safety.toxicity_threshold}: median value (margin) refused-fraction")
    print(
        f"{'set':12s} "
        + " ".join(f"{gate:>34s}" for gate in ("toxic_fraction", "expected_max_toxicity", "toxicity_probability"))
    )
    for name, row in result["sets"].items():
        cells = []
        for values in row["gates"].values():
            median, limit = values["median"], values["threshold"]
            margin = (median / limit) if name in MUST_REFUSE else (limit / median if median else float("inf"))
            values["margin"] = margin
            cells.append(f"{median:8.3f} (x{margin:5.1f}) {values['refused']:7.1%}")
        print(f"{name:12s} " + " ".join(f"{cell:>34s}" for cell in cells))
    os.makedirs(os.path.join(os.path.dirname(__file__), "results"), exist_ok=True)
    path = os.path.join(os.path.dirname(__file__), "results", "safety_calibration.json")
    with open(path, "w") as handle:
        json.dump(result, handle, indent=2)
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
