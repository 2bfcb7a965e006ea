"""One sha256 naming a Hugging Face checkpoint's weights and configuration, for lineage: the
registry and the model card record which pretrained checkpoint a model was fine-tuned from.

The hash is over the sorted (file name, file sha256) lines of config.json and every safetensors
file (and the shard index), so a checkpoint copied elsewhere keeps its fingerprint and a changed
shard changes it. Files are streamed through tf.io.gfile (gs://, s3:// included), never held whole.
"""

import hashlib
import posixpath
from typing import Dict, List

import tensorflow as tf

_CHUNK = 8 << 20


def checkpoint_files(directory: str) -> List[str]:
    """The names of the files the fingerprint covers: config.json, *.safetensors, the index."""
    names = tf.io.gfile.listdir(directory)
    return sorted(
        name
        for name in names
        if name == "config.json" or name.endswith(".safetensors") or name.endswith(".safetensors.index.json")
    )


def file_sha256(path: str) -> str:
    digest = hashlib.sha256()
    with tf.io.gfile.GFile(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(_CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


def checkpoint_sha256(directory: str) -> str:
    """The checkpoint's fingerprint (see the module docstring)."""
    digests: Dict[str, str] = {
        name: file_sha256(posixpath.join(directory, name)) for name in checkpoint_files(directory)
    }
    lines = "".join(f"{name} {digest}\n" for name, digest in digests.items())
    return hashlib.sha256(lines.encode("utf-8")).hexdigest()
