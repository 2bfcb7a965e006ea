"""The OSS KFP double's pre-started interpreter (tests/prewarmed_interpreter.py): a forked child
runs `python -m MODULE ARGS` with exactly the environment, working directory, arguments and exit
status a fresh `python -m` process would have."""

import os
import subprocess
import sys
import textwrap

import pytest

from tests.prewarmed_interpreter import PrewarmedInterpreter

MODULE = textwrap.dedent("""
    import json, os, sys
    print(json.dumps({"argv": sys.argv[1:], "cwd": os.getcwd(), "env": dict(os.environ),
                      "preloaded": "csv" in sys.modules, "name": __name__}))
    if sys.argv[1] == "exit":
        sys.exit(int(sys.argv[2]))
    if sys.argv[1] == "raise":
        raise ValueError("the step failed")
    if sys.argv[1] == "hang":
        import time
        time.sleep(60)
""")


@pytest.fixture
def interpreter(tmp_path):
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "step_module.py").write_text(MODULE)
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(tmp_path / "lib"), "SHARED": "1", "HOME": str(tmp_path)}
    started = PrewarmedInterpreter(sys.executable, env, str(tmp_path / "server"), preload=("csv",))
    yield started, env, tmp_path
    started.close()


def _run(interpreter, env, tmp_path, *arguments, timeout_s=60.0):
    pod = tmp_path / "pod"
    pod.mkdir(exist_ok=True)
    pod_env = dict(env, HOME=str(pod), KFP_POD_NAME="step-1")
    argv = ["python", "-m", "step_module", *arguments]
    assert interpreter.serves(argv, pod_env)
    return interpreter.run(argv, pod_env, str(pod), str(pod / "log.txt"), timeout_s), pod_env, pod


def test_a_child_has_the_pods_environment_directory_arguments_and_the_preloaded_modules(interpreter):
    import json

    started, env, tmp_path = interpreter
    result, pod_env, pod = _run(started, env, tmp_path, "ok", "--flag=1")
    assert result.returncode == 0, result.stdout
    seen = json.loads(result.stdout.splitlines()[0])
    assert seen["argv"] == ["ok", "--flag=1"] and seen["cwd"] == str(pod) and seen["name"] == "__main__"
    assert seen["env"] == pod_env  # replaced, not merged: nothing of the server's own environment
    assert seen["preloaded"]
    assert (pod / "log.txt").read_text() == result.stdout


def test_exit_codes_are_those_of_a_fresh_process(interpreter):
    started, env, tmp_path = interpreter
    assert _run(started, env, tmp_path, "exit", "3")[0].returncode == 3
    failed = _run(started, env, tmp_path, "raise")[0]
    assert failed.returncode == 1 and "ValueError: the step failed" in failed.stdout
    assert _run(started, env, tmp_path, "exit", "0")[0].returncode == 0  # the server survives failed children


def test_a_step_past_its_timeout_is_killed(interpreter):
    started, env, tmp_path = interpreter
    with pytest.raises(subprocess.TimeoutExpired):
        _run(started, env, tmp_path, "hang", timeout_s=2.0)
    assert _run(started, env, tmp_path, "exit", "0")[0].returncode == 0


def test_another_environment_or_command_is_not_served(interpreter):
    started, env, _ = interpreter
    assert started.serves(["python", "-m", "step_module"], dict(env, HOME="/elsewhere", KFP_POD_UID="x"))
    assert not started.serves(["python", "-m", "step_module"], dict(env, SHARED="2"))
    assert not started.serves(["python", "script.py"], env)
