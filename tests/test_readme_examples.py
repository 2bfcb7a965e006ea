"""The shell examples of the README and of every documentation page (docs/, in the order of
mkdocs.yml's navigation), run as a reader would run them, so a claim that drifts from the code
fails here.

An example is a fenced ```sh block after an HTML comment (invisible on the rendered page):

- `<!-- example: run, exit N -->`: runs on this machine. The examples are run with bash in one
  scratch directory shaped like the project directory (`data/` is the project's), with the
  environment's `bin/` on PATH as the README sets it up, through the installed `textgen` entry
  point: first the quick start's `textgen run` (the one real pipeline run, shared by every example
  that needs its trained model or its output root), then the others in the order they appear. The
  exit code must be N, and the lines of the `<!-- example: output -->` block that follows (if
  any) must appear in that order among its stdout lines, `...` standing for any text.
- `<!-- example: syntax -->`: needs a cluster or Docker; checked with `bash -n`, its `textgen`
  lines parse with the real CLI (tests/test_readme.py, which reads fenced blocks too), and a
  `docker run tensorflow/serving` passes exactly the flags of the serving manifest.
"""

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from typing import Dict, List, Optional

import pytest
import yaml

from pipeline.config import PROJECT_ROOT
from tests.docs_pages import documents

MARKED_BLOCK = re.compile(
    r"^<!-- example: (?P<kind>run|output|syntax)(?:, exit (?P<exit>\d+))? -->\n+"
    r"```(?P<language>\w*)\n(?P<body>.*?)\n```$",
    re.MULTILINE | re.DOTALL,
)
SERVING_MANIFEST = os.path.join(PROJECT_ROOT, "kubeflow", "manifests", "tf-serving.yaml")
PIPELINE_RUN = "textgen run "


@dataclass
class Example:
    kind: str  # run | syntax
    body: str
    source: str  # the document, relative to the project root
    line: int  # where the block starts in it
    exit_code: Optional[int] = None
    output: Optional[List[str]] = None  # the documented lines (a run example's output block)

    @property
    def id(self) -> str:
        return f"{self.source}:{self.line}"


def marked_examples(source: str) -> List[Example]:
    """The marked blocks of `source`, each output block attached to the run example before it."""
    with open(os.path.join(PROJECT_ROOT, source), encoding="utf-8") as handle:
        text = handle.read()
    examples: List[Example] = []
    for match in MARKED_BLOCK.finditer(text):
        kind, line = match.group("kind"), text.count("\n", 0, match.start()) + 1
        if kind == "output":
            if not examples or examples[-1].kind != "run" or examples[-1].output is not None:
                raise AssertionError(f"{source}:{line}: an output block must follow a run example")
            examples[-1].output = match.group("body").split("\n")
            continue
        if match.group("language") != "sh":
            raise AssertionError(f"{source}:{line}: a {kind} example must be a ```sh block")
        exit_code = int(match.group("exit")) if match.group("exit") is not None else None
        if kind == "run" and exit_code is None:
            raise AssertionError(
                f"{source}:{line}: a run example states its exit code (`<!-- example: run, exit 0 -->`)"
            )
        examples.append(Example(kind, match.group("body"), source, line, exit_code))
    return examples


EXAMPLES = [example for source in documents() for example in marked_examples(source)]
RUNS = [example for example in EXAMPLES if example.kind == "run"]


def _pipeline_run() -> Example:
    """The quick start's run: the first run example whose block starts a pipeline run."""
    return next(example for example in RUNS if example.body.startswith(PIPELINE_RUN))


def _pattern(documented: str) -> "re.Pattern[str]":
    """A documented output line as a pattern for a whole output line; `...` is any text."""
    return re.compile(".*".join(re.escape(part) for part in documented.rstrip().split("...")))


def unmatched_lines(documented: List[str], printed: str) -> List[str]:
    """The documented lines not found, in order, among the printed lines (empty: all found)."""
    lines = [line.rstrip() for line in printed.split("\n")]
    position = 0
    for number, expected in enumerate(documented):
        pattern = _pattern(expected)
        while position < len(lines) and not pattern.fullmatch(lines[position]):
            position += 1
        if position == len(lines):
            return documented[number:]
        position += 1
    return []


# --- the marking itself (cheap) ---------------------------------------------------------------------


def test_the_marked_examples_are_found():
    commands = [example.body.split("\n")[-1].split()[:2] for example in RUNS]
    assert ["textgen", "run"] in commands and ["textgen", "generate"] in commands
    assert ["textgen", "validate"] in commands
    assert _pipeline_run() is RUNS[0], "the quick start's run must come first: the others use its output root"
    assert RUNS[0].source == "README.md"
    assert [example for example in RUNS if example.body.startswith(PIPELINE_RUN)] == [RUNS[0]], (
        "one pipeline run is shared by every example: mark another `textgen run` as a syntax example"
    )
    assert {example.source for example in RUNS} > {"README.md"}, "the docs pages' examples are found too"
    assert all(example.output for example in RUNS), [example.id for example in RUNS if not example.output]
    assert any("docker run" in example.body for example in EXAMPLES if example.kind == "syntax")


def test_documented_output_is_matched_in_order_with_ellipses():
    printed = "a\nHi Zoë,\nThanks for reaching out about your sync\nb\n"
    assert unmatched_lines(["Hi Zoë,", "Thanks for reaching out about..."], printed) == []
    assert unmatched_lines(["Thanks for reaching out about...", "Hi Zoë,"], printed) == ["Hi Zoë,"]
    assert unmatched_lines(["Hi Zoë"], printed) == ["Hi Zoë"]  # a whole line, not a prefix


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda example: example.id)
def test_every_marked_example_is_valid_shell(example):
    checked = subprocess.run(["bash", "-n"], input=example.body, capture_output=True, text=True)
    assert checked.returncode == 0, f"{example.id}: {checked.stderr}"


def _flags(arguments: List[str]) -> Dict[str, str]:
    """{--flag: value} of `--flag=value` arguments (a bare --flag maps to "")."""
    return dict((argument.split("=", 1) + [""])[:2] for argument in arguments if argument.startswith("--"))


def _served_value(value: str) -> str:
    """A flag value with the serving directory's location dropped (the example's `$PWD/runs/local/serving`,
    the manifest's bucket), leaving the file it names."""
    return re.sub(r"^(\$PWD/runs/local/serving|gs://[^/]+/textgen/serving)/", "", value)


def test_the_docker_run_line_passes_the_flags_of_the_serving_manifest():
    docker = next(example for example in EXAMPLES if example.kind == "syntax" and "docker run" in example.body)
    words = shlex.split(docker.body.replace("\\\n", " "), comments=True, posix=False)
    image = next(index for index, word in enumerate(words) if word.startswith("tensorflow/serving"))
    readme_flags = {flag: _served_value(value.strip('"')) for flag, value in _flags(words[image + 1 :]).items()}
    with open(SERVING_MANIFEST, encoding="utf-8") as handle:
        documents = [document for document in yaml.safe_load_all(handle) if document]
    container = next(
        container
        for document in documents
        if document.get("kind") == "Deployment"
        for container in document["spec"]["template"]["spec"]["containers"]
        if container["image"].startswith("tensorflow/serving")
    )
    assert container["image"] == words[image]
    manifest_flags = {flag: _served_value(value) for flag, value in _flags(container["args"]).items()}
    assert readme_flags == manifest_flags


# --- running them (one real pipeline run) -------------------------------------------------------------


def _environment() -> Dict[str, str]:
    """The process environment with this environment's `bin/` first on PATH, as the README sets it
    up, and the checkout first on the import path (its `textgen` is the one under test)."""
    environment = dict(os.environ)
    environment["PATH"] = os.path.dirname(sys.executable) + os.pathsep + environment.get("PATH", "")
    environment["PYTHONPATH"] = PROJECT_ROOT + os.pathsep + environment.get("PYTHONPATH", "")
    environment.setdefault("TF_USE_LEGACY_KERAS", "1")
    environment.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    return environment


def _run(example: Example, directory: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", "-e", "-o", "pipefail", "-c", example.body],
        cwd=directory,
        env=_environment(),
        capture_output=True,
        text=True,
        timeout=3600,
    )


@pytest.fixture(scope="module")
def scratch(tmp_path_factory):
    """A directory shaped like the project directory, where the quick start's pipeline run already
    ran: (its path, {example id: its completed process})."""
    directory = str(tmp_path_factory.mktemp("readme"))
    os.symlink(os.path.join(PROJECT_ROOT, "data"), os.path.join(directory, "data"))
    run = _pipeline_run()
    return directory, {run.id: _run(run, directory)}


@pytest.mark.slow
@pytest.mark.parametrize("example", RUNS, ids=lambda example: example.id)
def test_a_run_example_exits_and_prints_as_documented(example, scratch):
    directory, done = scratch
    result = done[example.id] if example.id in done else _run(example, directory)
    tail = result.stdout[-3000:] + "\n--- stderr ---\n" + result.stderr[-3000:]
    assert result.returncode == example.exit_code, f"{example.id}: exit {result.returncode}\n{tail}"
    missing = unmatched_lines(example.output, result.stdout)
    assert not missing, f"{example.id}: documented lines not printed (in order): {missing}\n{tail}"
