"""Files the components read at run time, found through the installed package.

Safety and bias suites, lexicons, curated schemas and sample prompts live in the repository's
top-level `data/` and `schema/` folders. `setup.py` copies those folders into the package as
`components/_resources/` when a wheel (or the container image) is built, so an installed project
finds them beside its code, from any working directory. In a source checkout (the editable
install used for development) they are found beside the `components` package instead. Either
way the location comes from this module's own file, never from the working directory.

Configuration refers to a bundled file as `bundled:<path relative to the repository root>`
(e.g. `bundled:data/safety/prompts.jsonl`). Such a reference means the same file on every
machine, so it can travel inside a compiled Kubeflow spec; `resolve` turns it into a path in
the process that reads it. Any other path or URI is the user's own and passes unchanged.
"""

import os

BUNDLED_PREFIX = "bundled:"
# Top-level repository folders that are installed with the package.
BUNDLED_FOLDERS = ("data", "schema")
_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
INSTALLED_ROOT = os.path.join(_PACKAGE_DIR, "_resources")  # wheel / image layout (setup.py)
SOURCE_ROOT = os.path.dirname(_PACKAGE_DIR)  # source checkout / editable install


def bundled(relative_path: str) -> str:
    """The `bundled:` reference of a file under data/ or schema/ (for config defaults)."""
    return BUNDLED_PREFIX + relative_path


def bundled_path(relative_path: str) -> str:
    """The local path of a bundled file or folder; raises naming both places it looked."""
    if relative_path.split("/", 1)[0] not in BUNDLED_FOLDERS:
        raise ValueError(f"bundled resource {relative_path!r} is not under one of {BUNDLED_FOLDERS}")
    for root in (INSTALLED_ROOT, SOURCE_ROOT):
        candidate = os.path.join(root, relative_path)
        if os.path.exists(candidate):
            return candidate
    raise FileNotFoundError(
        f"bundled resource {relative_path} is not installed: looked in {INSTALLED_ROOT} (installed package) "
        f"and {SOURCE_ROOT} (source checkout)"
    )


def is_bundled(path: str) -> bool:
    return path.startswith(BUNDLED_PREFIX)


def resolve(path: str) -> str:
    """A `bundled:` reference as a local path; any other path or URI unchanged."""
    return bundled_path(path[len(BUNDLED_PREFIX) :]) if is_bundled(path) else path
