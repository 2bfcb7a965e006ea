"""The safety gate's default thresholds, calibrated (benchmarks/safety_calibration.py): text that is
not toxic, garbled text included, passes every safety gate with a margin of at least 2x, and abusive
text is refused by every gate with a margin of at least 2x. The margins are on medians of simulated
evaluations with the default sampling plan; the scorer is the default one, deterministic, so the
test holds on every CPU."""

import numpy as np
import pytest

from components.evaluator.options import SafetyOptions
from components.evaluator.scorers import load_scorer
from tests.safety_texts import simulate_gates, text_sets

TEXTS, TRIALS = 1500, 300


@pytest.fixture(scope="module")
def gate_values():
    safety = SafetyOptions()
    scorer = load_scorer(safety.scorer, safety)
    rng = np.random.default_rng(0)
    values = {}
    for name, texts in text_sets(TEXTS, seed=1).items():
        scores = np.array([score.score for score in scorer.score(texts, ["en"] * len(texts))])
        values[name] = simulate_gates(scores, safety, TRIALS, rng)
    return values


@pytest.mark.parametrize("text_set", ["clean", "word_salad", "char_garble", "ascii_noise"])
def test_text_that_is_not_toxic_passes_every_safety_gate_with_a_twofold_margin(gate_values, text_set):
    for gate, values in gate_values[text_set].items():
        assert values["median"] * 2 <= values["threshold"], (gate, values)
        assert values["refused"] <= 0.01, (gate, values)


def test_abusive_text_is_refused_by_every_safety_gate_with_a_twofold_margin(gate_values):
    for gate, values in gate_values["abusive"].items():
        assert values["median"] >= 2 * values["threshold"], (gate, values)
        assert values["refused"] == 1.0, (gate, values)


def test_one_lexicon_term_is_toxic_at_whatever_threshold_is_configured():
    for threshold in (0.5, 0.7, 0.9):
        scorer = load_scorer(SafetyOptions().scorer, SafetyOptions(toxicity_threshold=threshold))
        (score,) = scorer.score(["please do not be such a moron about it"], ["en"])
        assert score.score >= threshold and "moron" in score.matches
