"""A TFX executor that writes its output artifact on GCS the way TF's GCS file system leaves it,
for tests that run `kubeflow/entrypoint.py` against a GCS emulator (tests/object_store.py).

It stands in for a real component's executor because TF's own GCS client cannot reach an emulator
(tests/object_store.py says why), so the objects are written with google-cloud-storage instead.
What it reproduces, from TF 2.16's tsl/platform/cloud/gcs_file_system.cc:
- `tf.io.gfile.makedirs(uri/sub)` creates each missing directory with `GcsFileSystem::CreateDir`,
  which uploads a zero-byte object named `<dir>/` (`MaybeAppendSlash`): one for the artifact URI
  and one for each folder inside it;
- the files themselves are objects under those prefixes.
"""

from typing import Any, Dict, List

from google.cloud import storage
from tfx.dsl.components.base import base_executor
from tfx.types import artifact_utils

# Relative to the output artifact's URI: the folders makedirs would create, then the files.
FOLDERS = ["", "Format-Serving", "Format-Serving/variables"]
FILES = {"Format-Serving/saved_model.pb": b"graph", "Format-Serving/variables/variables.index": b"index"}


class Executor(base_executor.BaseExecutor):
    """Writes FOLDERS as folder markers and FILES under its single output artifact `model`."""

    def Do(
        self, input_dict: Dict[str, List[Any]], output_dict: Dict[str, List[Any]], exec_properties: Dict[str, Any]
    ) -> None:
        uri = artifact_utils.get_single_uri(output_dict["model"])
        bucket_name, _, path = uri[len("gs://") :].partition("/")
        bucket = storage.Client(project=None).bucket(bucket_name)
        for folder in FOLDERS:
            bucket.blob("/".join(filter(None, [path, folder])) + "/").upload_from_string(b"")
        for name, data in FILES.items():
            bucket.blob(f"{path}/{name}").upload_from_string(data)
