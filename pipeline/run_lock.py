"""One local run at a time on an output root: the run lock.

`textgen run` and `textgen validate` hold `<output root>/run.lock` (the local directory of an
object-store output root, pipeline/layout.py) from before the pipeline starts until its summary
is written. Two runs on one output root would share ML Metadata, the drift baseline and
`last_run.json`, and each would report the other's components; the second one therefore stops
at once, changing nothing, with `Busy` (exit 75) naming the run that holds the root.

The lock is the kernel's: an exclusive `flock` on the lock file, which the kernel releases when
the holding process ends however it ends (killed, out of memory, power cut on reboot). The file
itself records who holds it (run id, pid, host, start time) so a refusal can name the holder, and
is emptied when the run ends. A run that finds the flock free but the file still naming a holder
knows that holder was killed before it could clean up: it takes the lock over and logs a warning
naming the run it replaces. A process never waits for the lock.

`generate`, `promote` and `rollback` do not take it: they only read pushed versions or rewrite
`models.config`, which is safe beside a running Pusher (components/pusher/serving_config.py).
"""

import contextlib
import datetime
import fcntl
import json
import logging
import os
import socket
import time
import uuid
from dataclasses import asdict, dataclass
from typing import Iterator, Optional

from pipeline import errors
from pipeline.layout import OutputLayout

log = logging.getLogger(__name__)

_RECORD_WAITS = 200  # x 10 ms: how long a refused run waits for the holder's record (`_named_holder`)


@dataclass(frozen=True)
class Holder:
    """The run that holds (or held) an output root's lock."""

    run_id: str
    pid: int
    host: str
    started: str  # ISO 8601, UTC

    def describe(self) -> str:
        return f"run {self.run_id} (pid {self.pid} on {self.host}, started {self.started})"


def new_run_id() -> str:
    """A run id that sorts by start time and is unique among runs started in the same second:
    `20261203T160401Z-3fa9c2`. It names the run's ML Metadata context and `runs/<run id>.json`."""
    return f"{datetime.datetime.now(datetime.timezone.utc):%Y%m%dT%H%M%SZ}-{uuid.uuid4().hex[:6]}"


def _read_holder(fd: int) -> Optional[Holder]:
    """The holder the lock file names; None when it is empty (free) or not a holder record."""
    os.lseek(fd, 0, os.SEEK_SET)
    text = b""
    while True:
        chunk = os.read(fd, 4096)
        if not chunk:
            break
        text += chunk
    try:
        return Holder(**json.loads(text.decode("utf-8")))
    except (ValueError, TypeError):  # empty, half-written by a holder just starting, or edited by hand
        return None


def _named_holder(fd: int) -> Optional[Holder]:
    """The holder of a held lock, for the refusal's message: a run records itself just after it
    takes the flock, so a run refused in between waits a moment for the record (only the message
    depends on it; the flock alone decides who holds the root)."""
    for _ in range(_RECORD_WAITS):
        holder = _read_holder(fd)
        if holder is not None:
            return holder
        time.sleep(0.01)
    return None


def _write_holder(fd: int, holder: Optional[Holder]) -> None:
    """Records `holder` in the lock file (None: empties it)."""
    os.ftruncate(fd, 0)
    if holder is not None:
        os.pwrite(fd, json.dumps(asdict(holder), sort_keys=True).encode("utf-8") + b"\n", 0)
    os.fsync(fd)


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, owned by another user
        return True
    return True


def _busy(layout: OutputLayout, holder: Optional[Holder]) -> errors.Busy:
    """The refusal of a run on an output root that `holder` holds."""
    who = holder.describe() if holder else "another run (it has not recorded itself in the lock file yet)"
    if holder and holder.host == socket.gethostname() and not _process_alive(holder.pid):
        who += f"; pid {holder.pid} has ended, but a process it started still holds the lock"
    return errors.Busy(
        f"output root {layout.output_root} is in use by {who}; nothing was changed: run again when it "
        f"has finished (lock file {layout.lock_path})"
    )


def check_free(layout: OutputLayout) -> None:
    """Raises `Busy` when a run holds `layout`'s output root; creates nothing (so a command can
    refuse before its slow checks, which `hold` then repeats for real)."""
    try:
        fd = os.open(layout.lock_path, os.O_RDWR)
    except FileNotFoundError:
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            raise _busy(layout, _named_holder(fd)) from None
    finally:
        os.close(fd)  # releases the shared flock, if it was taken


@contextlib.contextmanager
def hold(layout: OutputLayout) -> Iterator[Holder]:
    """Holds `layout`'s output root for one run (module docstring); yields the run's `Holder`,
    whose `run_id` the run uses. Raises `Busy`, changing nothing, when another run holds it."""
    os.makedirs(os.path.dirname(layout.lock_path) or ".", exist_ok=True)
    fd = os.open(layout.lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise _busy(layout, _named_holder(fd)) from None
        left = _read_holder(fd)
        if left is not None:
            log.warning(
                "Taking over the lock of output root %s from %s, which ended without releasing it",
                layout.output_root,
                left.describe(),
            )
        holder = Holder(
            new_run_id(),
            os.getpid(),
            socket.gethostname(),
            datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        )
        _write_holder(fd, holder)
        try:
            yield holder
        finally:
            _write_holder(fd, None)
    finally:
        os.close(fd)  # releases the flock
