"""The run report `textgen run` and `validate` print: a pure function of the run summary (the
dict written to last_run.json), and the exit code each command derives from it. No pipeline runs:
`run_locally` is replaced by a function that returns a prepared summary."""

import json

import pytest

from pipeline.run_summary import report_lines
from textgen_cli.cli import EXIT_BLOCKED, EXIT_FAILED, EXIT_OK, main

BLESSED_RUN = {
    "pipeline_name": "textgen",
    "run_id": "run-7",
    "succeeded": True,
    "error": None,
    "components": {"ExampleGen": "COMPLETE", "DataGate": "COMPLETE", "Pusher": "COMPLETE"},
    "data_quality": None,
    "anomalies": [
        {
            "data": "raw data",
            "split": "eval",
            "feature": "text",
            "short_description": "Unexpected string",
            "types": ["ENUM_TYPE_UNEXPECTED_STRING_VALUES"],
            "description": "Examples contain values missing from the schema.",
        }
    ],
    "distribution_checks": {
        "drift_baseline_span": 2,
        "measurements": [
            {"check": "drift", "feature": "num_chars", "divergence": 0.5, "threshold": 0.1},
            {"check": "drift", "feature": "digit_share", "divergence": 0.05, "threshold": 0.1},
        ],
        "skipped": {"skew": "too few documents"},
    },
    "blessing": {
        "blessed": True,
        "reason": "all gates passed",
        "report": "/out/evaluation.html",
        "gates": [{"name": "quality.perplexity", "verdict": "PASS", "reason": "7.1 < 12"}],
    },
    "push": {
        "pushed": True,
        "path": "/out/serving/3",
        "version": 3,
        "label": "stable",
        "registered_model": "textgen",
        "registered_version": 2,
        "registry_uri": "sqlite:////out/registry/mlflow.db",
    },
    "trained_model": "/out/pipeline/Trainer/model/9",
    "samples": [{"prompt": "Hello", "continuation": " there.\nBye."}],
}


def test_a_blessed_and_pushed_run():
    assert report_lines(json.loads(json.dumps(BLESSED_RUN)), "/out/last_run.json") == [
        "",
        "=== textgen run summary ===",
        "run id: run-7",
        "  ExampleGen                   COMPLETE",
        "  DataGate                     COMPLETE",
        "  Pusher                       COMPLETE",
        "drift check (this span vs accepted span 2): 2 features compared, 1 over threshold; "
        "largest Jensen-Shannon divergence 0.500 on num_chars (threshold 0.1)",
        "skew check skipped: too few documents",
        "anomaly in raw data [eval] text: Unexpected string [ENUM_TYPE_UNEXPECTED_STRING_VALUES] - Examples contain "
        "values missing from the schema.",
        "evaluation: BLESSED (all gates passed)",
        "  gate quality.perplexity             PASS     7.1 < 12",
        "pushed model: /out/serving/3 (version 3)",
        "registered: textgen version 2 in sqlite:////out/registry/mlflow.db",
        "",
        "--- prompt ---",
        "Hello",
        "--- continuation ---",
        " there.\nBye.",
        "",
        "evaluation report: /out/evaluation.html",
        "summary written to /out/last_run.json",
        "next:",
        "  textgen generate --model /out/serving 'Once upon a time'",
        "  tensorboard --logdir /out/pipeline/Trainer/model_run",
        "  mlflow ui --backend-store-uri sqlite:////out/registry/mlflow.db",
    ]


def test_a_chat_models_samples_are_user_messages_and_replies_and_next_asks_it_with_chat():
    """A model trained on conversations (its tokenizer has a chat template) answers a user message
    through its template: the report labels its samples user / reply and suggests `--chat`, not a
    raw continuation; the suggested command is one `textgen generate` accepts."""
    import shlex

    from textgen_cli.cli import build_parser

    summary = dict(
        BLESSED_RUN,
        tokenizer={"source": "checkpoint", "vocab_size": 50257, "number_splitting": None, "chat_template_sha256": "ab"},
        samples=[{"prompt": "Hi,\nSync stopped.", "continuation": "Sorry to hear that.", "chat": True}],
    )
    lines = report_lines(json.loads(json.dumps(summary)), "/out/last_run.json")
    samples_at = lines.index("--- user ---")
    assert lines[samples_at : samples_at + 4] == [
        "--- user ---",
        "Hi,\nSync stopped.",
        "--- reply ---",
        "Sorry to hear that.",
    ]
    assert "--- prompt ---" not in lines and "--- continuation ---" not in lines
    suggested = lines[lines.index("next:") + 1]
    assert suggested == "  textgen generate --model /out/serving --chat 'How do I turn on sync on my phone?'"
    arguments = build_parser().parse_args(shlex.split(suggested)[1:])
    assert (arguments.model, arguments.chat, arguments.prompts) == (
        "/out/serving",
        True,
        ["How do I turn on sync on my phone?"],
    )


def test_a_run_that_pushed_nothing_says_why_and_shows_the_error():
    summary = dict(
        BLESSED_RUN,
        succeeded=False,
        error="the Trainer failed",
        samples=[],
        distribution_checks=None,
        anomalies=[],
        blessing=None,
        push={"pushed": False, "reason": "the run stopped at Trainer"},
    )
    assert report_lines(summary, "last_run.json")[-5:] == [
        "  Pusher                       COMPLETE",
        "nothing pushed: the run stopped at Trainer",
        "error: the Trainer failed",
        "",
        "summary written to last_run.json",
    ]


def test_a_partial_run_reports_the_data_quality_and_no_push():
    summary = dict(
        BLESSED_RUN,
        components={"ExampleGen": "COMPLETE", "DataGate": "COMPLETE"},
        blessing=None,
        samples=[],
        anomalies=[],
        distribution_checks=None,
        push={"pushed": False, "reason": "no Pusher"},
        data_quality={"documents_read": 10, "documents_kept": 9, "removed": {"exact_duplicate": 1}, "spans": [1, 2]},
    )
    assert report_lines(summary, "s.json")[5:] == [
        "data quality (spans 1, 2):",
        "  documents read: 10, kept: 9",
        "  removed (1): exact duplicate 1",
        "",
        "summary written to s.json",
    ]


def test_the_report_says_how_the_tokenizer_splits_numbers_and_warns_when_digits_merge():
    split = {"merges_digits": False, "alone_fraction": 1.0}
    merged = {"merges_digits": True, "alone_fraction": 0.25}
    for splitting, expected in (
        (split, "tokenizer: learned, 1,024 tokens; every digit is a token of its own"),
        (
            merged,
            "tokenizer: checkpoint, 50,257 tokens; WARNING: digits merge (75% of the sample's digits share a token "
            "with another character; models copy numbers poorly: docs/tokenizers.md, Numbers)",
        ),
    ):
        source, size = ("learned", 1024) if splitting is split else ("checkpoint", 50257)
        summary = dict(BLESSED_RUN, tokenizer={"source": source, "vocab_size": size, "number_splitting": splitting})
        lines = report_lines(summary, "s.json")
        assert expected in lines
        assert lines.index(expected) == lines.index("evaluation: BLESSED (all gates passed)") - 1


def test_removal_the_data_gate_only_warned_about_is_reported_with_its_rules():
    from components.data_gate.removal import removal_finding

    finding = removal_finding(
        {
            "documents_read": 10,
            "documents_kept": 2,
            "removed": {"quality_stop_words": 8},
            "removed_examples": {"quality_stop_words": {"location": "a.txt:1", "text": "Ay."}},
        },
        0.3,
    )
    summary = dict(
        BLESSED_RUN,
        components={"ExampleGen": "COMPLETE", "DataGate": "COMPLETE"},
        blessing=None,
        samples=[],
        anomalies=[],
        distribution_checks=None,
        push={"pushed": False, "reason": "no Pusher"},
        removal_warning=finding.message(),
    )
    assert report_lines(summary, "s.json")[5:7] == [
        "data gate WARNING (data_gate.removal_action=warn, the run went on): cleaning removed 80.0% of the documents "
        "(read 10, kept 2; data_gate.max_removed_fraction=0.3); the rules that removed the most:",
        '  - quality_stop_words: 8 (e.g. a.txt:1: "Ay.")',
    ]


@pytest.fixture
def prepared_run(monkeypatch):
    """Makes `run_locally` return `summary` (a copy of BLESSED_RUN the test may update); returns it
    and the list of the `through` argument of each call."""
    from pipeline import local_runner

    calls = []
    summary = dict(BLESSED_RUN)

    def run_locally(config, through=None):
        calls.append(through)
        return summary

    monkeypatch.setattr(local_runner, "run_locally", run_locally)
    return summary, calls


GATE_ERROR = (
    "data gate: stopping before the Tokenizer and Transform: 1 blocking anomaly in the input data:\n  - New column"
)


@pytest.mark.parametrize("command,through", [("run", None), ("validate", "RecordAcceptedStatistics")])
@pytest.mark.parametrize(
    "outcome,exit_code,error_line",
    [
        ({}, EXIT_OK, None),
        (
            {"succeeded": False, "components": {"DataGate": "FAILED"}, "error": GATE_ERROR},
            EXIT_BLOCKED,
            "data gate: stopping before the Tokenizer and Transform: 1 blocking anomaly in the input data: - New column",
        ),
        (
            {
                "succeeded": False,
                "components": {"DataGate": "COMPLETE", "TokenGate": "FAILED"},
                "error": "token gate: x",
            },
            EXIT_BLOCKED,
            "token gate: x",
        ),
        (
            {
                "succeeded": False,
                "components": {"DataGate": "COMPLETE", "Trainer": "FAILED"},
                "error": "the Trainer failed",
            },
            EXIT_FAILED,
            "the Trainer failed",
        ),
    ],
)
def test_run_and_validate_print_the_report_and_exit_by_the_gates(
    prepared_run, tmp_path, capsys, command, through, outcome, exit_code, error_line
):
    summary, calls = prepared_run
    summary.update(outcome)
    output_root = str(tmp_path / "out")
    assert main([command, "--data-root", str(tmp_path), "--output-root", output_root]) == exit_code
    assert calls == [through]
    printed = capsys.readouterr()
    assert printed.out == "\n".join(report_lines(summary, f"{output_root}/last_run.json", command=command)) + "\n"
    assert f"=== textgen {command} summary ===" in printed.out.splitlines()
    assert printed.err == (f"textgen: {error_line}\n" if error_line else "")
