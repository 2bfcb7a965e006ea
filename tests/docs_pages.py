"""Which documents the documentation tests read: README.md and the pages of the documentation
site, in the order of mkdocs.yml's navigation (tests/test_readme.py, test_readme_examples.py,
test_docs_site.py)."""

import os
from typing import List

import yaml

PROJECT_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MKDOCS_FILE = os.path.join(PROJECT_ROOT, "mkdocs.yml")


def _nav_pages(nav) -> List[str]:
    """The page files of a mkdocs.yml `nav`, in order."""
    pages: List[str] = []
    for entry in nav:
        value = next(iter(entry.values())) if isinstance(entry, dict) else entry
        pages += _nav_pages(value) if isinstance(value, list) else [value]
    return pages


def site_pages() -> List[str]:
    """The documentation site's pages in navigation order, relative to the project root."""
    with open(MKDOCS_FILE, encoding="utf-8") as handle:
        site = yaml.safe_load(handle)
    return [os.path.join(site.get("docs_dir", "docs"), page) for page in _nav_pages(site["nav"])]


def documents() -> List[str]:
    """README.md, then every page of the documentation site in navigation order."""
    return ["README.md"] + site_pages()
