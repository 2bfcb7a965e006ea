"""The `textgen` exit codes, and the one place an expected failure becomes a one-line message.

An expected failure (see `EXIT_CODES`) is printed as `textgen: <message>` on stderr, on one line,
with every URL's user:password part redacted, and the command exits with its code. Any other
exception is a bug and keeps its traceback.

The commands raise `CommandError` subclasses where a library exception means different things in
different places (a ValueError from a KFP submit is a refused request; a LookupError from the model
registry is an unknown version); the few library exceptions that mean the same everywhere
(`ConfigError`, a missing or forbidden file or directory) are mapped here directly.
"""

import sys
import textwrap
from typing import Optional, TextIO

from pipeline.config import ConfigError, redact_credentials

EXIT_OK, EXIT_FAILED, EXIT_BLOCKED, EXIT_USAGE = 0, 1, 2, 64
# sysexits.h EX_TEMPFAIL (as 64 is EX_USAGE): nothing failed and nothing was changed, and the same
# command will work later, so a scheduler can tell "skipped, the output root was busy" from a failure.
EXIT_BUSY = 75

EXIT_CODES = (
    (EXIT_OK, "success (`run`: the run completed, whether or not the model was blessed and pushed)"),
    (
        EXIT_FAILED,
        "failure: a pipeline run failed; a file or directory the command needs is missing or not "
        "permitted; "
        "a promote/rollback was refused (unknown version, nothing to roll back to, no registry "
        "under the output root; nothing was changed); a KFP host could not be reached, did not answer within "
        "kubeflow.request_timeout or answered with an HTTP error",
    ),
    (EXIT_BLOCKED, "a data gate (DataGate or TokenGate) stopped `run` or `validate`"),
    (
        EXIT_USAGE,
        "usage: unknown flag or config key, bad value, unreadable config or credentials file, "
        "a model.checkpoint `run` cannot fine-tune (checked before the pipeline starts: config.json, "
        "weight file headers, tokenizer size), "
        "a submit/schedule request KFP would refuse (cron, pipeline root, spec, no host), a pipeline "
        "root of a scheme other than gs:// or s3:// or naming a placeholder bucket",
    ),
    (
        EXIT_BUSY,
        "busy: another `run` or `validate` holds the output root (the message names it: run id, pid, host, "
        "start time); nothing was changed, run again when it has finished",
    ),
)


class CommandError(Exception):
    """An expected failure a command reports in one line; `exit_code` says which (see EXIT_CODES)."""

    exit_code = EXIT_FAILED


class Refused(CommandError):
    """A change the command will not make, e.g. a promotion to a version that was never pushed."""


class Blocked(CommandError):
    """A data gate (DataGate or TokenGate) stopped a `run` or `validate`: the data was refused."""

    exit_code = EXIT_BLOCKED


class Busy(CommandError):
    """The command needs something another process holds now, e.g. an output root a run is using."""

    exit_code = EXIT_BUSY


class UsageError(CommandError):
    """Arguments or configuration the command cannot use, e.g. a schedule KFP would reject."""

    exit_code = EXIT_USAGE


def exit_code(exc: BaseException) -> Optional[int]:
    """The exit code of an expected failure; None for an unexpected exception."""
    if isinstance(exc, CommandError):
        return exc.exit_code
    if isinstance(exc, ConfigError):
        return EXIT_USAGE
    if isinstance(exc, (FileNotFoundError, NotADirectoryError, PermissionError)):
        return EXIT_FAILED
    return None


def one_line(exc: BaseException) -> str:
    """`exc`'s message on one line (a multi-line message's lines joined), credentials redacted."""
    if isinstance(exc, OSError) and exc.filename and exc.strerror:  # raised by the OS: "[Errno 2] ..." reads badly
        message = f"{exc.filename}: {exc.strerror}"
    else:
        message = str(exc)
    line = ""
    for part in (part.strip() for part in message.splitlines()):
        if part:
            line += part if not line else (" " if line.endswith(":") else "; ") + part
    return redact_credentials(line)


def report(exc: BaseException, stream: Optional[TextIO] = None) -> Optional[int]:
    """Prints an expected failure as `textgen: <message>` and returns its exit code; returns None
    (printing nothing) for an unexpected exception, which the caller re-raises."""
    code = exit_code(exc)
    if code is not None:
        print(f"textgen: {one_line(exc)}", file=stream or sys.stderr)
    return code


def epilog() -> str:
    """The exit-code table for `textgen --help`."""
    rows = (
        textwrap.fill(meaning, width=96, initial_indent=f"  {code:<4}", subsequent_indent=" " * 6)
        for code, meaning in EXIT_CODES
    )
    return "exit status (an expected failure prints one line, `textgen: <message>`, on stderr):\n" + "\n".join(rows)
