"""Warm start: initialise the backbone from a previously exported (blessed) serving model.

Only a model that tokenizes the same way is a valid starting point: its weights are indexed by
token id. The base model's tokenizer asset must have the same sha256 as this run's tokenizer
(the same vocabulary size is not enough: two learned models of one size assign different pieces
to the same ids), and every weight must be there with the same shape.

Weights are matched by name: each backbone variable's path of attribute names
(`blocks/0/attention/qkv/kernel`) is looked up in the object graph the SavedModel's variables
carry (as `tf.train.Checkpoint.read` walks it), and its value read and assigned, cast to the
variable's dtype, one tensor at a time. So a backbone with LoRA adapters starts from a model
exported with its adapters merged (every export is: model/lora.py): the merged kernels go into
the frozen base kernels and the adapters keep their initial values (the update starts at zero),
so step 0 computes what the production model computes (to float rounding), and the new
adapters train on top of it. Frozen weights stored as bfloat16 (model/backbone.py) get the export's float32
values rounded once, as every matmul rounded them before.
"""

import logging
import os
from typing import Dict, Optional, Tuple

import tensorflow as tf
import tf_keras as keras
from tensorflow.core.protobuf import trackable_object_graph_pb2

from components.tokenizer import hf_files, loaded, model_file
from components.trainer.model import lora

_OBJECT_GRAPH = "_CHECKPOINTABLE_OBJECT_GRAPH"
_VALUE = "VARIABLE_VALUE"
_ROOT = "backbone"  # the serving module's attribute holding the backbone (serving/export.py)
_SERVING_PROJECTION = "output_projection"  # the serving copy's own layer (serving/weights.py)


def tokenizer_mismatch(saved_model_dir: str, tokenizer_sha256: str) -> str:
    """Why the SavedModel's tokenizer is not the one with `tokenizer_sha256`, or "" when it is."""
    path = model_file.saved_model_model_path(saved_model_dir)
    assets = loaded.saved_model_dir(saved_model_dir)
    if tf.io.gfile.exists(path):
        base_sha256 = model_file.read_model(path).sha256
    elif tf.io.gfile.exists(os.path.join(assets, hf_files.SPECIAL_RECORD)):  # a checkpoint's tokenizer
        base_sha256 = loaded.load(assets).sha256
    else:
        return f"it has no SentencePiece tokenizer ({path} does not exist)"
    if base_sha256 != tokenizer_sha256:
        return (
            f"its tokenizer differs (sha256 {base_sha256[:12]}... vs this run's {tokenizer_sha256[:12]}...): "
            "token ids mean other pieces; use tokenizer.policy=reuse (or auto) to keep the tokenizer"
        )
    return ""


def _variable_paths(backbone: keras.Model) -> Dict[Tuple[str, ...], tf.Variable]:
    """Every variable of `backbone` but its LoRA adapters, by its path of attribute names from the
    backbone (`("blocks", "0", "attention", "qkv", "kernel")`): the names TensorFlow's object graph
    gives the backbone's children when it saves them, which a restore walks."""
    paths: Dict[Tuple[str, ...], tf.Variable] = {}
    seen = set()
    pending = [((), backbone)]
    while pending:  # breadth first: each object by its shortest path
        path, node = pending.pop(0)
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, tf.Variable):
            if not lora.is_adapter_variable(node):
                paths[path] = node
            continue
        pending.extend((path + (name,), child) for name, child in tf.train.TrackableView(node).children(node).items())
    return paths


class _SavedGraph:
    """The object graph of a SavedModel's variables (what `tf.train.Checkpoint.read` walks): which
    checkpoint key holds the variable at an attribute path below the serving module's backbone."""

    def __init__(self, variables_prefix: str):
        self.reader = tf.train.load_checkpoint(variables_prefix)
        self.shapes = self.reader.get_variable_to_shape_map()
        self.graph = trackable_object_graph_pb2.TrackableObjectGraph()
        self.graph.ParseFromString(self.reader.get_tensor(_OBJECT_GRAPH))

    def child(self, node: int, name: str) -> Optional[int]:
        return next((child.node_id for child in self.graph.nodes[node].children if child.local_name == name), None)

    def node(self, path: Tuple[str, ...]) -> Optional[int]:
        """The node at `path` below the root (0), or None."""
        node = 0
        for name in path:
            node = self.child(node, name)
            if node is None:
                return None
        return node

    def value_key(self, node: int) -> Optional[str]:
        return next(
            (attribute.checkpoint_key for attribute in self.graph.nodes[node].attributes if attribute.name == _VALUE),
            None,
        )

    def variables_below(self, node: int) -> Dict[int, str]:
        """node id -> checkpoint key of every variable reachable from `node`."""
        found, seen, pending = {}, set(), [node]
        while pending:
            current = pending.pop()
            if current in seen:
                continue
            seen.add(current)
            key = self.value_key(current)
            if key is not None:
                found[current] = key
            pending.extend(child.node_id for child in self.graph.nodes[current].children)
        return found


def _plan(paths: Dict[Tuple[str, ...], tf.Variable], saved: _SavedGraph) -> Tuple[Dict[str, tf.Variable], str]:
    """(checkpoint key -> variable, "") when the saved backbone has exactly this backbone's weights
    with the same shapes, else ({}, why not)."""
    root = saved.node((_ROOT,))
    if root is None:
        return {}, f"it has no {_ROOT}"
    keys, matched = {}, set()
    for path, variable in paths.items():
        node = saved.node((_ROOT,) + path)
        key = None if node is None else saved.value_key(node)
        name = "/".join(path)
        if key is None:
            return {}, f"it has no {name} (model changed, or an int8 export)"
        if tuple(saved.shapes[key]) != tuple(variable.shape):
            return {}, f"its {name} has shape {list(saved.shapes[key])}, this model's {variable.shape.as_list()}"
        keys[key] = variable
        matched.add(node)
    # The serving copy adds one [model_dim, vocab] output projection derived from the embedding
    # (serving/weights.py), saved beside the trained weights; it is not read back.
    projection = saved.node((_ROOT, _SERVING_PROJECTION))
    ignored = set(saved.variables_below(projection)) if projection is not None else set()
    extra = [key for node, key in saved.variables_below(root).items() if node not in matched and node not in ignored]
    if extra:
        return {}, f"it has {len(extra)} weight(s) this model does not, e.g. {extra[0]} (model changed)"
    return keys, ""


def warm_start_from(backbone: keras.Model, saved_model_dir: str, tokenizer_sha256: str) -> bool:
    """Copies the backbone weights of the SavedModel at `saved_model_dir` into `backbone`.

    Only when its tokenizer has `tokenizer_sha256` (this run's) and every weight matches by name
    and shape (LoRA adapters aside, see the module docstring); otherwise logs why and leaves the
    weights as they were. Returns whether weights were loaded.
    """
    mismatch = tokenizer_mismatch(saved_model_dir, tokenizer_sha256)
    if mismatch:
        logging.warning("Not warm-starting from %s: %s", saved_model_dir, mismatch)
        return False
    saved = _SavedGraph(os.path.join(saved_model_dir, "variables", "variables"))
    keys, mismatch = _plan(_variable_paths(backbone), saved)
    if mismatch:
        logging.warning("Not warm-starting from %s: %s", saved_model_dir, mismatch)
        return False
    for key, variable in keys.items():  # one tensor at a time
        variable.assign(tf.cast(saved.reader.get_tensor(key), variable.dtype))
    adapters = len(lora.adapter_layers(backbone))
    logging.info(
        "Warm-started from %s (%d weights%s)",
        saved_model_dir,
        len(keys),
        f"; {adapters} LoRA adapters start at zero on top of them" if adapters else "",
    )
    return True
