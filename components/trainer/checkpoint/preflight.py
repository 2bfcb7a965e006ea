"""A Hugging Face checkpoint checked before anything runs: from config.json, the safetensors
headers and the tokenizer's size, without building a backbone or reading a weight.

What it refuses, each with one `CheckpointError` line naming the file and the problem: a
config.json this project cannot import (an unsupported `model_type` or architecture field, a
`model.*` setting that conflicts with it), a safetensors file shorter than its header says
(truncated), a tensor that is missing, of another shape than config.json implies, of an
unreadable dtype or not part of the backbone, and a tokenizer whose vocabulary is not the
model's embedding (more tokens than rows: ids without an embedding). Reading headers costs a few
kilobytes per file, local or remote, so the check runs where it stops a run earliest:

- `textgen run`, before the pipeline starts (textgen_cli/commands.py; exit 64, nothing ran);
- the Tokenizer stage, the first stage of a run that meets the checkpoint (on Kubeflow no CLI
  reads it), before Transform and the Trainer.

The Trainer's import (hf_weights.load_weights) runs the same tensor check again before it assigns
a weight, for a checkpoint changed in between.
"""

import os
from typing import NamedTuple, Optional

import tensorflow as tf

from components.tokenizer import hf_files, loaded, model_file
from components.trainer.checkpoint.errors import CheckpointError
from components.trainer.checkpoint.hf_config import (
    CheckpointConfig,
    check_vocabulary,
    checkpoint_model_options,
    read_config,
)
from components.trainer.checkpoint.hf_weights import check_tensors, tensor_plan
from components.trainer.checkpoint.safetensors_files import SafetensorsCheckpoint
from components.trainer.options import ModelOptions

# The file that defines each tokenizer kind (named in messages).
_DEFINING_FILES = (
    hf_files.TOKENIZER_JSON,
    hf_files.SENTENCEPIECE_FILE,
    hf_files.VOCAB_JSON,
    model_file.MODEL_FILE_NAME,
)


class CheckedCheckpoint(NamedTuple):
    """What the check found: the resolved model options, the config, and how many tensors hold weights."""

    model: ModelOptions
    config: CheckpointConfig
    tensors: int


def _check_exists(directory: str) -> None:
    if not tf.io.gfile.isdir(directory):
        raise FileNotFoundError(f"checkpoint directory {directory} does not exist")


def tokenizer_file(tokenizer: loaded.LoadedTokenizer) -> str:
    """The path of the file that defines `tokenizer` (for messages)."""
    name = next((name for name in _DEFINING_FILES if name in tokenizer.files), "")
    return os.path.join(tokenizer.source, name) if name else tokenizer.source


def checkpoint_tokenizer(directory: str) -> loaded.LoadedTokenizer:
    """The tokenizer of the checkpoint at `directory`. A missing directory is a FileNotFoundError;
    missing or unsupported tokenizer files are a `CheckpointError`: they make the checkpoint
    unusable, like a bad config.json."""
    _check_exists(directory)
    try:
        return loaded.load(directory)
    except (ValueError, FileNotFoundError) as error:
        raise CheckpointError(str(error)) from None


def check_checkpoint(
    directory: str, model: Optional[ModelOptions] = None, tokenizer: Optional[loaded.LoadedTokenizer] = None
) -> CheckedCheckpoint:
    """Checks the checkpoint at `directory` as the module docstring says: its architecture against
    the run's `model` options (when given), its weights' headers against config.json, and the
    run's `tokenizer` (when given) against its embedding. A missing directory is a
    FileNotFoundError; anything else a `CheckpointError`."""
    _check_exists(directory)
    config = read_config(directory)
    resolved = checkpoint_model_options(model or ModelOptions(checkpoint=directory), config)
    with SafetensorsCheckpoint(directory) as files:
        tensors = check_tensors(
            files, tensor_plan(resolved, config.vocab_size, config, files.names(), files.source), config
        )
    if tokenizer is not None:
        check_vocabulary(config, tokenizer.vocab_size, tokenizer_file(tokenizer))
    return CheckedCheckpoint(resolved, config, tensors)
