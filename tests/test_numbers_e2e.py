"""End to end: numbers survive tokenization (issue 48).

A support task whose replies repeat the ticket's five-digit order number (tests/number_task.py),
trained from scratch with the defaults, twice into one output root:

1. with the tokenizer of before (`tokenizer.split_digits=false`: digits merge into pieces such as
   `▁504` `40`): the production model of an existing deployment, blessed and pushed;
2. with the defaults and `tokenizer.policy=learn`, as a user moving that deployment to the new
   tokenizer would run it: a tokenizer that splits digits is learned (where `auto` would have
   reused the production one), and the Evaluator compares the new model with production in bits
   per byte, the unit that survives a change of tokenizer.

Then 200 held-out tickets, whose order numbers were never trained on, are asked through each
model's `chat` signature (greedy). Measured (benchmarks/README.md, "Numbers and the tokenizer's
piece rules", AMD EPYC, 2 vCPUs): 99.5% of the new model's replies carry the right number (one
digit wrong in one reply) against 0% for the old tokenizer's, which answers with numbers it was
trained on or fragments of them. The assertions leave wide margins: at least 90% for the new
tokenizer, and at least 20 points better than the old one.

Marked slow (two whole runs: 26 minutes on a machine loaded with other work, about 8 alone); CI
runs it.
"""

import json
import os

import pytest
from tfx.utils import path_utils

from pipeline.local_runner import run_locally
from tests import number_task

pytestmark = pytest.mark.slow

EVALUATION_OVERRIDES = [
    # As FAST_OVERRIDES: these runs are not about the bias gate (tests/test_bias_e2e.py is).
    "evaluator.bias.templates_per_group=6",
    "evaluator.replies.conversations=24",
    "evaluator.replies.max_new_tokens=32",
    "evaluator.instruction_following.max_new_tokens=16",
]
ASKED = 200


def _evaluation(summary):
    with open(os.path.join(summary["blessing"]["uri"], "evaluation.json"), encoding="utf-8") as handle:
        return json.load(handle)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """(old run's summary, new run's summary, the config), both runs into one output root."""
    from pipeline.config import load_config

    root = tmp_path_factory.mktemp("numbers")
    data = number_task.write_conversations(str(root / "data"), 2_000)

    def config(*overrides):
        return load_config(
            overrides=list(number_task.TRAIN_OVERRIDES) + EVALUATION_OVERRIDES + list(overrides),
            data_root=data,
            output_root=str(root / "out"),
        )

    old = run_locally(config("tokenizer.split_digits=false"))
    new = run_locally(config("tokenizer.policy=learn"))
    return old, new


def test_the_old_tokenizer_merged_digits_and_its_model_went_to_production(runs):
    old, _ = runs
    assert old["succeeded"], old["error"]
    assert old["tokenizer"]["source"] == "learned"
    assert old["tokenizer"]["number_splitting"]["merges_digits"] is True
    assert old["push"]["pushed"], old["push"]


def test_learning_the_new_tokenizer_splits_digits_and_compares_with_production_in_bits_per_byte(runs):
    old, new = runs
    assert new["succeeded"], new["error"]
    splitting = new["tokenizer"]["number_splitting"]
    assert new["tokenizer"]["source"] == "learned" and splitting["merges_digits"] is False, splitting
    evaluation = _evaluation(new)
    quality = evaluation["metrics"]["quality"]
    assert evaluation["baseline"]["path"] and quality["baseline_bits_per_byte"] is not None, evaluation["baseline"]
    assert quality["baseline_bits_per_byte"] == pytest.approx(_evaluation(old)["metrics"]["quality"]["bits_per_byte"])
    change = next(gate for gate in evaluation["gates"] if gate["name"] == "quality.bits_per_byte_change")
    assert change["value"] == pytest.approx(quality["bits_per_byte"] / quality["baseline_bits_per_byte"] - 1)


def test_the_model_copies_held_out_numbers_and_a_tokenizer_that_merges_digits_does_measurably_worse(runs):
    old, new = runs
    answered = {
        name: number_task.answer_held_out(path_utils.serving_model_path(summary["trained_model"]), ASKED)
        for name, summary in (("old", old), ("new", new))
    }
    assert answered["new"]["right_number"] >= 0.9, answered["new"]
    assert answered["new"]["right_number"] >= answered["old"]["right_number"] + 0.2, answered
