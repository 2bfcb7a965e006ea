"""Custom TFX components and user modules, one sub-package per pipeline stage."""
import os

# TF Transform 1.16 builds its graphs with Keras 2; make every process that imports the project
# use tf-keras before TensorFlow is first imported.
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
