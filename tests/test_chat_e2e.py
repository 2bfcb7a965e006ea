"""End to end: a chat checkpoint fine-tuned on conversations, blessed, pushed and asked in a fresh
process (issue 38's "done when").

`textgen run --set model.checkpoint=<dir>` on a JSONL file of `messages` records, for the tiny
GPT-2 checkpoint with a ChatML template (tests/fixtures/hf/chat/gpt2-chatml, whose template,
token ids and greedy replies test_chat_fidelity.py checks against transformers). The replies of
the conversations are short and depend only on what the ticket is about, so a 2-layer model learns
them, and where to stop, in a few hundred steps. Checked: the run read conversations, trained on the
replies only, the Evaluator generated replies through the template against the base checkpoint and
blessed the candidate on them (reply ROUGE-L and stop rate), the version is pushed with the template
in its Hugging Face export, and `textgen generate --chat` in a fresh process answers with the reply
it was taught, in plain text, stopped at the end-of-turn token.

Marked slow (about two minutes here); CI runs it.
"""

import json
import os
import random
import subprocess
import sys

import pytest

from pipeline.local_runner import run_locally

pytestmark = pytest.mark.slow

CHECKPOINT = os.path.join(os.path.dirname(__file__), "fixtures", "hf", "chat", "gpt2-chatml")

# What a ticket is about -> (how customers put it, the one reply the data gives).
TOPICS = {
    "password": ("I forgot my password.", "Use Forgot password on the sign-in page."),
    "sync": ("My notes do not sync.", "Sign out, then sign in again."),
    "export": ("The PDF export fails.", "Update the app and export again."),
    "billing": ("I was charged twice.", "We refunded the second charge."),
    "theme": ("How do I get dark mode?", "Open Settings and pick Dark."),
}
NAMES = ["Ana", "Ravi", "Mei", "Tom", "Zoë", "Omar", "Lena", "Kofi", "Ines", "Yuki"]
SYSTEM = "You answer support tickets in one sentence."

CHAT_OVERRIDES = [
    "training.train_steps=160",
    "training.batch_size=8",
    "training.warmup_steps=10",
    "training.learning_rate=3e-3",
    "model.context_length=128",
    "generation.max_new_tokens=24",
    "generation.num_samples=2",
    # Templated tickets differ in a name and a number: near-duplicate removal would keep a few.
    "cleaning.near_dedup=false",
    "evaluator.replies.conversations=24",
    "evaluator.replies.max_new_tokens=32",
    "evaluator.instruction_following.max_new_tokens=16",
    "evaluator.bias.templates_per_group=6",  # as FAST_OVERRIDES: this run is not about the bias gate
    "evaluator.max_perplexity=600",
    "evaluator.min_gain_over_unigram=-1",
]


def _ticket(rng: random.Random, topic: str) -> str:
    problem = TOPICS[topic][0]
    return f"Hi, this is {rng.choice(NAMES)} (order {rng.randrange(10000)}). {problem}"


def write_conversations(directory: str, count: int = 600, seed: int = 7) -> str:
    """`count` support conversations in the messages format, a third with a system turn; returns
    the data root."""
    rng = random.Random(seed)
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, "tickets.jsonl"), "w", encoding="utf-8") as handle:
        for index in range(count):
            topic = rng.choice(sorted(TOPICS))
            messages = [{"role": "system", "content": SYSTEM}] if index % 3 == 0 else []
            messages += [
                {"role": "user", "content": _ticket(rng, topic)},
                {"role": "assistant", "content": TOPICS[topic][1]},
            ]
            handle.write(json.dumps({"messages": messages}, ensure_ascii=False) + "\n")
    return directory


def test_a_chat_checkpoint_fine_tuned_on_conversations_is_blessed_pushed_and_answers_in_a_fresh_process(tmp_path):
    from pipeline.config import load_config

    config = load_config(
        overrides=CHAT_OVERRIDES + [f"model.checkpoint={CHECKPOINT}"],
        data_root=write_conversations(str(tmp_path / "data")),
        output_root=str(tmp_path / "out"),
    )
    summary = run_locally(config)
    assert summary["succeeded"], summary["error"]
    assert summary["blessing"]["blessed"], summary["blessing"]

    with open(os.path.join(summary["blessing"]["uri"], "evaluation.json"), encoding="utf-8") as handle:
        evaluation = json.load(handle)
    assert evaluation["baseline"]["kind"] == "base_checkpoint"
    gates = {gate["name"]: gate for gate in evaluation["gates"]}
    assert gates["quality.reply_rouge_l"]["verdict"] == "PASS", gates["quality.reply_rouge_l"]
    assert gates["quality.stop_rate"]["verdict"] == "PASS", gates["quality.stop_rate"]
    replies = evaluation["metrics"]["replies"]
    # Taught one reply per topic, the candidate says it; the random base checkpoint does not.
    assert replies["candidate"]["rouge_l"] > replies["baseline"]["rouge_l"] + 0.3, replies

    push = summary["push"]
    assert push["pushed"] and push["version"] == 1
    # The run report knows a chat model (the Tokenizer artifact's template record): its samples are
    # user messages and replies, its next: line asks with --chat; the warm-up file warms `chat`.
    from components.trainer.serving import predict_requests
    from pipeline.run_summary import report_lines

    assert summary["tokenizer"]["chat_template_sha256"]
    lines = report_lines(summary, config.layout.summary_path)
    assert lines[lines.index("next:") + 1].startswith(f"  textgen generate --model {config.layout.serving_dir} --chat ")
    assert lines.count("--- user ---") == lines.count("--- reply ---") == 2 and "--- prompt ---" not in lines
    warmup = predict_requests.read_warmup_file(push["path"])
    assert [request.model_spec.signature_name for request in warmup][-1] == "chat"
    exported = os.path.join(config.layout.serving_dir, "hugging_face", "1")
    with open(os.path.join(CHECKPOINT, "chat_template.jinja"), encoding="utf-8") as handle:
        template = handle.read()
    with open(os.path.join(exported, "chat_template.jinja"), encoding="utf-8") as handle:
        assert handle.read() == template
    with open(os.path.join(exported, "generation_config.json"), encoding="utf-8") as handle:
        assert sorted(json.load(handle)["eos_token_id"]) == [511, 513]  # <|endoftext|>, <|im_end|>
    card = open(os.path.join(config.layout.serving_dir, "model_cards", "1.md"), encoding="utf-8").read()
    assert "<|im_start|>" in card  # the card shows the template
    assert "Replies generated for 24 eval conversations" in card and "wins / ties / losses" in card

    # Asked in a fresh process, through the pushed model's template: the taught reply, in plain
    # text, ended by the end-of-turn token well before the limit.
    rng = random.Random(99)
    asked = {topic: _ticket(rng, topic) for topic in ("password", "billing")}
    for topic, ticket in asked.items():
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "textgen_cli.cli",
                "generate",
                "--model",
                push["path"],
                "--chat",
                "--system",
                SYSTEM,
                "--max-new-tokens",
                "32",
                "--temperature",
                "0",
                "--top-k",
                "0",
                "--json",
                ticket,
            ],
            capture_output=True,
            text=True,
            timeout=300,
            cwd=os.path.dirname(os.path.dirname(__file__)),
            env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"),
        )
        assert result.returncode == 0, result.stderr[-3000:]
        answer = json.loads(result.stdout.strip().splitlines()[-1])
        assert answer["stopped"] and answer["num_tokens"] < 32, answer
        assert answer["reply"] == TOPICS[topic][1], answer
        assert "<|im_" not in answer["reply"]
