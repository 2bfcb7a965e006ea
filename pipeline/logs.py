"""Terminal logging for `textgen`: readable progress by default, everything with --verbose."""
import logging
import os
import sys
import warnings

from pipeline.config import PROJECT_ROOT


class ProgressFilter(logging.Filter):
    """Keeps the run's progress readable: component start/finish, this project's logs, errors."""

    _PROGRESS_SOURCES = (
        os.path.join(PROJECT_ROOT, "components") + os.sep,
        os.path.join(PROJECT_ROOT, "pipeline") + os.sep,
        os.path.join(PROJECT_ROOT, "kubeflow") + os.sep,
    )
    # Errors the CLI reports itself, in its one `textgen:` line: (file logging it, start of the message).
    _REPORTED_BY_THE_CLI = (
        (os.path.join("portable", "launcher.py"), "Execution "),  # TFX: "Execution 6 failed."
        (os.path.join("kfp", "client", "client.py"), "Failed to get healthz info"),  # kfp.Client retrying /healthz
    )

    def filter(self, record: logging.LogRecord) -> bool:
        if any(record.pathname.endswith(path) and str(record.msg).startswith(start)
               for path, start in self._REPORTED_BY_THE_CLI):
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
