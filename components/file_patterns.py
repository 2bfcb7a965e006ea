"""File patterns (`fn_args.train_files`, split URIs + `*`) to the files they match, on any filesystem."""

from typing import List, Sequence, Union

import tensorflow as tf

FilePatterns = Union[str, Sequence[str]]


def matching_files(file_patterns: FilePatterns, what: str) -> List[str]:
    """The sorted files matching `file_patterns` (one pattern or several; local paths or any URI
    `tf.io.gfile` reads); raises FileNotFoundError naming `what` when nothing matches."""
    patterns = [file_patterns] if isinstance(file_patterns, str) else list(file_patterns)
    files = sorted(path for pattern in patterns for path in tf.io.gfile.glob(pattern))
    if not files:
        raise FileNotFoundError(f"no {what} match {patterns}")
    return files
