"""What a compiled pipeline spec may contain to run on open-source Kubeflow Pipelines 2.x.

Read from kubeflow/pipelines' backend, versions 2.0 to 2.17 (docs/kubeflow.md "Compiling" says
the same for users):
- the Argo compiler (`backend/src/v2/compiler/argocompiler`) rejects `resolver` executors
  ("resolver executors not implemented") when a run is created, after the upload succeeded;
- no backend code reads `container.lifecycle` (TFX puts FileBasedExampleGen's span driver in
  `lifecycle.preCacheCheck`), so such a hook silently never runs;
- the OSS launcher resolves only object-store pipeline roots that TensorFlow's file system can
  also read when they are `gs://` or `s3://` (the default `minio://` is not readable by
  `tf.io.gfile`).
`problems` lists every such construct so `textgen compile` refuses to write a spec that a cluster
would reject or run wrongly, and the OSS-style test double refuses to run one.

Roots and locations on the cluster are checked too: `check_scheme` refuses a URI scheme the
components cannot use (`textgen compile`), `check_pipeline_root` also a pod-local path and a
placeholder bucket (`textgen submit`/`schedule`), and `placeholder_buckets` finds the defaults'
`YOUR-BUCKET` (or the docs' `BUCKET`) anywhere in a spec: GCS and S3 bucket names are lower
case, so an upper-case bucket name is never a real one.
"""

import re
from typing import Any, Dict, List

from components import filesystems

# The URI prefixes of the object stores the components open (components/filesystems.py).
OBJECT_STORE_SCHEMES = tuple(f"{scheme}://" for scheme in filesystems.OBJECT_STORE_SCHEMES)
# The PipelineSpec field `textgen compile` records the pipeline root in; a KFP backend falls back to
# it when a run gives none.
DEFAULT_PIPELINE_ROOT = "defaultPipelineRoot"
# gs://BUCKET/..., s3://YOUR-BUCKET/...: a bucket name with an upper-case letter.
_PLACEHOLDER_BUCKET = re.compile(r"\b(?:gs|s3)://([a-z0-9._-]*[A-Z][A-Za-z0-9._-]*)")


class RootError(ValueError):
    """A pipeline root (or another cluster location) the pipeline cannot use."""


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


def placeholder_buckets(text: str) -> List[str]:
    """The placeholder bucket names (e.g. YOUR-BUCKET) of the gs:// and s3:// URIs in `text`."""
    return sorted(set(_PLACEHOLDER_BUCKET.findall(text)))


def _not_an_object_store_uri(pipeline_root: str, why: str) -> RootError:
    return RootError(
        f"pipeline root {pipeline_root!r} is not a gs:// or s3:// URI: the components read and write it "
        f"with tf.io.gfile, {why} (pass --pipeline-root gs://<bucket>/... or s3://<bucket>/...)"
    )


def check_scheme(pipeline_root: str) -> str:
    """`pipeline_root` unless it is a URI of a scheme other than gs:// and s3:// (a path is left to
    the caller: a volume every pod mounts, as the OSS test double uses); else raises RootError."""
    if "://" in pipeline_root and not pipeline_root.startswith(OBJECT_STORE_SCHEMES):
        raise _not_an_object_store_uri(pipeline_root, "which cannot open KFP's default minio:// root or other schemes")
    check_locations({"pipeline root": pipeline_root})
    return pipeline_root


def check_locations(locations: Dict[str, str]) -> None:
    """Raises RootError naming the first of `locations` (name -> URI; empty ones are skipped)
    whose scheme the image's file systems cannot open (components/filesystems.py)."""
    try:
        filesystems.check_schemes({name: uri for name, uri in locations.items() if uri})
    except filesystems.SchemeError as exc:
        raise RootError(str(exc)) from exc


def check_pipeline_root(pipeline_root: str) -> str:
    """`pipeline_root` if TF's file system and the KFP launcher can both use it and its bucket is
    not a placeholder; else raises RootError."""
    check_scheme(pipeline_root)
    if not pipeline_root.startswith(OBJECT_STORE_SCHEMES):
        raise _not_an_object_store_uri(pipeline_root, "and the KFP launcher cannot use a pod-local path")
    placeholders = placeholder_buckets(pipeline_root)
    if placeholders:
        raise RootError(
            f"pipeline root {pipeline_root!r} names the placeholder bucket {placeholders[0]} (bucket names are lower "
            "case): pass --pipeline-root gs://<your bucket>/... to compile (or submit)"
        )
    return pipeline_root
