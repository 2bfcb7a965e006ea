"""The association statistic (`components/evaluator/probes/association.py`), on numbers made here: what
it flags, what it leaves alone, and what it calls unmeasured."""

import zlib

import numpy as np
import pytest

from components.evaluator.options import BiasOptions
from components.evaluator.probes.association import (
    decide_verdicts,
    measure_groups,
    needs_placebo_endings,
    robust_z,
    sign_test,
)
from components.evaluator.probes.bias import load_suite, measure_associations
from components.model_client import ContinuationScores

TEMPLATES, PLACEBOS, GROUPS = 32, 60, 5  # templates per language in data/bias/templates.json
OPTIONS = BiasOptions()


def _effects(group_association, group_familiarity=None, seed=0):
    """Groups against placebos whose association is template effect + noise (nats per token) and
    whose familiarity is about 2 nats per byte; groups cost 1 nat per byte unless told."""
    rng = np.random.default_rng(seed)
    group_association = np.asarray(group_association, float)
    templates = group_association.shape[1]
    template_effect = rng.normal(0, 1.0, templates)  # some endings are likelier after every term
    placebo_association = template_effect + rng.normal(0, 0.5, (PLACEBOS, templates))
    placebo_familiarity = 2.0 + rng.normal(0, 0.1, (PLACEBOS, templates))
    familiarity = np.ones_like(group_association) if group_familiarity is None else np.asarray(group_familiarity, float)
    names = [f"group {i}" for i in range(len(group_association))]
    measured = measure_groups(
        "en",
        ["dimension"] * len(names),
        names,
        template_effect + group_association,
        familiarity,
        placebo_association,
        placebo_familiarity,
        OPTIONS.min_familiarity_rank,
    )
    return decide_verdicts(measured, OPTIONS.max_association, OPTIONS.significance_level)


def _verdicts(effects):
    return [e.verdict for e in effects]


def test_known_groups_are_compared_with_each_other_and_a_consistent_negative_lean_is_flagged():
    """Every known term differs from unknown ones the same way (measured in test_bias_e2e: by
    1.3-1.5 nats per token): that shared offset flags no group; a group leaning negative beyond
    the others in every template is flagged, by the effect and the corrected sign test."""
    rng = np.random.default_rng(1)
    groups = 1.4 + rng.normal(0, 0.1, (GROUPS, TEMPLATES))
    assert _verdicts(_effects(groups)) == ["passed"] * GROUPS
    groups[2] += rng.uniform(0.2, 4.0, TEMPLATES)  # magnitudes as uneven as the planted e2e case
    effects = _effects(groups)
    assert _verdicts(effects) == ["passed", "passed", "flagged", "passed", "passed"]
    target = effects[2]
    assert target.effect > 2 * OPTIONS.max_association and target.sign_consistency == 1.0
    assert target.sign_p < OPTIONS.significance_level / 2 and target.familiarity_rank == 1.0


def _planted_like_graph_bf16(templates: int, leaning_negative: int, seed: int = 3) -> np.ndarray:
    """Five known groups; group 2 leans negative by 0.3-2 nats per token in `leaning_negative`
    templates and slightly positive in the rest: the pattern of the planted association a model
    trained in graph mode with bf16 learned (benchmarks/README.md, "Gate error rates": +0.90 nats
    per token, negative in 9 of 11 templates)."""
    rng = np.random.default_rng(seed)
    groups = 1.4 + rng.normal(0, 0.1, (GROUPS, templates))
    lean = np.full(templates, -0.4)
    lean[rng.choice(templates, leaning_negative, replace=False)] = rng.uniform(0.3, 2.0, leaning_negative)
    groups[2] += lean
    return groups


def test_a_large_lean_in_most_templates_is_flagged_with_the_bundled_number_of_templates():
    """Why the suite has 32 templates per language: 9 of 11 leaning negative is no evidence to a
    sign test corrected over 5 groups (p 0.16; the planted model passed), the same share of 32
    is (the corrected p far below alpha)."""
    few = _effects(_planted_like_graph_bf16(11, 9))[2]
    assert few.effect > 2 * OPTIONS.max_association and few.verdict == "passed" and few.sign_p > 0.1
    bundled = _effects(_planted_like_graph_bf16(TEMPLATES, 26))
    assert _verdicts(bundled) == ["passed", "passed", "flagged", "passed", "passed"]
    assert bundled[2].sign_p < OPTIONS.significance_level / 10


def test_a_large_lean_in_three_templates_is_not_flagged():
    """A mean effect far above the threshold that comes from three templates: the sign test, not
    the mean, decides whether templates agree."""
    groups = np.zeros((GROUPS, TEMPLATES))
    groups[0, :3] = 8.0
    groups[0, 3:] = -0.05
    target = _effects(groups)[0]
    assert target.effect > 2 * OPTIONS.max_association and target.verdict == "passed"


def test_a_consistent_but_negligible_lean_is_not_flagged():
    groups = np.zeros((GROUPS, TEMPLATES))
    groups[0] += 0.05
    target = _effects(groups)[0]
    assert target.sign_consistency == 1.0 and target.verdict == "passed"


def test_a_group_the_model_does_not_know_is_unmeasured_whatever_follows_it():
    """A term no likelier than the placebos (unseen in training) is no evidence about the group,
    even when the endings after it differ: it is reported, not flagged."""
    groups = np.zeros((GROUPS, TEMPLATES))
    groups[0] += 3.0
    familiarity = np.ones((GROUPS, TEMPLATES))
    familiarity[0] = 2.0
    effects = _effects(groups, familiarity)
    assert effects[0].verdict == "unmeasured" and 0.2 < effects[0].familiarity_rank < 0.8
    assert _verdicts(effects[1:]) == ["passed"] * (GROUPS - 1)


def test_a_positive_lean_is_reported_not_flagged():
    groups = np.zeros((GROUPS, TEMPLATES))
    groups[0] -= 2.0
    target = _effects(groups)[0]
    assert target.effect < -1 and target.sign_consistency == 1.0 and target.verdict == "passed"


def test_groups_that_differ_only_by_template_noise_are_rarely_flagged():
    """35 groups (the bundled suite's size) whose associations differ by template noise alone,
    large against the threshold: over 500 draws the corrected sign test refuses at most the 5%
    family-wise rate it promises (3.1% over 1,000 draws), not one in five."""
    refused = 0
    for seed in range(500):
        rng = np.random.default_rng(100 + seed)
        effects = _effects(rng.normal(0, 1.0, (35, TEMPLATES)), seed=seed)
        refused += any(e.verdict == "flagged" for e in effects)
    assert refused <= 25


def test_truncated_templates_are_left_out_and_without_placebos_no_group_is_measured():
    groups = np.zeros((GROUPS, TEMPLATES))
    groups[0, :6] = np.nan
    groups[0, 6:] = 1.0
    effects = _effects(groups)
    assert effects[0].templates == TEMPLATES - 6 and effects[0].templates_negative == TEMPLATES - 6
    placebos = np.full((PLACEBOS, 3), np.nan)  # nearly every placebo text was cut to fit the context
    placebos[:5] = 0.1
    cut = measure_groups(
        "zh",
        ["d"],
        ["g"],
        np.full((1, 3), 5.0),
        np.zeros((1, 3)),
        placebos,
        np.ones((PLACEBOS, 3)),
        OPTIONS.min_familiarity_rank,
    )
    assert [(e.verdict, e.templates) for e in cut] == [("unmeasured", 0)]


def test_sign_test_and_robust_z():
    assert sign_test(32, 32) == 0.5**32 and sign_test(0, 0) == 1.0 and sign_test(16, 32) > 0.5
    reference = np.array([0.0, 0.1, -0.1, 0.05, -0.05, 50.0])
    assert abs(robust_z(np.array([0.0]), reference)[0]) < 0.5
    assert robust_z(np.array([1.0]), np.zeros(5))[0] == 1000.0


def test_without_the_placebos_endings_known_groups_get_the_same_effects_and_verdicts():
    """The placebos' endings are a known group's reference only when it has fewer than two known
    others: with three or more known, leaving them unscored changes nothing but the reported z."""
    rng = np.random.default_rng(3)
    groups = 1.4 + rng.normal(0, 0.1, (GROUPS, TEMPLATES))
    groups[2] += rng.uniform(0.2, 4.0, TEMPLATES)
    placebo_familiarity = 2.0 + rng.normal(0, 0.1, (PLACEBOS, TEMPLATES))
    placebo_association = rng.normal(0, 0.5, (PLACEBOS, TEMPLATES))
    names = [f"group {i}" for i in range(GROUPS)]
    arguments = ("en", ["d"] * GROUPS, names, groups, np.ones_like(groups))
    scored = decide_verdicts(
        measure_groups(*arguments, placebo_association, placebo_familiarity, OPTIONS.min_familiarity_rank),
        OPTIONS.max_association,
        OPTIONS.significance_level,
    )
    unscored = decide_verdicts(
        measure_groups(*arguments, None, placebo_familiarity, OPTIONS.min_familiarity_rank),
        OPTIONS.max_association,
        OPTIONS.significance_level,
    )
    assert _verdicts(unscored) == _verdicts(scored) and "flagged" in _verdicts(unscored)
    assert [e.effect for e in unscored] == [e.effect for e in scored]
    assert all(e.z is None for e in unscored) and all(np.isfinite(e.z) for e in scored)


def test_a_known_group_with_fewer_than_two_known_others_needs_the_placebos_endings():
    assert [
        needs_placebo_endings(np.array(known))
        for known in ([False] * 5, [True] + [False] * 4, [True, True, False], [True, True, True])
    ] == [False, True, True, False]
    familiar, unfamiliar = np.ones((1, TEMPLATES)), np.full((1, TEMPLATES), 3.0)
    with pytest.raises(ValueError, match="needs the placebos' endings"):
        measure_groups(
            "en",
            ["d", "d"],
            ["a", "b"],
            np.zeros((2, TEMPLATES)),
            np.vstack([familiar, unfamiliar]),
            None,
            np.full((PLACEBOS, TEMPLATES), 2.0),
            OPTIONS.min_familiarity_rank,
        )


class _CountingClient:
    """Scores continuations as a model that knows every group term: a group term costs 1 nat per
    byte, a placebo 3, an ending a fixed pseudo-random NLL per (prefix, ending). Counts the rows."""

    def __init__(self, group_terms, placebos):
        self.group_terms, self.placebos, self.rows = set(group_terms), set(placebos), 0

    def _nll(self, prefix: str, continuation: str) -> float:
        size = len(continuation.encode("utf-8"))
        if continuation.strip() in self.group_terms:
            return 1.0 * size
        if continuation.strip() in self.placebos:
            return 3.0 * size
        return float(np.random.default_rng(zlib.crc32(f"{prefix}|{continuation}".encode("utf-8"))).uniform(1, 4))

    def score_continuation(self, prefixes, continuations):
        self.rows += len(prefixes)
        nll = [self._nll(prefix, continuation) for prefix, continuation in zip(prefixes, continuations)]
        return ContinuationScores(np.asarray(nll), np.ones(len(nll), np.int64), np.zeros(len(nll), bool))


def test_the_placebos_endings_are_scored_only_when_asked_or_needed():
    """Bundled suite, a model knowing every group: the groups' three texts and the placebos' term
    per template, not the placebos' endings (half the rows), unless bias.placebo_endings."""
    suite = load_suite(OPTIONS.templates_file, OPTIONS.groups_file, OPTIONS.placebos_file)
    terms = {term for part in suite.values() for values in part["groups"].values() for term in values}
    counts, results = {}, {}
    for placebo_endings in (False, True):
        client = _CountingClient(terms, [term for part in suite.values() for term in part["placebos"]])
        effects, _, scored = measure_associations(
            client, suite, OPTIONS.model_copy(update={"placebo_endings": placebo_endings})
        )
        assert scored == client.rows
        counts[placebo_endings], results[placebo_endings] = client.rows, effects
    groups = sum(len(t) for part in suite.values() for t in part["groups"].values())
    placebos = sum(len(part["placebos"]) for part in suite.values())
    assert counts[False] == TEMPLATES * (3 * groups + placebos)
    assert counts[True] == counts[False] + TEMPLATES * 2 * placebos
    assert [(e.verdict, e.effect) for e in results[False]] == [(e.verdict, e.effect) for e in results[True]]
    assert all(e.verdict != "unmeasured" for e in results[False])
