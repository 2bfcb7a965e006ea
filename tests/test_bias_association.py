"""The association statistic against placebo terms (`components/evaluator/association.py`), on
numbers made here: what it flags, what it leaves alone, and what it calls unmeasured."""
import numpy as np
import pytest

from components.evaluator.association import measure_groups, robust_z
from components.evaluator.options import BiasOptions

TEMPLATES, PLACEBOS = 12, 60
OPTIONS = BiasOptions()


def _measure(group_association, group_familiarity, seed=0, noise=0.3):
    """Two groups against placebos whose association is template effect + noise (nats/token) and
    whose familiarity is about 2 nats per byte."""
    rng = np.random.default_rng(seed)
    template_effect = rng.normal(0, 1.0, TEMPLATES)  # some endings are likelier after every term
    placebo_association = template_effect + rng.normal(0, noise, (PLACEBOS, TEMPLATES))
    placebo_familiarity = 2.0 + rng.normal(0, 0.1, (PLACEBOS, TEMPLATES))
    groups = ["a target", "a control"]
    return {e.group: e for e in measure_groups(
        "en", ["dimension"] * 2, groups, template_effect + np.asarray(group_association, float),
        np.asarray(group_familiarity, float), placebo_association, placebo_familiarity, OPTIONS)}


def test_a_known_group_with_a_consistent_negative_lean_is_flagged_and_one_like_the_placebos_is_not():
    rng = np.random.default_rng(1)
    association = [np.full(TEMPLATES, 1.0) + rng.normal(0, 0.3, TEMPLATES), rng.normal(0, 0.3, TEMPLATES)]
    effects = _measure(association, np.full((2, TEMPLATES), 1.0))
    target, control = effects["a target"], effects["a control"]
    assert target.verdict == "flagged" and target.effect > 2 * OPTIONS.max_association and target.z > OPTIONS.min_z
    assert target.sign_consistency >= 0.9 and target.familiarity_z > OPTIONS.min_familiarity_z
    assert control.verdict == "passed" and abs(control.z) < OPTIONS.min_z


def test_a_lean_carried_by_two_templates_is_not_flagged():
    """A mean effect above the threshold that comes from two outlying templates fails the
    sign-consistency requirement: one or two noisy templates cannot decide the verdict."""
    lean = np.zeros(TEMPLATES)
    lean[:2] = 6.0
    lean[2:] = -0.05
    effects = _measure([lean, np.zeros(TEMPLATES)], np.full((2, TEMPLATES), 1.0), noise=0.05)
    target = effects["a target"]
    assert target.effect > 2 * OPTIONS.max_association and target.sign_consistency < OPTIONS.min_sign_consistency
    assert target.verdict == "passed"


def test_a_group_the_model_does_not_know_is_unmeasured_whatever_follows_it():
    """A term no likelier than the placebos (unseen in training) is no evidence about the group,
    even when the endings after it differ: it is reported, not flagged."""
    effects = _measure([np.full(TEMPLATES, 3.0), np.full(TEMPLATES, 3.0)],
                       [np.full(TEMPLATES, 2.0), np.full(TEMPLATES, 1.0)])
    assert effects["a target"].verdict == "unmeasured" and effects["a target"].effect > 2
    assert effects["a control"].verdict == "flagged"


def test_a_positive_lean_is_reported_not_flagged():
    effects = _measure([np.full(TEMPLATES, -2.0), np.zeros(TEMPLATES)], np.full((2, TEMPLATES), 1.0))
    assert effects["a target"].effect < -1 and effects["a target"].z < -OPTIONS.min_z
    assert effects["a target"].verdict == "passed"


def test_placebos_drawn_like_the_null_are_rarely_flagged():
    """Groups that behave exactly like placebos: across 50 draws of 20 such groups the gate flags
    none (each is measured, so the effect, z and sign tests all had to hold by chance)."""
    flagged = 0
    for seed in range(50):
        rng = np.random.default_rng(100 + seed)
        template_effect = rng.normal(0, 1.0, TEMPLATES)
        placebos = template_effect + rng.normal(0, 0.3, (PLACEBOS, TEMPLATES))
        groups = template_effect + rng.normal(0, 0.3, (20, TEMPLATES))
        effects = measure_groups("en", ["d"] * 20, [f"g{i}" for i in range(20)], groups, np.ones((20, TEMPLATES)),
                                 placebos, np.full((PLACEBOS, TEMPLATES), 2.0) + rng.normal(0, 0.1, (PLACEBOS, TEMPLATES)),
                                 OPTIONS)
        flagged += sum(e.verdict == "flagged" for e in effects)
    assert flagged == 0


def test_truncated_templates_are_left_out_and_without_placebos_no_group_is_measured():
    association = np.zeros((2, TEMPLATES))
    association[0, :6] = np.nan
    effects = _measure(association, np.ones((2, TEMPLATES)))
    assert effects["a target"].templates == 6 and effects["a control"].templates == TEMPLATES
    placebos = np.full((PLACEBOS, 3), np.nan)  # every placebo text was cut to fit the context
    placebos[:5] = 0.1
    cut = measure_groups("zh", ["d"], ["g"], np.full((1, 3), 5.0), np.zeros((1, 3)), placebos, np.ones((PLACEBOS, 3)), OPTIONS)
    assert [(e.verdict, e.templates) for e in cut] == [("unmeasured", 0)]


def test_robust_z_ignores_an_outlying_placebo_and_has_a_floor():
    reference = np.array([0.0, 0.1, -0.1, 0.05, -0.05, 50.0])
    assert abs(robust_z(np.array([0.0]), reference)[0]) < 0.5
    assert robust_z(np.array([1.0]), np.zeros(5))[0] == pytest.approx(1000.0)
