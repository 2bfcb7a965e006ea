"""The run lock of an output root (pipeline/run_lock.py), held by small real processes: one of
several runs started together gets the root; a `textgen validate` on a held root exits 75 with
one line naming the holder and changes nothing; a lock left by a killed run is taken over with a
warning. No pipeline runs here (tests/test_overlapping_runs.py runs one beside a refused one)."""

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import textwrap

import pytest

from pipeline import errors, run_lock
from pipeline.config import PROJECT_ROOT
from pipeline.layout import OutputLayout
from textgen_cli.cli import EXIT_BUSY, main

# Takes the lock of the output root argv[1] and prints `held <run id>` (then holds it until its
# stdin closes), or prints `busy <message>` and ends.
_CONTENDER = textwrap.dedent("""
    import sys
    from pipeline import errors, run_lock
    from pipeline.layout import OutputLayout

    try:
        with run_lock.hold(OutputLayout(sys.argv[1])) as holder:
            print("held", holder.run_id, flush=True)
            sys.stdin.read()
    except errors.Busy as exc:
        print("busy", exc, flush=True)
""")


def _contender(output_root) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", _CONTENDER, str(output_root)],
        cwd=PROJECT_ROOT,
        env=dict(os.environ, PYTHONPATH=PROJECT_ROOT),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


@pytest.fixture
def processes():
    started = []
    yield started
    for process in started:
        if process.poll() is None:
            process.kill()
            process.wait()


def _holding(output_root, processes):
    """A process holding the lock of `output_root`, and its run id."""
    process = _contender(output_root)
    processes.append(process)
    verdict, run_id = process.stdout.readline().split(" ", 1)
    assert verdict == "held", run_id
    return process, run_id.strip()


def _files(root):
    """{relative path: bytes} of every file under `root`."""
    found = {}
    for directory, _, names in os.walk(root):
        for name in names:
            path = os.path.join(directory, name)
            with open(path, "rb") as handle:
                found[os.path.relpath(path, root)] = handle.read()
    return found


def test_of_runs_started_together_exactly_one_holds_the_root(tmp_path, processes):
    contenders = [_contender(tmp_path / "out") for _ in range(4)]
    processes.extend(contenders)
    # A loser prints and ends at once; the winner holds until its stdin closes, after all have answered.
    answers = [process.stdout.readline().split(" ", 1) for process in contenders]
    winners = [answer[1].strip() for answer in answers if answer[0] == "held"]
    assert len(winners) == 1, answers
    assert all(f"in use by run {winners[0]}" in answer[1] for answer in answers if answer[0] == "busy")
    for process in contenders:
        process.stdin.close()
        assert process.wait(timeout=30) == 0


def test_validate_on_a_held_root_exits_75_naming_the_holder_and_changes_nothing(tmp_path, processes, capsys):
    output_root, data_root = tmp_path / "out", tmp_path / "corpus"
    data_root.mkdir()
    holder, run_id = _holding(output_root, processes)
    before = _files(output_root)
    assert main(["validate", "--data-root", str(data_root), "--output-root", str(output_root)]) == EXIT_BUSY
    err = capsys.readouterr().err
    assert err.startswith("textgen: ") and err.count("\n") == 1, err
    assert f"output root {output_root} is in use by run {run_id} (pid {holder.pid} on {socket.gethostname()}" in err
    assert "nothing was changed" in err and str(output_root / "run.lock") in err
    assert _files(output_root) == before
    with pytest.raises(errors.Busy) as refused:
        with run_lock.hold(OutputLayout(str(output_root))):
            pass
    assert errors.exit_code(refused.value) == EXIT_BUSY
    assert _files(output_root) == before

    holder.stdin.close()  # the run ends and releases the root
    assert holder.wait(timeout=30) == 0
    assert (output_root / "run.lock").read_text() == ""
    with run_lock.hold(OutputLayout(str(output_root))) as holder_now:
        assert json.loads((output_root / "run.lock").read_text())["run_id"] == holder_now.run_id


def test_a_lock_left_by_a_killed_run_is_taken_over_with_a_warning(tmp_path, processes, caplog):
    output_root = tmp_path / "out"
    holder, run_id = _holding(output_root, processes)
    holder.send_signal(signal.SIGKILL)
    holder.wait(timeout=30)
    left = json.loads((output_root / "run.lock").read_text())
    assert (left["run_id"], left["pid"]) == (run_id, holder.pid)  # it could not clean up
    with caplog.at_level(logging.WARNING, logger=run_lock.__name__):
        with run_lock.hold(OutputLayout(str(output_root))) as taker:
            record = json.loads((output_root / "run.lock").read_text())
            assert (record["run_id"], record["pid"]) == (taker.run_id, os.getpid())
    assert taker.run_id != run_id
    assert f"from run {run_id} (pid {holder.pid} on {socket.gethostname()}" in caplog.text
    assert "ended without releasing it" in caplog.text
    assert (output_root / "run.lock").read_text() == ""


def test_run_ids_sort_by_start_time_and_name_files():
    first, second = run_lock.new_run_id(), run_lock.new_run_id()
    assert first != second and first[:16] <= second[:16]
    assert all(character.isalnum() or character == "-" for character in first)
