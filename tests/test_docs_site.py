"""The documentation site (mkdocs.yml, docs/): it builds with `mkdocs build --strict` (a broken
link or anchor, a missing page or a page left out of the navigation fails), the configuration
reference is what the options classes generate, the pages that error messages point at exist, and
the messages the troubleshooting page quotes are the ones the code prints."""

import ast
import functools
import glob
import os
import re
import shutil
import subprocess
import sys

import pytest

from pipeline import config_reference
from tests.docs_pages import MKDOCS_FILE, PROJECT_ROOT, site_pages

DOCS = os.path.join(PROJECT_ROOT, "docs")
SOURCE_PACKAGES = ("pipeline", "components", "kubeflow", "textgen_cli")


def _build(project: str, site_dir: str) -> subprocess.CompletedProcess:
    """`mkdocs build --strict` of the project directory `project`, into `site_dir`."""
    environment = dict(os.environ, NO_MKDOCS_2_WARNING="1")  # Material's banner about MkDocs 2.0
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", site_dir],
        cwd=project,
        env=environment,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_the_site_builds_strictly(tmp_path):
    built = _build(PROJECT_ROOT, str(tmp_path / "site"))
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-5000:]
    for page in site_pages():
        name = os.path.splitext(os.path.relpath(page, "docs"))[0]
        html = "index.html" if name == "index" else os.path.join(name, "index.html")
        assert (tmp_path / "site" / html).is_file(), page


def test_a_broken_link_fails_the_build(tmp_path):
    """The strict build does fail: the same site with one link to a page that does not exist and
    one to an anchor that does not exist."""
    project = tmp_path / "project"
    shutil.copytree(DOCS, project / "docs")
    shutil.copy(MKDOCS_FILE, project / "mkdocs.yml")
    with open(project / "docs" / "glossary.md", "a", encoding="utf-8") as handle:
        handle.write("\nSee [a page](no-such-page.md) and [a section](operations.md#no-such-section).\n")
    built = _build(str(project), str(tmp_path / "site"))
    assert built.returncode != 0
    assert "no-such-page.md" in built.stderr and "no-such-section" in built.stderr, built.stderr[-3000:]


def test_every_page_is_in_the_navigation():
    on_disk = {
        os.path.relpath(path, PROJECT_ROOT) for path in glob.glob(os.path.join(DOCS, "**", "*.md"), recursive=True)
    }
    assert on_disk == set(site_pages())


def test_the_configuration_reference_is_generated_from_the_options_classes():
    with open(config_reference.PAGE, encoding="utf-8") as handle:
        checked_in = handle.read()
    assert checked_in == config_reference.render(), "run `python -m pipeline.config_reference` (or `make docs`)"
    from pipeline.config import option_entries

    for entry in option_entries():
        assert f"| `{entry.key}` |" in checked_in, entry.key


def test_the_reference_names_types_in_words():
    from typing import Dict, List, Literal, Optional

    assert config_reference.type_name(Optional[int]) == "int or `null`"
    assert config_reference.type_name(Literal["a", "b"]) == "one of: `a`, `b`"
    assert config_reference.type_name(List[Literal["a"]]) == "list, each one of: `a`"
    assert config_reference.type_name(Dict[str, str]) == "mapping of str to str"


def _source_texts():
    """The project's Python source, each file with adjacent string literals joined (a message
    split over several lines reads as one string)."""
    for package in SOURCE_PACKAGES:
        for path in glob.glob(os.path.join(PROJECT_ROOT, package, "**", "*.py"), recursive=True):
            with open(path, encoding="utf-8") as handle:
                yield path, re.sub(r"(\"|')\s*\n\s*f?(\"|')", "", handle.read())


def test_the_docs_pages_that_messages_point_at_exist():
    named = {
        (os.path.relpath(path, PROJECT_ROOT), page)
        for path, text in _source_texts()
        for page in re.findall(r"\bdocs/[a-z-]+\.md\b", text)
    }
    assert named, "the configuration errors name their docs page"
    assert not [f"{path} names {page}" for path, page in named if not os.path.isfile(os.path.join(PROJECT_ROOT, page))]


# Parts of quoted messages that a library writes (argparse, pydantic, TFDV), not this project.
LIBRARY_TEXT = (
    r"\b\w+: unrecognized arguments: ",
    r"\b\w+: argument --[a-z.-]+: ",
    r"Input should be ",
    r"Value error, ",
    r"High approximate Jensen-Shannon divergence between current and previous",
)


@functools.lru_cache(maxsize=1)
def _string_literals() -> str:
    """Every string literal of the project's source (f-strings with their fields left out), one per line."""
    literals = []
    for path, _ in _source_texts():
        with open(path, encoding="utf-8") as handle:
            tree = ast.parse(handle.read())
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                literals.append(node.value)
            elif isinstance(node, ast.JoinedStr):
                literals.append("\x00".join(part.value for part in node.values if isinstance(part, ast.Constant)))
    return "\n".join(literals)


def _quoted_messages():
    """The messages the troubleshooting page quotes: code spans in the first column of its tables."""
    with open(os.path.join(DOCS, "troubleshooting.md"), encoding="utf-8") as handle:
        rows = [line for line in handle if line.startswith("| ") and not line.startswith(("| message", "| finding"))]
    return [span for row in rows for span in re.findall(r"`([^`]+)`", row.split(" | ")[0])]


@pytest.mark.parametrize("message", _quoted_messages())
def test_a_quoted_message_is_one_the_code_prints(message):
    """The longest fixed part of a quoted message (between the `...` that stand for what varies)
    is in one of the project's string literals, so a reworded message cannot leave the page
    behind. A message whose fixed parts are all short (under 12 characters) is not checked."""
    for library in LIBRARY_TEXT:
        message = re.sub(library, "...", message)
    parts = sorted((part.strip(" ()'`:;,-") for part in message.split("...")), key=len)
    if len(parts[-1]) < 12:
        return
    pieces = _string_literals().replace("\x00", "\n").split("\n")
    assert any(parts[-1] in piece for piece in pieces), parts[-1]


def test_the_readme_is_short_and_reaches_every_page_in_one_click():
    with open(os.path.join(PROJECT_ROOT, "README.md"), encoding="utf-8") as handle:
        readme = handle.read()
    assert readme.count("\n") <= 200
    assert not [page for page in site_pages() if f"]({page})" not in readme and f"]({page}#" not in readme]
