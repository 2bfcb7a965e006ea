"""The project's structure, checked from the source (imports are read, not run, except where a
test says so):

- no import cycle among the project's modules (module-level and function-level imports alike: a
  function-level import defers loading but still ties the two modules together);
- components never import the `pipeline` package (the pipeline composes components, not the
  reverse);
- the top-level packages are layers, `components` < `pipeline` < `kubeflow` < `textgen_cli` (the
  CLI): none imports one above it, so `pipeline/` does not import `kubeflow/` and neither imports
  the CLI;
- the trainer's `model/` does not depend on `training/` or `serving/`, and `serving/` does not
  depend on `training/` (what both need lives in `model/`);
- a stage package (`components/<stage>/`) imports from another stage only that stage's products,
  and so does every shared module (see `test_stages_import_only_each_others_products`);
- the module the TFJob replicas run (`tfjob.REPLICA_MODULE`) exists and is runnable with `-m`;
- the configuration and the CLI parser load without TensorFlow or TFX.
"""

import ast
import os
import subprocess
import sys

import pytest

PROJECT_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

PACKAGES = ("components", "pipeline", "kubeflow", "textgen_cli")


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
                return stack[stack.index(child) :] + [child]
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
            assert not {
                i for i in imported if i.startswith(("components.trainer.training", "components.trainer.serving"))
            }, name


def test_serving_depends_on_model_not_on_training():
    """training's run_fn exports through serving, so serving importing training would point an
    arrow back up; what both use (the dtype policy, document framing) is in model/."""
    graph = _import_graph()
    offenders = sorted(
        f"{name} imports {imported}"
        for name, imported_modules in graph.items()
        if name.startswith("components.trainer.serving")
        for imported in imported_modules
        if imported.startswith("components.trainer.training")
    )
    assert not offenders, "\n".join(offenders)


LOOPS = (
    "components.trainer.training.drivers",
    "components.trainer.training.loop",
    "components.trainer.training.ps_loop",
    "components.trainer.training.sharded_loop",
    "components.trainer.training.strategy",
)


def test_training_methods_know_no_driver_and_run_fn_reads_at_a_glance():
    """A method (methods.py) supplies batches and data checks and imports no driver or loop, so a new
    method (preference tuning) touches methods.py, not the drivers; run_fn only composes."""
    graph = _import_graph()
    assert not graph["components.trainer.training.methods"] & set(LOOPS), graph["components.trainer.training.methods"]
    source = open(_project_modules()["components.trainer.training.run_fn"], encoding="utf-8").read()
    run_fn = next(node for node in ast.parse(source).body if getattr(node, "name", "") == "run_fn")
    assert run_fn.end_lineno - run_fn.lineno + 1 <= 40, "run_fn no longer fits on one screen"
    branches = [
        ast.unparse(node.test)
        for node in ast.walk(ast.parse(source))
        if isinstance(node, (ast.If, ast.IfExp))
        and ("sharded" in ast.unparse(node.test) or "server" in ast.unparse(node.test))
    ]
    assert not branches, branches  # the drivers own those branches


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
    offenders = sorted(
        f"{name} imports {imported}"
        for name, path in _project_modules().items()
        if name.startswith("components")
        for imported in _imported_names(path)
        if imported.split(".")[0] == "pipeline"
    )
    assert not offenders, "\n".join(offenders)


# The top-level packages from the bottom up. The stages and the services they share; the pipeline
# definition, its configuration and the local runner, which compose the stages; Kubeflow's
# compiler, container entry point and client, which compile and send that pipeline; the `textgen`
# command line, which drives the two. Each may import the ones before it, none one after it.
LAYERS = ("components", "pipeline", "kubeflow", "textgen_cli")


def test_no_package_imports_one_above_it():
    """Function-level imports count: a command that imports kubeflow/ inside a function still makes
    the package it lives in depend on kubeflow/."""
    assert set(LAYERS) == set(PACKAGES)
    offenders = sorted(
        f"{name} imports {imported}"
        for name, path in _project_modules().items()
        for imported in _imported_names(path)
        if imported.split(".")[0] in LAYERS and LAYERS.index(imported.split(".")[0]) > LAYERS.index(name.split(".")[0])
    )
    assert not offenders, "\n".join(offenders)


@pytest.mark.parametrize("module", ["pipeline.config", "textgen_cli.cli"])
def test_light_modules_do_not_import_tensorflow(module):
    """The CLI's parser and the configuration load without TensorFlow or TFX (fast `--help`)."""
    code = (
        f"import sys, {module}; heavy = [m for m in ('tensorflow', 'tfx') if m in sys.modules]; "
        "print(','.join(heavy)); sys.exit(1 if heavy else 0)"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"importing {module} loaded {done.stdout.strip()}: {done.stderr[-2000:]}"


# The stages' packages under components/ (one per pipeline stage).
STAGES = ("example_gen", "data_gate", "tokenizer", "transform", "trainer", "evaluator", "pusher")
# What each stage hands on, by module: the types of the artifacts it writes, the files and formats
# inside them and how to read them back, and (for the Trainer) the contract of the model it
# exports. Another stage, or a shared service, may import these and nothing else of that stage.
STAGE_PRODUCTS = {
    "example_gen": {
        "components.example_gen.ingest_report",  # the Examples' ingest_report.json (counts, removals)
        "components.example_gen.examples",  # reading documents back from its tf.Examples
        "components.example_gen.data_kind",  # the Examples' data_kind: plain text or conversations
    },
    "tokenizer": {
        "components.tokenizer.artifact",  # the Tokenizer artifact type
        "components.tokenizer.loaded",  # loading a Tokenizer artifact (or the one inside a SavedModel)
        "components.tokenizer.special",  # its special tokens and how documents are framed with them
        "components.tokenizer.hf_files",  # the checkpoint tokenizer files it may hold
        "components.tokenizer.model_file",  # where its model file is, in the artifact and in an export
        "components.tokenizer.chat_template",  # the chat template it carries, as a grammar
        "components.tokenizer.chat_graph",  # conversations rendered and tokenized with it in a graph
    },
    "transform": {"components.transform.preprocessing"},  # the transformed examples' feature keys
    "trainer": {
        "components.trainer.serving.signatures",  # the exported model's serving contract
        "components.trainer.training.record",  # training_record.json in the model artifact
        "components.trainer.training.data",  # the model's input: token streams and packed blocks
        "components.trainer.training.packing",  # the model's input for conversations: packed rows
        "components.trainer.checkpoint.preflight",  # which checkpoints it can start from, checked from their headers
    },
    "evaluator": {"components.evaluator.blessing_files"},  # evaluation.json / report.html in the blessing
    # The serving directory's version layout and push_info.json are a shared service
    # (components/versioned_push.py): the registry reads them without importing the Pusher.
    "pusher": set(),
}


def _stage(module: str):
    parts = module.split(".")
    return parts[1] if parts[0] == "components" and len(parts) > 2 and parts[1] in STAGES else None


def test_stages_import_only_each_others_products():
    """No stage reaches into another stage's package for something that is not that stage's
    product. A service several stages use (the model registry, the model client that calls an
    exported model, file systems, bundled resources) is not a stage's: it lives outside every stage
    package (`components/registry/`, `components/model_client.py`, other top-level
    `components/*.py`), and may itself import stage products only. The pipeline, the CLI and
    kubeflow/ wire the stages together and may import anything."""
    graph = _import_graph()
    offenders = sorted(
        f"{name} imports {imported}"
        for name, imported_modules in graph.items()
        if name.startswith("components.")
        for imported in imported_modules
        if _stage(imported) and _stage(imported) != _stage(name) and imported not in STAGE_PRODUCTS[_stage(imported)]
    )
    assert not offenders, "\n".join(offenders)
    modules = _project_modules()
    assert {product for products in STAGE_PRODUCTS.values() for product in products} <= set(modules)


def test_shared_services_live_outside_the_stage_packages():
    """The stages that use the model registry import it from its own package, not the Pusher's."""
    graph = _import_graph()
    assert "components.registry.model_registry" in graph and "components.model_client" in graph
    for stage_module in (
        "components.tokenizer.component",
        "components.trainer.training.run_fn",
        "components.evaluator.component",
        "components.pusher.component",
    ):
        assert "components.registry.model_registry" in graph[stage_module], stage_module
    assert not [name for name in graph if name.startswith("components.pusher.registry")]
    # The registry does not import the Pusher (which registers through it): the serving
    # directory's version layout they both read is components/versioned_push.py.
    assert "components.versioned_push" in graph["components.registry.model_registry"]
    assert not {
        imported
        for name, imported_modules in graph.items()
        if name.startswith("components.registry")
        for imported in imported_modules
        if imported.startswith("components.pusher")
    }
