"""What the learned tokenizer's piece rules give on four kinds of text and on a number-copying task.

Choices (`tokenizer.*` settings); `before` is the named baseline, the defaults before digits split:

    before   pieces_cross_words=true   split_digits=false
    cross    pieces_cross_words=true   split_digits=true    (the default)
    words    pieces_cross_words=false  split_digits=true

Corpora: `bundled` (data/corpus), `conversations` (data/instructions/support_conversations.jsonl),
`chinese` (benchmarks/zh_corpus.py, about 600 KB), `code` (this repository's Python files, one
document each). Each cell is one whole local run (`run_locally`: ExampleGen to Pusher) with every
other setting at its default but the bias suite's size (CORPUS_OVERRIDES); from its evaluation.json: bytes per token and bits per byte of the
raw eval text, perplexity per token, the gain over the train split's unigram model, the verdict
and the gates that failed, and for conversations the reply metrics.

The task (`numbers`): tests/number_task.py, 2,000 support conversations whose replies repeat the
ticket's five-digit order number, trained from scratch with the defaults (run through the Trainer),
then 200 held-out tickets with numbers never trained on asked greedily through the `chat`
signature: the share of replies exactly right and of replies with the right number.

    python benchmarks/tokenizer_choices.py --work-dir /tmp/tokenizer_choices \
        [--corpora bundled conversations chinese code numbers] [--choices before cross words]

Prints a table and writes benchmarks/results/tokenizer_choices.json. Quality numbers, not
timings: the machine's load does not change them (it is recorded all the same).
"""

import argparse
import glob
import json
import os
import sys
import time
from typing import Dict, List

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from benchmarks import zh_corpus  # noqa: E402
from benchmarks.machine import command_line, load_average, machine_description, write_results  # noqa: E402
from tests import number_task  # noqa: E402

CHOICES = {
    "before": ("tokenizer.pieces_cross_words=true", "tokenizer.split_digits=false"),
    "cross": ("tokenizer.pieces_cross_words=true", "tokenizer.split_digits=true"),
    "words": ("tokenizer.pieces_cross_words=false", "tokenizer.split_digits=true"),
}
CORPORA = ("bundled", "conversations", "chinese", "code", "numbers")
# The table is about quality, not the bias gate: 6 of the 32 bias templates per group (as the test
# suite's FAST_OVERRIDES) keep a run's Evaluator to a few minutes on two cores.
CORPUS_OVERRIDES = ("evaluator.bias.templates_per_group=6",)
TASK_CONVERSATIONS, TASK_ASKED = 2_000, 200


def _write_jsonl(directory: str, texts: List[str]) -> str:
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, "documents.jsonl"), "w", encoding="utf-8") as handle:
        for text in texts:
            handle.write(json.dumps({"text": text}, ensure_ascii=False) + "\n")
    return directory


def data_root(corpus: str, work_dir: str) -> str:
    """The data root of `corpus` (written under `work_dir` where it is made here)."""
    if corpus == "bundled":
        return os.path.join(ROOT, "data", "corpus")
    if corpus == "conversations":
        return os.path.join(ROOT, "data", "instructions")
    if corpus == "chinese":
        return _write_jsonl(os.path.join(work_dir, "data-chinese"), zh_corpus.generate(600_000))
    if corpus == "code":
        files = sorted(glob.glob(os.path.join(ROOT, "**", "*.py"), recursive=True))
        texts = [open(path, encoding="utf-8").read() for path in files if "/runs/" not in path]
        return _write_jsonl(os.path.join(work_dir, "data-code"), [text for text in texts if text.strip()])
    return number_task.write_conversations(os.path.join(work_dir, "data-numbers"), TASK_CONVERSATIONS)


def _evaluation(summary: Dict) -> Dict:
    blessing = summary.get("blessing") or {}
    if not blessing.get("uri"):
        return {}
    with open(os.path.join(blessing["uri"], "evaluation.json"), encoding="utf-8") as handle:
        return json.load(handle)


def run_cell(corpus: str, choice: str, work_dir: str) -> Dict:
    """One run of `corpus` with the rules of `choice`; what it measured."""
    from pipeline.config import load_config
    from pipeline.local_runner import run_locally

    extra = number_task.TRAIN_OVERRIDES if corpus == "numbers" else CORPUS_OVERRIDES
    overrides = list(CHOICES[choice]) + list(extra)
    config = load_config(
        overrides=overrides,
        data_root=data_root(corpus, work_dir),
        output_root=os.path.join(work_dir, f"{corpus}-{choice}"),
    )
    started = time.monotonic()
    summary = run_locally(config, through="Trainer" if corpus == "numbers" else None)
    cell = {
        "corpus": corpus,
        "choice": choice,
        "succeeded": summary["succeeded"],
        "error": summary["error"],
        "seconds": round(time.monotonic() - started, 1),
        "tokenizer": summary.get("tokenizer"),
    }
    if corpus == "numbers" and summary["succeeded"]:
        from tfx.utils import path_utils

        cell["task"] = number_task.answer_held_out(path_utils.serving_model_path(summary["trained_model"]), TASK_ASKED)
    evaluation = _evaluation(summary)
    if evaluation:
        quality = evaluation["metrics"]["quality"]
        cell.update(
            blessed=summary["blessing"]["blessed"],
            failed=[gate["name"] for gate in evaluation["gates"] if gate["verdict"] == "FAIL"],
            bits_per_byte=quality.get("bits_per_byte"),
            bytes_per_token=(quality["text_bytes"] / quality["text_tokens"]) if quality.get("text_tokens") else None,
            perplexity=quality.get("perplexity"),
            gain_over_unigram=_gate_value(evaluation, "quality.gain_over_unigram"),
            replies=(evaluation["metrics"].get("replies") or {}).get("candidate"),
        )
    return cell


def _gate_value(evaluation: Dict, name: str):
    return next((gate.get("value") for gate in evaluation["gates"] if gate["name"] == name), None)


def _number(value, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def print_table(cells: List[Dict]) -> None:
    print(
        f"{'corpus':<14} {'choice':<7} {'bytes/token':>11} {'bits/byte':>9} {'gain vs unigram':>15} "
        f"{'reply ROUGE-L':>13} {'task exact':>10} {'task number':>11}  verdict"
    )
    for cell in cells:
        replies, task = cell.get("replies") or {}, cell.get("task") or {}
        verdict = (
            "error: " + str(cell["error"])[:60]
            if not cell["succeeded"]
            else ("-" if "blessed" not in cell else ("blessed" if cell["blessed"] else f"refused {cell['failed']}"))
        )
        print(
            f"{cell['corpus']:<14} {cell['choice']:<7} {_number(cell.get('bytes_per_token'), 2):>11} "
            f"{_number(cell.get('bits_per_byte')):>9} {_number(cell.get('gain_over_unigram')):>15} "
            f"{_number(replies.get('rouge_l')):>13} {_number(task.get('exact'), 2):>10} "
            f"{_number(task.get('right_number'), 2):>11}  {verdict}"
        )


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work-dir", required=True)
    parser.add_argument("--corpora", nargs="+", choices=CORPORA, default=list(CORPORA))
    parser.add_argument("--choices", nargs="+", choices=sorted(CHOICES), default=list(CHOICES))
    args = parser.parse_args(argv)
    os.makedirs(args.work_dir, exist_ok=True)
    load_before = load_average()
    cells = []
    for corpus in args.corpora:
        for choice in args.choices:
            cells.append(run_cell(corpus, choice, args.work_dir))
            print(json.dumps(cells[-1], ensure_ascii=False), flush=True)
    print_table(cells)
    path = write_results(
        "tokenizer_choices",
        {
            "command": command_line(),
            "machine": machine_description(),
            "load_before": load_before,
            "load_after": load_average(),
            "cells": cells,
        },
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
