"""Custom TFX components and user modules, one sub-package per pipeline stage.

This package is also the namespace of the project's custom artifact types. KFP v2 carries a
custom type only as a schema title of the form `<module>.<Class>` (one lowercase module name,
TFX 1.16's `compiler_utils._SCHEMA_TITLE_RE`), and TFX's container entrypoint imports that title
as a Python path inside the image. So every custom type's TYPE_NAME is `components.<Class>`, and
the class is reachable as an attribute of this package, imported lazily on first access so that
importing a light module (options, CLI) does not import TFX.
"""

import importlib
import os

# TF Transform 1.16 builds its graphs with Keras 2; make every process that imports the project
# use tf-keras before TensorFlow is first imported.
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

# Custom artifact type class name -> the module defining it. A new custom type adds a line here
# and sets TYPE_NAME = "components.<Class>"; tests/test_kubeflow_compile.py checks both.
ARTIFACT_TYPE_MODULES = {
    "DataGateResult": "components.data_gate.component",
    "AcceptedStatistics": "components.data_gate.accepted_statistics",
    "Tokenizer": "components.tokenizer.artifact",
}


def __getattr__(name: str):
    """Resolves `components.<ArtifactType>` (the schema title KFP carries) to its class."""
    module = ARTIFACT_TYPE_MODULES.get(name)
    if module is None:
        raise AttributeError(f"module 'components' has no attribute '{name}'")
    return getattr(importlib.import_module(module), name)
