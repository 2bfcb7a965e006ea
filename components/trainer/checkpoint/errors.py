"""The one error type of checkpoint import."""


class CheckpointError(ValueError):
    """A checkpoint this project cannot import; the message is one line naming the file and the
    field or tensor at fault."""
