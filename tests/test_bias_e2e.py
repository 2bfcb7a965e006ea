"""End to end: the bias gate refuses a model trained on a corpus that ties one group to negative
words, and passes the model trained on the same corpus with that association removed; and a model
trained briefly on a small corpus naming no group (issue 49's noise model) is blessed on its bias
gates, its group pairs judged against placebo pairs.

Three whole-pipeline runs under LocalDagRunner (`tests/bias_corpus.py` builds the corpora; see its
docstring). What the planted-association runs configure, and why:

- The suite the Evaluator runs is the bundled English religion suite only (a copy under the test's
  tmp dir, `evaluator.bias.templates_file/groups_file`), without the template whose negative
  ending the safety lexicon flags: the corpora cover one dimension (five groups; ten pairs for
  the sentiment and unsafe-rate gates). The target group is an arbitrary choice.
- 1000 training steps at learning rate 0.01 on the fast test model, float32 in graph mode
  (tests/bias_corpus.py says why, and what made the unassociated model sit near the gate before).
- Bias continuations are cut to 8 new tokens (`evaluator.bias.max_new_tokens`), about the length
  of the suite's endings, so their sentiment is that of the ending the model chose, not of the
  next, unrelated training sentence.
- Every other gate runs with its default settings, so the unassociated model is blessed and
  pushed only if all of them pass, the quality gate (gain over a unigram model) included.

Measured with benchmarks/gate_calibration.py (seeds 42, 1 and 2, native AVX-512/AMX and oneDNN capped
at AVX2, on a 2-vCPU Xeon): associated corpus, the target's effect +2.9 to +3.7 nats per token
(threshold 0.25), negative in 30-31 of 31 templates (Bonferroni-corrected sign-test p <= 7.5e-08),
the only group flagged; unassociated corpus, the most negative-leaning group at +0.006 nats per
token or less (corrected p >= 0.18), every group measured, blessed and pushed (benchmarks/README.md). The assertions keep a margin: the gate's value at least
twice its threshold and the target's p at most half the significance level; in the unassociated
model the target's effect at most half the threshold, and every group either that far below the
threshold or with p at least twice alpha.
"""

import json
import os

import pytest

from pipeline.local_runner import run_locally
from tests.bias_corpus import (
    DIMENSION,
    LANGUAGE,
    TARGET_GROUP,
    load_single_dimension_suite,
    noise_run_recipe,
    planted_run_recipe,
)

pytestmark = pytest.mark.slow


def _run(root, recipe):
    """Runs the pipeline on `recipe`'s (data root, overrides); returns (config, run summary, evaluation.json)."""
    from pipeline.config import load_config

    corpus, overrides = recipe
    config = load_config(overrides=overrides, data_root=corpus, output_root=str(root / "out"))
    summary = run_locally(config)
    assert summary["succeeded"], summary["error"]
    with open(os.path.join(summary["blessing"]["uri"], "evaluation.json"), encoding="utf-8") as handle:
        evaluation = json.load(handle)
    return config, summary, evaluation


@pytest.fixture(scope="module")
def associated_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("bias_associated")
    return _run(root, planted_run_recipe(str(root), associated=True))


@pytest.fixture(scope="module")
def unassociated_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("bias_unassociated")
    return _run(root, planted_run_recipe(str(root), associated=False))


@pytest.fixture(scope="module")
def noise_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("bias_noise")
    return _run(root, noise_run_recipe(str(root)))


def _gates(summary):
    return {gate["name"]: gate for gate in summary["blessing"]["gates"]}


def _effects(evaluation):
    return {e["group"]: e for e in evaluation["metrics"]["bias"]["group_effects"]}


def _effect_table(evaluation) -> str:
    """Every group's effect against the placebos, for failure messages."""
    return "\n".join(
        f"{e['group']}: effect {e['effect']:+.3f} nats/token, negative in {e['templates_negative']} of "
        f"{e['templates']} templates (corrected p {e['sign_p']:.3g}), z {e['z']}, likelier than "
        f"{e['familiarity_rank']:.0%} of placebos, {e['verdict']}"
        for e in evaluation["metrics"]["bias"]["group_effects"]
    )


def test_corpus_tying_one_group_to_negative_endings_fails_the_bias_gate_and_nothing_is_pushed(associated_run):
    config, summary, evaluation = associated_run
    gate = _gates(summary)["bias.association"]
    table = _effect_table(evaluation)
    assert gate["verdict"] == "FAIL" and gate["value"] >= 2 * gate["threshold"], table
    effects = _effects(evaluation)
    assert {g for g, e in effects.items() if e["verdict"] == "flagged"} == {TARGET_GROUP}, table
    assert effects[TARGET_GROUP]["sign_p"] <= config.evaluator.bias.significance_level / 2, table
    assert TARGET_GROUP in gate["reason"]
    # The target's sampled continuations are the negative endings, beyond the placebo pairs' gaps:
    # its pairs, and only they, are flagged. Measured (benchmarks/README.md, graph-float32): z +15.2
    # to +15.9 at this seed (42; placebo pairs' robust sd 0.055), +10.2 to +10.6 and +5.1 to +5.2
    # at seeds 2 and 1 (sd 0.087 and 0.179), against max_placebo_z 4.
    bias = config.evaluator.bias
    for pair in evaluation["metrics"]["bias"]["pairs"]:
        target_pair = TARGET_GROUP in (pair["group_a"], pair["group_b"])
        assert pair["sentiment_flagged"] == target_pair, pair
        if target_pair:
            sign = 1 if pair["group_a"] == TARGET_GROUP else -1
            assert sign * pair["sentiment_gap"] < 0 and abs(pair["sentiment_placebo_z"]) > bias.max_placebo_z
    assert _gates(summary)["bias.sentiment_gap"]["verdict"] == "FAIL"
    assert summary["blessing"]["blessed"] is False
    assert summary["push"]["pushed"] is False and "bias.association" in summary["push"]["reason"]
    assert not os.path.exists(os.path.join(config.layout.serving_dir, "1"))
    with open(config.layout.summary_path, encoding="utf-8") as handle:
        recorded = json.load(handle)
    assert recorded["blessing"]["gates"] == summary["blessing"]["gates"] and recorded["push"] == summary["push"]


def test_same_corpus_without_the_association_passes_the_bias_gate_and_is_pushed(unassociated_run):
    config, summary, evaluation = unassociated_run
    gates = _gates(summary)
    table = _effect_table(evaluation)
    assert {name: gates[name]["verdict"] for name in gates if name.startswith("bias.")} == {
        "bias.association": "PASS",
        "bias.unmeasured_groups": "PASS",
        "bias.sentiment_gap": "PASS",
        "bias.unsafe_rate_ratio": "PASS",
    }, table
    effects = _effects(evaluation)
    assert len(effects) == len(load_single_dimension_suite(LANGUAGE, DIMENSION)[1])
    # Every group is known (the corpus names each one often) and leans no way the gate counts.
    assert all(e["verdict"] == "passed" for e in effects.values()), table
    # A group is flagged only when its effect exceeds the threshold AND its corrected p is below
    # alpha; each group keeps a margin of two on at least one of the two.
    bias = config.evaluator.bias
    assert effects[TARGET_GROUP]["effect"] <= bias.max_association / 2, table
    assert all(
        e["effect"] <= bias.max_association / 2 or e["sign_p"] >= 2 * bias.significance_level for e in effects.values()
    ), table
    assert not any(p["sentiment_flagged"] or p["unsafe_flagged"] for p in evaluation["metrics"]["bias"]["pairs"])
    assert summary["blessing"]["blessed"], summary["blessing"]["reason"]
    quality = gates["quality.gain_over_unigram"]  # a model that learned its corpus beats a unigram model of it
    assert quality["verdict"] == "PASS" and quality["value"] >= 2 * quality["threshold"], quality["reason"]
    assert summary["push"]["pushed"] and os.path.exists(os.path.join(config.layout.serving_dir, "1", "saved_model.pb"))


def _pair_margins(pair, bias) -> dict:
    """How far a group pair is from being flagged on each condition of each gate, as factors (a
    pair is flagged only when all three of a gate are on the wrong side)."""
    return {
        "sentiment": (
            bias.max_sentiment_gap / max(abs(pair["sentiment_gap"]), 1e-9),
            pair["sentiment_q_value"] / bias.significance_level,
            bias.max_placebo_z / max(abs(pair["sentiment_placebo_z"]), 1e-9),
        ),
        "unsafe": (
            (1 - bias.min_unsafe_rate_ratio) / max(1 - pair["unsafe_rate_ratio"], 1e-9),
            pair["unsafe_q_value"] / bias.significance_level,
            bias.max_placebo_z / max(abs(pair["unsafe_placebo_z"]), 1e-9),
        ),
    }


def test_a_short_trained_model_on_a_corpus_naming_no_group_is_blessed_on_its_bias_gates(noise_run):
    """The noise model of issue 49 (tests/bias_corpus.py NOISE_OVERRIDES): group pairs differ as
    any two terms do, and the placebo pairs show it, so no pair is flagged. Every pair keeps a
    margin of two on at least one condition of each gate (gap, corrected p, z against the placebo pairs)."""
    config, summary, evaluation = noise_run
    gates = _gates(summary)
    assert {name: gates[name]["verdict"] for name in gates if name.startswith("bias.")} == {
        "bias.association": "PASS",
        "bias.unmeasured_groups": "PASS",
        "bias.sentiment_gap": "PASS",
        "bias.unsafe_rate_ratio": "PASS",
    }, [gates[name]["reason"] for name in gates if name.startswith("bias.")]
    bias, metrics = config.evaluator.bias, evaluation["metrics"]["bias"]
    for pair in metrics["pairs"]:
        for gate, margins in _pair_margins(pair, bias).items():
            assert max(margins) >= 2, (gate, pair)
    references = metrics["placebo_pairs"]
    assert {language: r["pairs"] for language, r in references.items()} == {"en": 28, "zh": 28}
    assert "placebo pairs en: 28, robust sd" in gates["bias.sentiment_gap"]["reason"]
    assert summary["blessing"]["blessed"], summary["blessing"]["reason"]
