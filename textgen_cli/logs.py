"""Terminal logging for `textgen`: readable progress by default, everything with --verbose."""

import logging
import os
import re
import sys
import tempfile
import warnings

from pipeline.config import PROJECT_ROOT


class ProgressFilter(logging.Filter):
    """Keeps the run's progress readable: component start/finish, this project's logs, errors."""

    _PROGRESS_SOURCES = (
        os.path.join(PROJECT_ROOT, "components") + os.sep,
        os.path.join(PROJECT_ROOT, "pipeline") + os.sep,
        os.path.join(PROJECT_ROOT, "kubeflow") + os.sep,
        os.path.join(PROJECT_ROOT, "textgen_cli") + os.sep,
    )
    # Errors the CLI reports itself, in its one `textgen:` line: (file logging it, start of the message).
    _REPORTED_BY_THE_CLI = (
        (os.path.join("portable", "launcher.py"), "Execution "),  # TFX: "Execution 6 failed."
        (os.path.join("kfp", "client", "client.py"), "Failed to get healthz info"),  # kfp.Client retrying /healthz
    )

    def filter(self, record: logging.LogRecord) -> bool:
        if any(
            record.pathname.endswith(path) and str(record.msg).startswith(start)
            for path, start in self._REPORTED_BY_THE_CLI
        ):
            return False
        if record.levelno >= logging.ERROR:
            return True
        if record.pathname.endswith("local_dag_runner.py"):  # it also dumps the whole pipeline IR
            return str(record.msg).startswith("Component ")
        return record.levelno >= logging.INFO and any(source in record.pathname for source in self._PROGRESS_SOURCES)


def configure(verbose: bool) -> None:
    """INFO progress lines (or everything with --verbose) on stderr; silences known third-party noise."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    warnings.filterwarnings("ignore", category=FutureWarning)
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s", "%H:%M:%S"))
    if not verbose:
        handler.addFilter(ProgressFilter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)
    from absl import logging as absl_logging  # absl routes through the stdlib 'absl' logger

    absl_logging.set_verbosity(absl_logging.INFO)
    logging.getLogger("absl").handlers[:] = []
    logging.getLogger("absl").propagate = True


# What TensorFlow 2.16 writes to stderr from C++ whenever it is imported: XLA's CUDA plugins try
# to register factories that the TensorFlow build registered already, and say so at ERROR level,
# on any machine, GPU or not. Harmless, but it reads as a failure; TF_CPP_MIN_LOG_LEVEL=3 would
# hide it together with every real error TensorFlow logs, so only these lines are dropped.
# oneDNN's note at the first int64 kernel of a process, on CPUs whose AVX-512 it does not use for
# int64 (the AMD EPYCs among them, with or without AVX-512), also at ERROR level though nothing
# failed: "oneDNN supports DT_INT64 only on platforms with AVX-512. Falling back to the default
# Eigen-based implementation if present." TensorFlow writes it once per process (util.cc), so
# `load_tensorflow` runs one int64 kernel while it captures stderr and drops it there.
_IMPORT_NOISE = re.compile(
    r"Unable to register (cuFFT|cuDNN|cuBLAS) factory: Attempting to register factory"
    r"|oneDNN supports DT_INT64 only on platforms with AVX-512\. Falling back to the default"
)


def load_tensorflow() -> None:
    """Imports TensorFlow with the process's stderr (file descriptor 2, where its C++ logging goes)
    captured, runs its first int64 kernel (`_first_int64_kernel`), then writes back everything it
    printed except the `_IMPORT_NOISE` lines, so a command's expected failure stays one `textgen:`
    line. A no-op once TensorFlow is loaded."""
    if "tensorflow" in sys.modules:
        return
    sys.stderr.flush()
    with tempfile.TemporaryFile() as captured:
        saved = os.dup(2)
        os.dup2(captured.fileno(), 2)
        try:
            import tensorflow

            _first_int64_kernel(tensorflow)
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            captured.seek(0)
            sys.stderr.write(without_import_noise(captured.read().decode("utf-8", "replace")))
            sys.stderr.flush()


def _first_int64_kernel(tf) -> None:
    """Runs one int64 kernel on the CPU, so that oneDNN's once-per-process DT_INT64 note (see
    `_IMPORT_NOISE`) is written now. Not on a host with a GPU: the op would start the GPU runtime,
    and reserve its memory, for commands that never use it (that note then shows as before)."""
    if tf.config.list_physical_devices("GPU"):
        return
    tf.transpose(tf.zeros([1, 1], tf.int64))


def without_import_noise(printed: str) -> str:
    """`printed` without its `_IMPORT_NOISE` lines."""
    return "".join(line for line in printed.splitlines(keepends=True) if not _IMPORT_NOISE.search(line))
