"""The project's structure, checked from the source (imports are read, not run, except where a
test says so):

- no import cycle among the project's modules (module-level and function-level imports alike: a
  function-level import defers loading but still ties the two modules together);
- components never import the `pipeline` package (the pipeline composes components, not the
  reverse);
- the trainer's `model/` does not depend on `training/` or `serving/`;
- the module the TFJob replicas run (`tfjob.REPLICA_MODULE`) exists and is runnable with `-m`;
- the configuration and the CLI parser load without TensorFlow or TFX.
"""
import ast
import os
import subprocess
import sys

import pytest

PROJECT_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

PACKAGES = ("components", "pipeline", "kubeflow")


def _module_name(path: str) -> str:
    relative = os.path.relpath(path, PROJECT_ROOT)[: -len(".py")].split(os.sep)
    return ".".join(relative[:-1] if relative[-1] == "__init__" else relative)


def _project_modules() -> dict:
    modules = {}
    for package in PACKAGES:
        for folder, _, files in os.walk(os.path.join(PROJECT_ROOT, package)):
            for name in files:
                if name.endswith(".py"):
                    path = os.path.join(folder, name)
                    modules[_module_name(path)] = path
    return modules


def _imports(path: str, modules: dict) -> set:
    """The project modules `path` imports anywhere in its body (`from a import b` counts `a.b`
    when that is a module, else `a`)."""
    imported = set()
    for node in ast.walk(ast.parse(open(path, encoding="utf-8").read())):
        if isinstance(node, ast.Import):
            imported.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                submodule = f"{node.module}.{alias.name}"
                imported.add(submodule if submodule in modules else node.module)
    return {name for name in imported if name in modules}


def _import_graph() -> dict:
    modules = _project_modules()
    return {name: _imports(path, modules) for name, path in modules.items()}


def _cycle(graph: dict):
    """One import cycle as a list of modules, or None."""
    state, stack = {}, []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for child in sorted(graph.get(node, ())):
            if state.get(child) == "open":
                return stack[stack.index(child):] + [child]
            if child not in state:
                found = visit(child)
                if found:
                    return found
        stack.pop()
        state[node] = "done"
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_the_project_has_no_import_cycle():
    graph = _import_graph()
    assert "components.trainer.training.run_fn" in graph
    assert _cycle(graph) is None, " -> ".join(_cycle(graph))


def test_the_model_depends_on_neither_training_nor_serving():
    graph = _import_graph()
    for name, imported in graph.items():
        if name.startswith("components.trainer.model"):
            assert not {i for i in imported if i.startswith(("components.trainer.training", "components.trainer.serving"))}, name


def test_the_tfjob_replica_module_is_the_entry_point_that_runs_run_fn():
    from components.trainer.training import tfjob

    graph = _import_graph()
    command = tfjob.replica_command("/tmp/fn_args.json")
    assert command[:3] == ["python", "-m", tfjob.REPLICA_MODULE]
    assert "components.trainer.training.run_fn" in graph[tfjob.REPLICA_MODULE]
    assert "__main__" in open(_project_modules()[tfjob.REPLICA_MODULE], encoding="utf-8").read()
    # The launcher knows the replica by name only.
    assert not graph["components.trainer.training.tfjob"] & {tfjob.REPLICA_MODULE, "components.trainer.training.run_fn"}


def _imported_names(path: str) -> set:
    """Every module name `path` imports anywhere in its body, project or not."""
    names = set()
    for node in ast.walk(ast.parse(open(path, encoding="utf-8").read())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_components_never_import_the_pipeline_package():
    offenders = sorted(f"{name} imports {imported}" for name, path in _project_modules().items()
                       if name.startswith("components")
                       for imported in _imported_names(path) if imported.split(".")[0] == "pipeline")
    assert not offenders, "\n".join(offenders)


@pytest.mark.parametrize("module", ["pipeline.config", "pipeline.cli"])
def test_light_modules_do_not_import_tensorflow(module):
    """The CLI's parser and the configuration load without TensorFlow or TFX (fast `--help`)."""
    code = (f"import sys, {module}; heavy = [m for m in ('tensorflow', 'tfx') if m in sys.modules]; "
            "print(','.join(heavy)); sys.exit(1 if heavy else 0)")
    done = subprocess.run([sys.executable, "-c", code], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"importing {module} loaded {done.stdout.strip()}: {done.stderr[-2000:]}"
