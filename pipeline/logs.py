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

    def filter(self, record: logging.LogRecord) -> bool:
        if record.pathname.endswith(os.path.join("portable", "launcher.py")) and str(record.msg).startswith("Execution "):
            return False  # "Execution 6 failed.": the CLI reports which component failed, and why, in one line
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
