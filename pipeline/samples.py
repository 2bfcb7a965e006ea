"""Sample generations from an exported model, for the end of a run and `textgen generate`."""

import os
from typing import List, Sequence

import tensorflow as tf

from components.model_client import ModelClient
from components.pusher import serving_config
from components.trainer.serving import signatures


def load_prompts(path: str, limit: int) -> List[str]:
    """Prompts from a file: one per line, `#` lines ignored, the two characters \\n mean a newline."""
    prompts = []
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            line = line.rstrip("\n")
            if line.strip() and not line.startswith("#"):
                prompts.append(line.replace("\\n", "\n"))
    return prompts[:limit]


class UnusableModel(Exception):
    """A directory whose SavedModel cannot be loaded, or has no `generate` signature."""


def open_model(saved_model_dir: str) -> ModelClient:
    """A client for the `generate` signature of `saved_model_dir`; raises UnusableModel when the
    SavedModel cannot be parsed or lacks the signature (FileNotFoundError when there is none)."""
    try:
        return ModelClient(saved_model_dir, required=(signatures.GENERATE,))
    except FileNotFoundError:
        raise
    except (OSError, ValueError) as exc:  # an unparsable saved_model.pb; a model without `generate`
        raise UnusableModel(f"cannot generate from {saved_model_dir}: {exc}") from exc


def generate(
    saved_model_dir: str,
    prompts: Sequence[str],
    max_new_tokens: int,
    temperature: float,
    top_k: int,
    seed: int = 0,
    top_p: float = 1.0,
) -> List[str]:
    """Calls the model's `generate` signature on `prompts` (through the serving client); returns the continuations."""
    return open_model(saved_model_dir).generate(
        prompts, max_new_tokens, temperature, top_k=top_k, top_p=top_p, seed=seed
    )


def chat(
    saved_model_dir: str,
    conversations,
    max_new_tokens: int,
    temperature: float,
    top_k: int,
    seed: int = 0,
    top_p: float = 1.0,
):
    """The model's replies to `conversations` ((role, content) lists) through its chat template."""
    client = open_model(saved_model_dir)
    if not client.has_chat:
        raise UnusableModel(
            f"the model at {saved_model_dir} has no chat signature: it was trained on plain text "
            "(give prompts without --chat), or exported before chat models existed"
        )
    return client.chat(conversations, max_new_tokens, temperature, top_k=top_k, top_p=top_p, seed=seed)


def check_conversations(saved_model_dir: str, conversations) -> None:
    """Raises ValueError for a conversation the model's chat template refuses (a role it does not
    know, an order of roles it does not accept), as the template itself would."""
    from components.tokenizer import loaded

    spec = loaded.load(loaded.saved_model_dir(saved_model_dir)).chat()
    if spec is None:
        return  # `chat` says what is missing
    for conversation in conversations:
        spec.grammar.check_roles([role for role, _ in conversation], True)


MESSAGES_FORMS = (
    'a JSON list of {"role", "content"} messages, or a {"messages": [...]} record as in the training '
    "data (other keys ignored); a JSON Lines file holds one conversation in either form per line"
)


def _kind(value) -> str:
    """What a decoded JSON value is, in the words of JSON."""
    kinds = {dict: "an object", list: "a list", str: "a string", bool: "a boolean", int: "a number", float: "a number"}
    return kinds.get(type(value), "null")


def _conversation(value, where: str):
    """One conversation (a list of (role, content)) from a decoded JSON value in either form."""
    if isinstance(value, dict):
        if "messages" not in value:
            keys = ", ".join(repr(key) for key in sorted(value)) or "none"
            raise ValueError(
                f'{where}: an object needs a "messages" list (its keys: {keys}); expected {MESSAGES_FORMS}'
            )
        value = value["messages"]
    if not isinstance(value, list) or not value:
        got = "an empty list" if value == [] else _kind(value)
        raise ValueError(f"{where}: {got} is no conversation; expected {MESSAGES_FORMS}")
    turns = []
    for index, message in enumerate(value):
        if (
            not isinstance(message, dict)
            or not isinstance(message.get("role"), str)
            or not isinstance(message.get("content"), str)
        ):
            raise ValueError(f"{where}: message {index} is not an object with string role and content")
        turns.append((message["role"], message["content"]))
    return turns


def read_conversations(path: str):
    """The conversations of a `--messages` file (`MESSAGES_FORMS`): one from a JSON document, one
    per non-blank line from a JSON Lines file (such as the training data's .jsonl); ValueError
    names the file, the line and the problem."""
    import json

    with tf.io.gfile.GFile(path) as handle:
        text = handle.read()
    try:
        return [_conversation(json.loads(text), path)]
    except json.JSONDecodeError as exc:
        lines = [(number, line) for number, line in enumerate(text.splitlines(), 1) if line.strip()]
        if len(lines) < 2:
            raise ValueError(f"{path} is not valid JSON: {exc}") from None
    conversations = []
    for number, line in lines:
        try:
            value = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(
                f"{path} is neither one JSON document nor JSON Lines: line {number} is not valid JSON: {exc}"
            ) from None
        conversations.append(_conversation(value, f"{path} line {number}"))
    return conversations


def _versions(serving_dir: str) -> List[int]:
    """The integer version directories under a serving base path, lowest first."""
    return sorted(int(name.rstrip("/")) for name in tf.io.gfile.listdir(serving_dir) if name.rstrip("/").isdigit())


def resolve_model_dir(path: str, serving_dir: str = "") -> str:
    """A SavedModel directory as given; under a serving base path, the version its models.config
    labels `stable` (what TF Serving serves as stable: after a rollback, the version rolled back
    to), else the highest integer version; or (when `path` is a plain version number such as `3`)
    that version under `serving_dir`."""
    if path.isdigit() and serving_dir and not tf.io.gfile.exists(path):
        version_dir = os.path.join(serving_dir, path)
        if not tf.io.gfile.exists(os.path.join(version_dir, "saved_model.pb")):
            pushed = _versions(serving_dir) if tf.io.gfile.isdir(serving_dir) else []
            found = f"its versions are {', '.join(map(str, pushed))}" if pushed else "it holds no pushed version"
            raise FileNotFoundError(
                f"no pushed model version {path} under {serving_dir} ({found}); a version number is looked "
                "up under the --output-root's serving/ (default runs/local): give --output-root for another "
                "run's, or --model with the SavedModel's path"
            )
        return version_dir
    if tf.io.gfile.exists(os.path.join(path, "saved_model.pb")):
        return path
    if tf.io.gfile.isdir(path):
        stable = serving_config.read_labels(path).get(serving_config.STABLE_LABEL)
        if stable is not None:
            return os.path.join(path, str(stable))
        versions = _versions(path)
        if versions:
            return os.path.join(path, str(versions[-1]))
    raise FileNotFoundError(f"{path} is neither a SavedModel directory nor a serving directory with versions")
