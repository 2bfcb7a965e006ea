"""What a compiled pipeline spec may contain to run on open-source Kubeflow Pipelines 2.x.

Read from kubeflow/pipelines' backend (2.0 to 2.17; ../shared/DESIGN.md section 4b):
- the Argo compiler (`backend/src/v2/compiler/argocompiler`) rejects `resolver` executors
  ("resolver executors not implemented") when a run is created, after the upload succeeded;
- no backend code reads `container.lifecycle` (TFX puts FileBasedExampleGen's span driver in
  `lifecycle.preCacheCheck`), so such a hook silently never runs;
- the OSS launcher resolves only object-store pipeline roots that TensorFlow's file system can
  also read when they are `gs://` or `s3://` (the default `minio://` is not readable by
  `tf.io.gfile`).
`problems` lists every such construct so `textgen compile` refuses to write a spec that a cluster
would reject or run wrongly, and the OSS-style test double refuses to run one.
"""
from typing import Any, Dict, List

OBJECT_STORE_SCHEMES = ("gs://", "s3://")


def problems(spec: Dict[str, Any]) -> List[str]:
    """Every construct in the pipeline spec `spec` (as parsed YAML) that OSS KFP cannot run."""
    found = []
    for label, executor in spec.get("deploymentSpec", {}).get("executors", {}).items():
        if "resolver" in executor:
            found.append(f"executor {label} is a resolver (OSS KFP: 'resolver executors not implemented')")
        if "lifecycle" in executor.get("container", {}):
            found.append(f"executor {label} has a container.lifecycle hook (never run by OSS KFP)")
    for name, task in spec.get("root", {}).get("dag", {}).get("tasks", {}).items():
        if "iteratorPolicy" in task:
            found.append(f"task {name} has an iteratorPolicy (not used by this project's runner double)")
    return found


def check_pipeline_root(pipeline_root: str) -> str:
    """`pipeline_root` if TF's file system and the KFP launcher can both use it; else raises."""
    if not pipeline_root.startswith(OBJECT_STORE_SCHEMES):
        raise ValueError(
            f"pipeline root {pipeline_root!r} is not a gs:// or s3:// URI: the components read and write it with "
            "tf.io.gfile, which cannot open KFP's default minio:// root or a pod-local path "
            "(pass --pipeline-root gs://BUCKET/... or s3://BUCKET/...)")
    return pipeline_root
