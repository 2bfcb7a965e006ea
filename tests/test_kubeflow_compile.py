"""`textgen compile`: a KFP v2 pipeline spec the kfp SDK loads, with every component.

No KFP cluster runs here; the test checks the compiled spec with the real kfp SDK loader.
"""
import kfp.components
import yaml

from pipeline.cli import main
from pipeline.pipeline import ACCEPTED_STATISTICS_RESOLVER_ID, BASELINE_RESOLVER_ID, COMPONENT_IDS


def test_compile_writes_a_kfp_loadable_spec_with_every_component(tmp_path):
    output_dir = tmp_path / "kfp"
    exit_code = main([
        "compile", "--output-dir", str(output_dir), "--image", "registry.example/textgen:1.0",
        "--pipeline-root", "gs://bucket/root", "--data-root", "gs://bucket/corpus",
    ])
    assert exit_code == 0
    path = output_dir / "pipeline.yaml"
    component = kfp.components.load_component_from_file(str(path))
    tasks = component.pipeline_spec.root.dag.tasks
    assert set(COMPONENT_IDS) <= set(tasks)
    assert any(task.startswith(BASELINE_RESOLVER_ID) for task in tasks)  # the Evaluator's baseline
    assert any(task.startswith(ACCEPTED_STATISTICS_RESOLVER_ID) for task in tasks)  # the drift baseline
    assert "DataGate" in tasks["Tokenizer"].dependent_tasks and "Tokenizer" in tasks["Transform"].dependent_tasks
    assert "title: components.Tokenizer" in path.read_text()  # importable inside the image (components/__init__.py)
    assert "DataGate" in tasks["RecordAcceptedStatistics"].dependent_tasks
    spec = yaml.safe_load(path.read_text())
    images = {executor["container"]["image"] for executor in spec["deploymentSpec"]["executors"].values() if "container" in executor}
    assert images == {"registry.example/textgen:1.0"}
    assert "gs://bucket/corpus" in path.read_text()
