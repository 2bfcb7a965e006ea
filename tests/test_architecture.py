"""The package structure the project promises: components never import the pipeline package, no
project module takes part in an import cycle, and the configuration loads without TensorFlow.
Imports are read from the source, wherever they are in a module: a function-level import defers
loading but still ties the two modules together."""
import ast
import os

import pytest

from tests.conftest import PROJECT_ROOT

PACKAGES = ("components", "pipeline", "kubeflow")


def _modules():
    """{dotted module name: source path} of every module in the project's packages."""
    found = {}
    for package in PACKAGES:
        for directory, _, files in os.walk(os.path.join(PROJECT_ROOT, package)):
            for name in files:
                if name.endswith(".py"):
                    path = os.path.join(directory, name)
                    dotted = os.path.relpath(path, PROJECT_ROOT)[:-3].replace(os.sep, ".")
                    found[dotted.removesuffix(".__init__")] = path
    return found


def _imports(path: str, module: str):
    """Dotted names `module` imports anywhere in its source (relative imports resolved)."""
    tree = ast.parse(open(path, encoding="utf-8").read(), path)
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = module.split(".") if path.endswith("__init__.py") else module.split(".")[:-1]
                parent = package[: len(package) - (node.level - 1)]
                base = ".".join(parent + ([base] if base else []))
            names.append(base)
            names += [f"{base}.{alias.name}" for alias in node.names]
    return names


def test_components_never_import_the_pipeline_package():
    offenders = [
        f"{module} imports {name}"
        for module, path in _modules().items() if module.startswith("components")
        for name in _imports(path, module)
        if name == "pipeline" or name.startswith("pipeline.")
    ]
    assert not offenders, "\n".join(offenders)


def test_no_import_cycles_between_project_modules():
    modules = _modules()
    graph = {module: sorted({name for name in _imports(path, module) if name in modules} - {module})
             for module, path in modules.items()}
    index, low, stack, on_stack, cycles = {}, {}, [], set(), []

    def visit(node):  # Tarjan's strongly connected components
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for module in graph:
        if module not in index:
            visit(module)
    assert not cycles, f"import cycles: {cycles}"


@pytest.mark.parametrize("module", ["pipeline.config", "pipeline.cli"])
def test_light_modules_do_not_import_tensorflow(module):
    """The CLI's parser and the configuration load without TensorFlow or TFX (fast `--help`)."""
    import subprocess
    import sys

    code = (f"import sys, {module}; heavy = [m for m in ('tensorflow', 'tfx') if m in sys.modules]; "
            "print(','.join(heavy)); sys.exit(1 if heavy else 0)")
    done = subprocess.run([sys.executable, "-c", code], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"importing {module} loaded {done.stdout.strip()}: {done.stderr[-2000:]}"
