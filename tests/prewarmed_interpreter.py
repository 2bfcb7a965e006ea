"""A pre-started image interpreter that forks one child per pipeline step, for the OSS KFP double.

Every step of the compiled pipeline is `python -m kubeflow.entrypoint ...`, whose first act is to
import TFX's KubeflowV2 executor runner (and with it TensorFlow, Beam and TFX): about 9 s of each
step's 10-40 s here, 16 steps a run. `PrewarmedInterpreter` starts the image's interpreter once,
imports exactly what the entrypoint imports before it reads its arguments (`PRELOADED`, in that
order), and then runs each step in a forked child, so a step starts where a fresh container's
interpreter would be after those imports.

What a child has, as a fresh container would: the step's argv (`python -m MODULE ARGS`, run with
`runpy` as `-m` runs it), exactly the pod's environment (`os.environ` replaced), the pod's working
directory, no stdin, stdout and stderr to a log file, and its own exit status (a `SystemExit`'s
code, 1 after an uncaught exception with the traceback on stderr, as the interpreter does).

What it does not reproduce, and why that is acceptable here:
- The preloaded modules were imported under the interpreter's environment, not the pod's. The
  double starts one interpreter per distinct environment with the per-pod variables left out
  (`PER_POD_VARIABLES`: KFP_POD_NAME, KFP_POD_UID and HOME, which the double gives each pod), so a
  variable a module reads at import time has the pod's value, except those three; a step whose
  environment differs in anything else gets an interpreter of its own.
- Module state the imports leave behind (registered ops and file systems, absl flags defined but
  not parsed) is what a fresh process has after the same imports; anything a step imports later
  is imported fresh in the child. Nothing of a finished step survives into the next: each child
  is forked from the untouched parent.
- A forked child inherits the parent's memory image copy-on-write; peak memory per step is what
  the step itself allocates plus the shared imports.
Only `python -m MODULE` commands are forked; anything else runs as a plain subprocess (`run`).
"""

import json
import os
import select
import subprocess
import time
from typing import Dict, List, Optional, Sequence

# What kubeflow/entrypoint.py's `main` imports before it parses its arguments, in its order.
PRELOADED = ("absl.app", "tfx.orchestration.kubeflow.v2.container.kubeflow_v2_run_executor", "components.filesystems")
PER_POD_VARIABLES = frozenset({"KFP_POD_NAME", "KFP_POD_UID", "HOME"})

# The interpreter's program: preload, then per request line {argv, env, cwd, log} fork a child that
# runs the module and answer {"pid"} at once and {"returncode"} when it exits.
_SERVER = r"""
import json, os, runpy, sys, traceback
for name in json.loads(sys.argv[1]):
    __import__(name)
requests, answers = sys.stdin, sys.stdout
answers.write("ready\n"); answers.flush()
for line in requests:
    request = json.loads(line)
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            null = os.open(os.devnull, os.O_RDONLY)
            os.dup2(null, 0); os.dup2(log, 1); os.dup2(log, 2)
            sys.stdin = open(0, closefd=False)
            sys.stdout = open(1, "w", closefd=False, buffering=1)
            sys.stderr = open(2, "w", closefd=False, buffering=1)
            os.chdir(request["cwd"])
            os.environ.clear(); os.environ.update(request["env"])
            module, arguments = request["argv"][2], request["argv"][3:]
            sys.argv = [module] + arguments
            try:
                runpy.run_module(module, run_name="__main__", alter_sys=True)
                code = 0
            except SystemExit as exit:
                code = exit.code if isinstance(exit.code, int) else (0 if exit.code is None else 1)
                if exit.code is not None and not isinstance(exit.code, int):
                    print(exit.code, file=sys.stderr)
            except BaseException:
                traceback.print_exc()
                code = 1
        finally:
            try:
                sys.stdout.flush(); sys.stderr.flush()
            finally:
                os._exit(code)
    answers.write(json.dumps({"pid": pid}) + "\n"); answers.flush()
    _, status = os.waitpid(pid, 0)
    answers.write(json.dumps({"returncode": os.waitstatus_to_exitcode(status)}) + "\n"); answers.flush()
"""


def _shared_env(env: Dict[str, str]) -> Dict[str, str]:
    return {key: value for key, value in env.items() if key not in PER_POD_VARIABLES}


class PrewarmedInterpreter:
    """One running interpreter (see the module docstring); `run` serves one step at a time."""

    def __init__(self, python: str, env: Dict[str, str], work_dir: str, preload: Sequence[str] = PRELOADED):
        os.makedirs(work_dir, exist_ok=True)
        self.env = _shared_env(env)
        start_env = dict(self.env, HOME=work_dir)
        with open(os.path.join(work_dir, "server.log"), "w") as server_log:
            self.process = subprocess.Popen(
                [python, "-c", _SERVER, json.dumps(list(preload))],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=server_log,
                cwd=work_dir,
                env=start_env,
            )
        self._pending = b""
        if self._line(None) != "ready":
            raise RuntimeError(
                f"the pre-started interpreter failed to import {list(preload)} "
                f"(see {os.path.join(work_dir, 'server.log')})"
            )

    def serves(self, argv: Sequence[str], env: Dict[str, str]) -> bool:
        """Whether this interpreter can run the command `argv` in the environment `env`."""
        return len(argv) >= 3 and argv[1] == "-m" and _shared_env(env) == self.env and self.process.poll() is None

    def run(
        self, argv: List[str], env: Dict[str, str], cwd: str, log_path: str, timeout_s: float
    ) -> subprocess.CompletedProcess:
        """Runs `argv` (`python -m MODULE ...`) in a forked child; its stdout and stderr, together,
        are written to `log_path` and returned as the result's stdout."""
        request = {"argv": list(argv), "env": dict(env), "cwd": cwd, "log": log_path}
        self.process.stdin.write((json.dumps(request) + "\n").encode())
        self.process.stdin.flush()
        pid = json.loads(self._line(None))["pid"]
        answer = self._line(time.monotonic() + timeout_s)
        if answer is None:
            os.kill(pid, 9)
            self._line(None)
            raise subprocess.TimeoutExpired(argv, timeout_s)
        with open(log_path, encoding="utf-8", errors="replace") as handle:
            output = handle.read()
        return subprocess.CompletedProcess(argv, json.loads(answer)["returncode"], output, "")

    def _line(self, deadline: Optional[float]) -> Optional[str]:
        """The interpreter's next answer line, or None when `deadline` (monotonic) passes first
        (read from the pipe's file descriptor directly, so no buffer hides a line from select)."""
        descriptor = self.process.stdout.fileno()
        while b"\n" not in self._pending:
            wait = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready, _, _ = select.select([descriptor], [], [], wait)
            if not ready:
                return None
            chunk = os.read(descriptor, 65536)
            if not chunk:
                raise RuntimeError("the pre-started interpreter exited (see its server.log)")
            self._pending += chunk
        line, self._pending = self._pending.split(b"\n", 1)
        return line.decode()

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.stdin.close()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
