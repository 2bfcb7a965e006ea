"""Small helpers shared by the pusher, registry and serving-operations tests."""
import os


def fake_saved_model(directory, vocabulary: bytes = b"[PAD]\n[UNK]\nhello\n") -> str:
    """A directory shaped like an exported SavedModel (graph, variables, vocabulary asset). The
    push copies files and hashes the vocabulary; it never loads the graph."""
    directory = str(directory)
    os.makedirs(os.path.join(directory, "variables"))
    os.makedirs(os.path.join(directory, "assets"))
    with open(os.path.join(directory, "variables", "variables.index"), "wb") as handle:
        handle.write(b"index")
    with open(os.path.join(directory, "variables", "variables.data-00000-of-00001"), "wb") as handle:
        handle.write(os.urandom(256 * 1024))  # big enough that a copy takes a moment
    with open(os.path.join(directory, "assets", "wordpiece_vocabulary"), "wb") as handle:
        handle.write(vocabulary)
    with open(os.path.join(directory, "saved_model.pb"), "wb") as handle:
        handle.write(b"graph")
    return directory
