"""Evaluating chat models (issue 39): reply metrics with the established packages, the
non-regression and stop-rate gates both ways, safety probes through the template, rule-checked
instructions, and the whole Evaluator on a conversation model with its report.

The models are purpose-built test doubles (tests/programmed_model.py `ProgrammedChatModel`, as the
other gate tests use): each gate must refuse a model that reliably does the bad thing, which a
briefly trained network does not."""

import json

import numpy as np
import pytest
import tensorflow as tf

from components.evaluator.metrics import reply_metrics
from components.evaluator.options import EvaluatorOptions, ReplyOptions
from components.evaluator.probes import chat_eval, instruction_following
from components.evaluator.probes.chat_probes import ChatProbeClient, refusal_rate
from components.model_client import ModelClient
from components.trainer.serving import signatures
from tests.gate_margins import assert_passes_with_margin, assert_refused_with_margin
from tests.programmed_model import export_programmed_chat_model

REPLIES = {
    "sync": "Turn sync off and on again under Account, then wait a minute.",
    "export": "Choose File, then Export as PDF; blank pages mean an outdated app.",
    "search": "Rebuild the search index from the Help menu.",
    "tags": "Drag a tag onto the note, or type a hash sign before the word.",
    "trash": "Deleted notes stay thirty days in the bin, where Restore brings them back.",
    "sharing": "Invite people by e-mail from the notebook's menu; they need no account.",
    "themes": "Appearance offers light, sepia and dark looks.",
    "backup": "Weekly archives are kept; download one from the web dashboard.",
    "login": "Reset your password from the sign-in page, the link expires within an hour.",
    "attachments": "Files up to 200 megabytes attach by dropping them into a note.",
    "reminders": "Long-press a note and pick a date to get notified.",
    "offline mode": "Mark notebooks for offline use before you travel.",
    "printing": "Printing works through the system dialog after Preview.",
    "templates": "Save any note as a template with the star button.",
    "shortcuts": "Keyboard combinations are listed under Preferences, Keys.",
    "widgets": "Add our widget from the home screen gallery on your phone.",
}
TOPICS = list(REPLIES)
CONVERSATIONS = [
    [("user", f"Hi, I have a problem with {topic} in Lumen Notes. Ticket {index}."), ("assistant", REPLIES[topic])]
    for index, topic in enumerate(TOPICS)
]


def _rules(shift: int = 0):
    """Per conversation: its user message -> the reference reply of conversation (i + shift)."""
    return [
        (
            f"Hi, I have a problem with {TOPICS[i]} in Lumen Notes. Ticket {i}\\.",
            CONVERSATIONS[(i + shift) % len(CONVERSATIONS)][1][1],
        )
        for i in range(len(CONVERSATIONS))
    ]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("chat_models")
    clean = "Thanks for your message."

    def client(name, **kwargs):
        return ModelClient(
            export_programmed_chat_model(str(root / name), clean, **kwargs), 8, required=signatures.CHAT_SIGNATURES
        )

    return {
        "tuned": client("tuned", default_reply="I can help with that.", replies=_rules()),
        "base": client("base", default_reply="Thanks for writing. We will look into it."),
        "shuffled": client("shuffled", default_reply="I can help with that.", replies=_rules(shift=5)),
        "never_stops": client("never_stops", default_reply="I can help with that.", replies=_rules(), stops=False),
        "abusive_replies": client("abusive_replies", default_reply="Shut up, you idiot. I will kill you, loser."),
    }


def test_metric_packages_score_hand_made_pairs_cjk_included():
    assert reply_metrics.score_pair("Open Settings.", " open settings. ") == pytest.approx(
        {
            "exact_match": 1.0,
            "rouge_l": 1.0,
            "chrf": reply_metrics.score_pair("Open Settings.", "open settings.")["chrf"],
        }
    )
    assert reply_metrics.score_pair("the cat sat", "the cat sat down")["rouge_l"] == pytest.approx(2 * 3 / (3 + 4))
    chinese = reply_metrics.score_pair("请在设置中打开同步", "请在设置中检查同步")
    assert chinese["rouge_l"] == pytest.approx(2 * 7 / (9 + 9))  # 7 of 9 characters in common, in order
    from rouge_score import rouge_scorer  # what the package's own tokenizer makes of it: nothing

    assert (
        rouge_scorer.RougeScorer(["rougeL"]).score("请在设置中检查同步", "请在设置中打开同步")["rougeL"].fmeasure == 0
    )
    assert 0 < chinese["chrf"] < 1 and reply_metrics.score_pair("完全一样", "完全一样")["chrf"] == pytest.approx(1.0)
    assert reply_metrics.score_pair("", "something")["rouge_l"] == 0.0


def test_the_paired_bootstrap_interval_covers_a_known_difference():
    rng = np.random.default_rng(1)
    baseline = rng.uniform(0, 1, 200)
    candidate = baseline + 0.1 + rng.normal(0, 0.05, 200)
    comparison = reply_metrics.compare("rouge_l", candidate, baseline)
    assert comparison.low < 0.1 < comparison.high and comparison.high - comparison.low < 0.05
    assert (comparison.wins, comparison.ties, comparison.losses) == (
        int(np.sum(candidate > baseline)),
        0,
        int(np.sum(candidate < baseline)),
    )


def test_a_model_tuned_on_the_task_passes_the_non_regression_gate_against_its_base(models):
    result = chat_eval.evaluate_replies(models["tuned"], models["base"], CONVERSATIONS, ReplyOptions(), "")
    gate = next(g for g in result.gates if g.name == "quality.reply_rouge_l")
    assert gate.passed and not gate.skipped, gate.reason
    assert_passes_with_margin(gate.to_dict())
    comparison = result.metrics["comparison"]["rouge_l"]
    assert comparison["wins"] == len(CONVERSATIONS) and comparison["low"] > 0.3
    assert result.samples[0]["candidate"] == CONVERSATIONS[0][1][1]


def test_a_model_whose_replies_were_shuffled_between_conversations_is_refused(models):
    result = chat_eval.evaluate_replies(models["shuffled"], models["tuned"], CONVERSATIONS, ReplyOptions(), "")
    gate = next(g for g in result.gates if g.name == "quality.reply_rouge_l")
    assert not gate.passed, gate.reason
    assert_refused_with_margin(gate.to_dict())
    comparison = result.metrics["comparison"]["rouge_l"]
    assert comparison["high"] < -0.3 and comparison["losses"] == len(CONVERSATIONS)


def test_without_a_baseline_the_non_regression_gate_is_skipped_with_the_reason(models):
    result = chat_eval.evaluate_replies(models["tuned"], None, CONVERSATIONS, ReplyOptions(), "first run")
    gate = next(g for g in result.gates if g.name == "quality.reply_rouge_l")
    assert gate.skipped and "first run" in gate.reason


def test_the_stop_rate_gate_refuses_a_model_that_never_ends_its_reply(models):
    options = ReplyOptions()
    stops = chat_eval.evaluate_replies(models["tuned"], None, CONVERSATIONS, options, "")
    never = chat_eval.evaluate_replies(models["never_stops"], None, CONVERSATIONS, options, "")
    passing = next(g for g in stops.gates if g.name == "quality.stop_rate")
    refused = next(g for g in never.gates if g.name == "quality.stop_rate")
    assert passing.passed and passing.value == 1.0
    assert not refused.passed and refused.value == 0.0
    assert_refused_with_margin(refused.to_dict())


def test_safety_probes_through_the_template_reach_the_replies_raw_text_would_not(models):
    from components.evaluator.probes import safety
    from components.evaluator.scorers import load_scorer

    config = EvaluatorOptions().safety
    scorer = load_scorer(config.scorer, config)
    as_raw_text = safety.evaluate_safety(models["abusive_replies"], scorer, config)
    as_user_turns = safety.evaluate_safety(ChatProbeClient(models["abusive_replies"]), scorer, config)
    raw = {g.name: g for g in as_raw_text.gates}
    templated = {g.name: g for g in as_user_turns.gates}
    assert raw["safety.toxic_fraction"].passed  # its raw continuations are polite
    assert not templated["safety.toxic_fraction"].passed  # its replies are not
    assert_refused_with_margin(templated["safety.toxic_fraction"].to_dict())


def test_refusals_are_counted():
    assert refusal_rate(["I'm sorry, I can't help with that.", "Open Settings.", "I cannot do that", "Sure."]) == 0.5


def test_instructions_are_checked_by_rules():
    check = instruction_following.Check
    followed = instruction_following.followed
    assert followed(check("", "max_words", 3), "one two three") and not followed(
        check("", "max_words", 2), "one two three"
    )
    assert followed(check("", "include_keyword", "Settings"), "open settings now")
    assert not followed(check("", "include_keyword", "set"), "open settings now")  # a word, not a substring
    assert followed(check("", "json_object", ""), '```json\n{"a": 1}\n```') and not followed(
        check("", "json_object", ""), "[1]"
    )
    assert followed(check("", "forbidden_word", "delete"), "restore it from the trash")
    assert not followed(check("", "forbidden_word", "delete"), "Do not Delete it")
    checks = instruction_following.load_checks(EvaluatorOptions().instruction_following.prompts_file)
    assert {c.constraint for c in checks} == set(instruction_following.RULES) and len(checks) >= 16


def test_a_model_that_follows_the_bundled_instructions_scores_them_all(tmp_path):
    options = EvaluatorOptions().instruction_following
    checks = instruction_following.load_checks(options.prompts_file)
    answers = {
        "max_words": "Open Settings.",
        "include_keyword": None,
        "json_object": '{"answer": "Open Settings."}',
        "forbidden_word": "Open Settings.",
    }
    rules = []
    for c in checks:
        text = answers[c.constraint] or f"Open Settings and use {c.value}."
        rules.append((_regex_literal(c.prompt), text))
    good = ModelClient(
        export_programmed_chat_model(str(tmp_path / "good"), "x", "x", replies=rules),
        8,
        required=signatures.CHAT_SIGNATURES,
    )
    poor = ModelClient(
        export_programmed_chat_model(
            str(tmp_path / "poor"),
            "x",
            "Click delete, then your dark password settings, and many more words than any limit allows here.",
        ),
        8,
        required=signatures.CHAT_SIGNATURES,
    )
    assert instruction_following.evaluate_instruction_following(good, options).metrics["strict_accuracy"] == 1.0
    gated = options.model_copy(update={"min_accuracy": 0.5})
    result = instruction_following.evaluate_instruction_following(poor, gated)
    assert result.metrics["strict_accuracy"] < 0.5 and not result.gates[0].passed


def _regex_literal(text: str) -> str:
    import re

    return re.escape(text)


def _write_conversation_examples(path, conversations):
    with tf.io.TFRecordWriter(str(path), options="GZIP") as writer:
        for conversation in conversations:
            feature = {
                "roles": tf.train.Feature(bytes_list=tf.train.BytesList(value=[r.encode() for r, _ in conversation])),
                "contents": tf.train.Feature(
                    bytes_list=tf.train.BytesList(value=[c.encode() for _, c in conversation])
                ),
                "text": tf.train.Feature(
                    bytes_list=tf.train.BytesList(value=["\n\n".join(c for _, c in conversation).encode()])
                ),
            }
            writer.write(tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString())


def test_the_evaluator_judges_a_conversation_model_on_its_replies_and_reports_them(tmp_path):
    """evaluate_candidate on a conversation model (transformed examples with a loss mask): quality
    on the replies, the reply and stop-rate gates, safety and bias through the template, rule
    checks, and a report with the conversations side by side."""
    from components.evaluator.evaluation import EvaluationInputs, evaluate_candidate
    from components.evaluator.report import render_report
    from tests.test_packing import SPEC, _write

    candidate = export_programmed_chat_model(
        str(tmp_path / "candidate"), "Thanks for your message.", "I can help.", replies=_rules()
    )
    raw = tmp_path / "raw.gz"
    _write_conversation_examples(raw, CONVERSATIONS)
    tokens = _write(tmp_path / "tokens.gz", [([5, 6, 7, 8, 9], [0, 0, 1, 1, 1]), ([5, 6, 9, 9], [0, 1, 1, 1])])
    config = EvaluatorOptions(
        bias={"templates_per_group": 2}, safety={"prompts_per_category": 1, "completions_per_prompt": 1}
    )
    evaluation = evaluate_candidate(
        EvaluationInputs(
            candidate,
            tokens,
            SPEC,
            config,
            train_files=[str(raw)],
            train_token_files=[tokens],
            raw_eval_files=[str(raw)],
        )
    )
    result = evaluation.to_dict()
    assert result["metrics"]["quality"]["measured_on"].startswith("replies")
    assert result["metrics"]["replies"]["candidate"]["rouge_l"] == pytest.approx(1.0)
    names = {g["name"]: g for g in result["gates"]}
    assert names["quality.stop_rate"]["verdict"] == "PASS" and names["quality.reply_rouge_l"]["verdict"] == "SKIPPED"
    assert "instruction_following" in result["metrics"] and "refusal_rate" in result["metrics"]["safety"]
    assert set(result["seconds"]) >= {"quality", "replies", "instruction_following", "safety", "bias"}
    html = render_report(result, candidate)
    assert "Sampled conversations" in html and CONVERSATIONS[0][1][1] in html
    json.dumps(result)
