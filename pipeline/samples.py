"""Sample generations from an exported model, for the end of a run and `textgen generate`."""
import os
from typing import List, Sequence

import tensorflow as tf
import tensorflow_text  # noqa: F401  registers the TF Text ops the transform graph uses


def load_prompts(path: str, limit: int) -> List[str]:
    """Prompts from a file: one per line, `#` lines ignored, the two characters \\n mean a newline."""
    prompts = []
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            line = line.rstrip("\n")
            if line.strip() and not line.startswith("#"):
                prompts.append(line.replace("\\n", "\n"))
    return prompts[:limit]


def generate(
    saved_model_dir: str,
    prompts: Sequence[str],
    max_new_tokens: int,
    temperature: float,
    top_k: int,
    seed: int = 0,
) -> List[str]:
    """Calls the model's `generate` signature on `prompts`; returns the continuations."""
    model = tf.saved_model.load(saved_model_dir)
    outputs = model.signatures["generate"](
        prompts=tf.constant(list(prompts)),
        max_new_tokens=tf.constant(max_new_tokens, tf.int32),
        temperature=tf.constant(temperature, tf.float32),
        top_k=tf.constant(top_k, tf.int32),
        seed=tf.constant(seed, tf.int64),
    )
    return [text.decode("utf-8", errors="replace") for text in outputs["generations"].numpy()]


def resolve_model_dir(path: str) -> str:
    """A SavedModel directory as given, or the highest integer version under a serving base path."""
    if tf.io.gfile.exists(os.path.join(path, "saved_model.pb")):
        return path
    if tf.io.gfile.isdir(path):
        versions = sorted(int(name.rstrip("/")) for name in tf.io.gfile.listdir(path) if name.rstrip("/").isdigit())
        if versions:
            return os.path.join(path, str(versions[-1]))
    raise FileNotFoundError(f"{path} is neither a SavedModel directory nor a serving directory with versions")
