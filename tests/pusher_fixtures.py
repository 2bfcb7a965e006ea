"""Small helpers shared by the pusher, registry and serving-operations tests."""

import os


def fake_saved_model(directory, tokenizer: bytes = b"not a real SentencePiece model") -> str:
    """A directory shaped like an exported SavedModel (graph, variables, tokenizer asset). The
    push copies files and hashes the tokenizer model; it never loads either."""
    directory = str(directory)
    os.makedirs(os.path.join(directory, "variables"))
    os.makedirs(os.path.join(directory, "assets"))
    with open(os.path.join(directory, "variables", "variables.index"), "wb") as handle:
        handle.write(b"index")
    with open(os.path.join(directory, "variables", "variables.data-00000-of-00001"), "wb") as handle:
        handle.write(os.urandom(256 * 1024))  # big enough that a copy takes a moment
    with open(os.path.join(directory, "assets", "sentencepiece.model"), "wb") as handle:
        handle.write(tokenizer)
    with open(os.path.join(directory, "saved_model.pb"), "wb") as handle:
        handle.write(b"graph")
    return directory
