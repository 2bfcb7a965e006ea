"""The `textgen` command lines of the README and of every documentation page (docs/) against the
real parser, so a claim that drifts from the CLI fails here: the command summary (docs/operations.md)
lists exactly the flags each command has, every example command line (code blocks, fenced or
indented, and inline code) parses, and the usage error the docs quote is the one the CLI prints.
Examples that need a cluster, Docker or a trained model are only parsed, never run."""

import argparse
import os
import re
import shlex
from typing import Dict, List, Set

import pytest

from pipeline.config import PROJECT_ROOT
from tests.docs_pages import documents
from textgen_cli.cli import EXIT_USAGE, build_parser, main


def _read(source: str) -> str:
    with open(os.path.join(PROJECT_ROOT, source), encoding="utf-8") as handle:
        return handle.read()


# The README and every page of the documentation site, by path.
DOCUMENTS = {source: _read(source) for source in documents()}
SUMMARY_PAGE = "docs/operations.md"
SUMMARY_HEADING = "## The `textgen` command"


def _fenced_shell_as_indented(text: str) -> str:
    """`text` with the lines of its fenced ```sh blocks indented like an indented code block's."""
    return re.sub(
        r"^```sh\n(.*?)\n```$",
        lambda block: "\n".join("    " + line for line in block.group(1).split("\n")),
        text,
        flags=re.MULTILINE | re.DOTALL,
    )


def _code_block_commands(text: str) -> List[str]:
    """Code lines (indented, or in fenced ```sh blocks) starting with `textgen `, backslash
    continuations joined."""
    commands, lines = [], _fenced_shell_as_indented(text).split("\n")
    for number, line in enumerate(lines):
        if line.startswith("    textgen ") and not lines[number - 1].rstrip().endswith("\\"):
            command, following = line.strip(), number
            while command.endswith("\\"):
                following += 1
                command = command[:-1].rstrip() + " " + lines[following].strip()
            commands.append(command)
    return commands


def _inline_commands(text: str) -> List[str]:
    """Inline code spans (single backticks) that start with `textgen `, whitespace normalised."""
    return [" ".join(span.split()) for span in re.findall(r"(?<!`)`(textgen [^`]+)`(?!`)", text)]


def _summary_lines() -> List[str]:
    """The command summary: the first code block after the `textgen` command heading, one entry
    per command (a synopsis continued on deeper-indented lines is joined)."""
    section = DOCUMENTS[SUMMARY_PAGE][DOCUMENTS[SUMMARY_PAGE].index(SUMMARY_HEADING) :]
    block = section[section.index("\n    textgen ") :]
    entries: List[str] = []
    for line in block[: block.index("\n\n", 1)].strip("\n").split("\n"):
        if line.startswith("    textgen "):
            entries.append(line.strip())
        else:
            entries[-1] += " " + line.strip()
    return entries


def _subparsers() -> Dict[str, argparse.ArgumentParser]:
    action = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def _flags(parser: argparse.ArgumentParser) -> Set[str]:
    return {
        option
        for action in parser._actions
        for option in action.option_strings
        if option.startswith("--") and option != "--help"
    }


def _summary_flags() -> Dict[str, Set[str]]:
    """{command: the flags its summary line (with its continuation lines) names}, with `[same
    options as X]` and `[same options as X, except --F]` resolved."""
    named: Dict[str, Set[str]] = {}
    for line in _summary_lines():
        command = line.split()[1]
        same = re.search(r"\[same options as (\w+)(?:, except ([^\]]+))?\]", line)
        own = line.replace(same.group(0), "") if same else line
        flags = set(re.findall(r"--[a-z][a-z-]*", own))
        if same:
            flags |= named[same.group(1)] - set(re.findall(r"--[a-z][a-z-]*", same.group(2) or ""))
        named[command] = flags
    return named


def test_the_command_summary_lists_every_command_and_exactly_its_flags():
    subparsers, summary = _subparsers(), _summary_flags()
    assert set(summary) == set(subparsers)
    for command, parser in subparsers.items():
        assert summary[command] == _flags(parser), command


def _example_commands() -> List[str]:
    """Every example command line outside the summary, elisions (`...` after the command) dropped;
    placeholders such as BUCKET stay (they parse like any value). Synopses (`[--flag ...]`), bare
    command names (`textgen run` in a sentence) and lines that elide the command itself
    (`textgen ... --set`, `textgen COMMAND`) are left out."""
    summary = set(_summary_lines())
    examples = []
    for command in [
        command for text in DOCUMENTS.values() for command in _code_block_commands(text) + _inline_commands(text)
    ]:
        words = command.split()
        if command in summary or "[" in command or len(words) < 3 or words[1] in ("...", "COMMAND"):
            continue
        examples.append(" ".join(word for word in words if word != "..."))
    return examples


def test_the_examples_are_found():
    examples = _example_commands()
    assert len(examples) > 10
    assert any(
        "model.checkpoint=checkpoints/tiny-gpt2" in example for example in examples
    )  # docs pages, not only the README
    used = {shlex.split(example)[1] for example in examples}
    assert {"run", "compile", "generate", "submit", "schedule", "rollback"} <= used


@pytest.mark.parametrize("example", _example_commands())
def test_every_documented_example_parses_with_the_real_cli(example, capsys):
    argv = shlex.split(example, comments=True)[1:]
    try:
        build_parser().parse_args(argv)
    except SystemExit as exited:  # --help exits 0; anything else is a flag or value the CLI refuses
        assert exited.code == 0, capsys.readouterr().err


def test_the_usage_error_the_docs_quote_is_the_one_printed(tmp_path, capsys):
    quoted = re.search(r"``(textgen: generate: argument --top-p: [^\n]*?)``", DOCUMENTS[SUMMARY_PAGE]).group(1)
    with pytest.raises(SystemExit) as exited:
        main(["generate", "--model", str(tmp_path), "--top-p", "1.5", "hello"])
    assert exited.value.code == EXIT_USAGE
    assert capsys.readouterr().err == quoted + "\n"
