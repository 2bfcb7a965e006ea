"""TF Serving's batching parameters file, written beside models.config.

TF Serving reads it with `--enable_batching --batching_parameters_file=<base>/batching_parameters`.
The file is a `BatchingParameters` text proto whose fields are wrapped scalars
(`max_batch_size { value: 32 }`); the proto is not in the tensorflow-serving-api wheel, so the
text is formatted here from the typed options.
"""

import os

from components.pusher.options import BatchingOptions
from components.pusher.serving_config import atomic_write_text

BATCHING_FILE_NAME = "batching_parameters"


def batching_parameters_text(batching: BatchingOptions) -> str:
    """The BatchingParameters text proto for `batching`."""
    lines = [
        f"max_batch_size {{ value: {batching.max_batch_size} }}",
        f"batch_timeout_micros {{ value: {batching.batch_timeout_micros} }}",
        f"max_enqueued_batches {{ value: {batching.max_enqueued_batches} }}",
        f"num_batch_threads {{ value: {batching.num_batch_threads} }}",
        f"pad_variable_length_inputs: {str(batching.pad_variable_length_inputs).lower()}",
    ]
    lines += [f"allowed_batch_sizes: {size}" for size in batching.allowed_batch_sizes]
    return "\n".join(lines) + "\n"


def write_batching_parameters(base_dir: str, batching: BatchingOptions) -> str:
    """Atomically writes `<base_dir>/batching_parameters`; returns its path."""
    return atomic_write_text(os.path.join(base_dir, BATCHING_FILE_NAME), batching_parameters_text(batching))
