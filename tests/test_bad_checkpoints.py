"""Bad Hugging Face checkpoints as whole `textgen run`s: each refused before the pipeline starts,
with one `textgen:` line naming the file and the problem, exit 64, and nothing run or pushed.

Each case copies a tiny checkpoint (tests/hf_checkpoints.py: the Llama fixture with its tokenizer)
and damages it as a user's would be: a `model.safetensors` cut short by an interrupted download, a
tensor left out, a tensor of another shape than config.json implies, a tokenizer with more tokens
than the model's embedding has rows, and a `model_type` this project does not import. A checkpoint
directory that does not exist is a missing input (exit 1, as for a missing data root). The checks
read config.json, the safetensors headers and the tokenizer files only
(components/trainer/checkpoint/preflight.py), so each run ends in well under a second after the
configuration is read; the Tokenizer stage runs the same check inside a run
(tests/test_tokenizer_component.py).
"""

import json
import os

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from tests.hf_checkpoints import checkpoint_with_tokenizer
from textgen_cli.cli import EXIT_FAILED, EXIT_USAGE, main

WEIGHTS, CONFIG = "model.safetensors", "config.json"


def _truncate(directory: str) -> str:
    path = os.path.join(directory, WEIGHTS)
    size = os.path.getsize(path)
    with open(path, "r+b") as handle:
        handle.truncate(size // 2)
    return f"{path}: truncated: the file has {size // 2:,} bytes, but the data of the "


def _drop_tensor(directory: str) -> str:
    path = os.path.join(directory, WEIGHTS)
    tensors = load_file(path)
    del tensors["model.layers.1.mlp.up_proj.weight"]
    save_file(tensors, path)
    return f"{path}: tensor model.layers.1.mlp.up_proj.weight is missing (needed for the backbone's blocks.1.mlp_in.kernel)"


def _reshape_tensor(directory: str) -> str:
    path = os.path.join(directory, WEIGHTS)
    tensors = load_file(path)
    tensors["model.layers.0.mlp.down_proj.weight"] = tensors["model.layers.0.mlp.down_proj.weight"][:, :96].copy()
    save_file(tensors, path)
    return (
        f"{path}: tensor model.layers.0.mlp.down_proj.weight has shape [64, 96], expected [64, 128] from "
        f"{os.path.join(directory, CONFIG)}"
    )


def _edit_config(directory: str, **changes) -> None:
    path = os.path.join(directory, CONFIG)
    with open(path, encoding="utf-8") as handle:
        config = json.load(handle)
    config.update(changes)
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(config, handle)


def _shrink_embedding(directory: str) -> str:
    """A consistent checkpoint of 500 embedding rows (config.json, embedding and head agree) beside
    the 512-token tokenizer: ids 500-511 would have no row."""
    path = os.path.join(directory, WEIGHTS)
    tensors = load_file(path)
    for name in ("model.embed_tokens.weight", "lm_head.weight"):
        tensors[name] = np.ascontiguousarray(tensors[name][:500])
    save_file(tensors, path)
    _edit_config(directory, vocab_size=500)
    return (
        f"{os.path.join(directory, 'tokenizer.json')}: 512 tokens, more than the 500 rows of the model's token "
        f"embedding (vocab_size in {os.path.join(directory, CONFIG)}): ids 500-511 would have no embedding"
    )


def _unsupported_type(directory: str) -> str:
    _edit_config(directory, model_type="qwen2")
    return f'{os.path.join(directory, CONFIG)}: model_type="qwen2" is not supported (supported: gpt2, llama, mistral)'


@pytest.mark.parametrize(
    "damage",
    [_truncate, _drop_tensor, _reshape_tensor, _shrink_embedding, _unsupported_type],
    ids=[
        "truncated weights",
        "missing tensor",
        "wrong shape",
        "tokenizer larger than embedding",
        "unsupported model_type",
    ],
)
def test_a_bad_checkpoint_stops_the_run_before_it_starts_in_one_line_exit_64(damage, tmp_path, capsys):
    checkpoint = checkpoint_with_tokenizer("llama", str(tmp_path / "checkpoint"))
    expected = damage(checkpoint)
    corpus, output_root = tmp_path / "corpus", tmp_path / "out"
    corpus.mkdir()
    (corpus / "replies.txt").write_text("Thanks for writing.\n\nHappy to help.\n", encoding="utf-8")
    code = main(
        [
            "run",
            "--data-root",
            str(corpus),
            "--output-root",
            str(output_root),
            "--set",
            f"model.checkpoint={checkpoint}",
            "--set",
            "training.lora.rank=4",
        ]
    )
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("textgen: ")]
    assert code == EXIT_USAGE, err
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith(f"textgen: model.checkpoint: {expected}"), lines[0]
    assert not output_root.exists()  # nothing ran: no metadata, no run summary, nothing pushed


def test_a_checkpoint_directory_that_does_not_exist_is_a_missing_input_exit_1(tmp_path, capsys):
    missing = tmp_path / "no-checkpoint"
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    code = main(
        [
            "run",
            "--data-root",
            str(corpus),
            "--output-root",
            str(tmp_path / "out"),
            "--set",
            f"model.checkpoint={missing}",
        ]
    )
    err = capsys.readouterr().err
    assert code == EXIT_FAILED and err == f"textgen: checkpoint directory {missing} does not exist\n", err
    assert not (tmp_path / "out").exists()
