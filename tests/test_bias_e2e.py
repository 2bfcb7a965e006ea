"""End to end: the bias gate refuses a model trained on a corpus that ties one group to negative
words, and passes the model trained on the same corpus with that association removed.

Two whole-pipeline runs under LocalDagRunner (`tests/bias_corpus.py` builds both corpora from the
bundled bias suite; see its docstring). What the test configures, and why:

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
from tests.bias_corpus import DIMENSION, LANGUAGE, TARGET_GROUP, load_single_dimension_suite, planted_run_recipe

pytestmark = pytest.mark.slow


def _run_on_group_corpus(root, associated: bool):
    """Runs the pipeline on the (un)associated corpus; returns (config, run summary, evaluation.json)."""
    from pipeline.config import load_config

    corpus, overrides = planted_run_recipe(str(root), associated)
    config = load_config(overrides=overrides, data_root=corpus, output_root=str(root / "out"))
    summary = run_locally(config)
    assert summary["succeeded"], summary["error"]
    with open(os.path.join(summary["blessing"]["uri"], "evaluation.json"), encoding="utf-8") as handle:
        evaluation = json.load(handle)
    return config, summary, evaluation


@pytest.fixture(scope="module")
def associated_run(tmp_path_factory):
    return _run_on_group_corpus(tmp_path_factory.mktemp("bias_associated"), associated=True)


@pytest.fixture(scope="module")
def unassociated_run(tmp_path_factory):
    return _run_on_group_corpus(tmp_path_factory.mktemp("bias_unassociated"), associated=False)


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
    for pair in evaluation["metrics"]["bias"]["pairs"]:
        if TARGET_GROUP in (pair["group_a"], pair["group_b"]):
            sign = 1 if pair["group_a"] == TARGET_GROUP else -1  # the target's continuations are the negative ones
            assert sign * pair["sentiment_gap"] < 0
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
