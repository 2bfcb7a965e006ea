"""`textgen submit` and `textgen schedule`: one run, or a recurring run, of the compiled pipeline
on a Kubeflow Pipelines (v2) host, through the `kfp` client.

The request bodies are built here with the KFP API's own models (`kfp_server_api`, the same ones
`kfp.Client` builds), so `--dry-run` prints exactly what would be POSTed to
`/apis/v2beta1/runs` or `/apis/v2beta1/recurringruns`, and the real call sends it with the client's
public methods. Authentication: an existing bearer token read from an environment variable or a
file (e.g. a projected service-account token); without one, kfp.Client falls back to its in-cluster
service-account credentials. A token is never printed or written into the spec.
"""

import contextlib
import datetime
import json
import os
import re
import sys
from dataclasses import dataclass
from typing import Any, Dict, Optional, Tuple

import yaml

from kubeflow import oss_compat
from kubeflow.cron import validate_cron

RUNS_PATH = "/apis/v2beta1/runs"
RECURRING_RUNS_PATH = "/apis/v2beta1/recurringruns"


@dataclass(frozen=True)
class KfpTarget:
    """Where to send requests and as whom."""

    host: str
    namespace: str
    experiment: str
    token_env: str = "KFP_TOKEN"
    token_file: str = ""
    request_timeout: float = 60.0  # seconds to connect, and to wait for each answer (kubeflow.request_timeout)

    def token(self) -> Optional[str]:
        """The bearer token: the file wins over the environment variable; None when neither is set."""
        if self.token_file:
            try:
                with open(self.token_file, encoding="utf-8") as handle:
                    return handle.read().strip() or None
            except OSError as exc:
                raise ValueError(f"cannot read KFP token file {self.token_file}: {exc.strerror}") from None
        return os.environ.get(self.token_env) or None

    def describe_auth(self) -> str:
        if self.token_file:
            return f"bearer token from file {self.token_file}"
        if os.environ.get(self.token_env):
            return f"bearer token from ${self.token_env}"
        return "kfp.Client default credentials (in-cluster service account), no token given"


@dataclass(frozen=True)
class Schedule:
    """A recurring run's trigger and policies."""

    cron: str
    max_concurrency: int = 1
    catchup: bool = False
    start_time: Optional[str] = None
    end_time: Optional[str] = None

    def __post_init__(self):
        object.__setattr__(self, "cron", validate_cron(self.cron))
        if not 1 <= self.max_concurrency <= 10:
            raise ValueError(f"max concurrency must be 1-10 (KFP's limit), got {self.max_concurrency}")
        for name in ("start_time", "end_time"):
            value = getattr(self, name)
            if value is not None:
                try:
                    datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
                except ValueError:
                    raise ValueError(f"{name} '{value}' is not an ISO-8601 time (e.g. 2026-12-01T02:00:00Z)") from None


def load_pipeline_spec(path: str) -> Dict[str, Any]:
    """The compiled pipeline spec (the document KFP expects in `pipeline_spec`); refuses one that
    OSS KFP cannot run or that still names a placeholder bucket (oss_compat.RootError)."""
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path} does not exist; run `textgen compile` first")
    with open(path, encoding="utf-8") as handle:
        text = handle.read()
    documents = [document for document in yaml.safe_load_all(text) if document]
    spec = documents[0] if documents else None
    if not isinstance(spec, dict) or "root" not in spec or "deploymentSpec" not in spec:
        raise ValueError(f"{path} is not a KFP v2 pipeline spec (no root/deploymentSpec)")
    placeholders = oss_compat.placeholder_buckets(text)
    if placeholders:
        raise oss_compat.RootError(
            f"{path} names the placeholder bucket {', '.join(placeholders)} (the kubeflow.* defaults): compile it "
            "again with --pipeline-root, --data-root and --serving-dir naming your buckets"
        )
    problems = oss_compat.problems(spec)
    if problems:
        raise ValueError(
            f"{path} would not run on open-source Kubeflow Pipelines (compile it again with this "
            "version of textgen):\n  " + "\n  ".join(problems)
        )
    platform = {key: value for document in documents[1:] for key, value in document.items()}
    # As the kfp client sends a spec with a platform spec (kfp/client/client.py `_PipelineDoc`).
    return {"pipeline_spec": spec, "platform_spec": platform} if platform else spec


def spec_and_root(spec_path: str, pipeline_root: Optional[str], fallback_root: str) -> Tuple[Dict[str, Any], str]:
    """The spec at `spec_path` and the run's pipeline root: `pipeline_root` (--pipeline-root), else
    the root the spec was compiled with, else `fallback_root` (kubeflow.pipeline_root), checked
    with oss_compat. A root given explicitly is checked before the spec is read."""
    if pipeline_root:
        oss_compat.check_pipeline_root(pipeline_root)
    spec = load_pipeline_spec(spec_path)
    compiled_root = spec.get("pipeline_spec", spec).get(oss_compat.DEFAULT_PIPELINE_ROOT)
    return spec, oss_compat.check_pipeline_root(pipeline_root or compiled_root or fallback_root)


def _runtime_config(pipeline_root: str):
    import kfp_server_api

    return kfp_server_api.V2beta1RuntimeConfig(pipeline_root=pipeline_root, parameters={})


def run_body(spec: Dict[str, Any], run_name: str, pipeline_root: str, experiment_id: Optional[str]):
    """The V2beta1Run a submit POSTs."""
    import kfp_server_api

    return kfp_server_api.V2beta1Run(
        experiment_id=experiment_id,
        display_name=run_name,
        pipeline_spec=spec,
        runtime_config=_runtime_config(pipeline_root),
    )


def recurring_run_body(
    spec: Dict[str, Any], name: str, pipeline_root: str, schedule: Schedule, experiment_id: Optional[str]
):
    """The V2beta1RecurringRun a schedule POSTs."""
    import kfp_server_api

    return kfp_server_api.V2beta1RecurringRun(
        experiment_id=experiment_id,
        display_name=name,
        pipeline_spec=spec,
        runtime_config=_runtime_config(pipeline_root),
        mode=kfp_server_api.RecurringRunMode.ENABLE,
        no_catchup=not schedule.catchup,
        max_concurrency=schedule.max_concurrency,
        trigger=kfp_server_api.V2beta1Trigger(
            cron_schedule=kfp_server_api.V2beta1CronSchedule(
                cron=schedule.cron, start_time=schedule.start_time, end_time=schedule.end_time
            )
        ),
    )


def as_json(body) -> Dict[str, Any]:
    """A kfp_server_api model as the JSON the client sends."""
    import kfp_server_api

    return kfp_server_api.ApiClient().sanitize_for_serialization(body)


def dry_run(target: KfpTarget, path: str, body) -> Dict[str, Any]:
    """What would be sent: host, namespace, experiment, auth (never the token), and the request."""
    return {
        "host": target.host,
        "namespace": target.namespace,
        "experiment": target.experiment,
        "auth": target.describe_auth(),
        "request": {"method": "POST", "path": path, "body": as_json(body)},
    }


class HostError(Exception):
    """The KFP host could not be reached, or answered a request with an HTTP error."""


def _causes(exc: BaseException):
    """`exc`, then what it was raised from or while handling (urllib3's `reason` first)."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        reason = getattr(exc, "reason", None)
        exc = reason if isinstance(reason, BaseException) else exc.__cause__ or exc.__context__


def _network_reason(exc: BaseException) -> str:
    """What failed on the network: the OS's words where they are in the chain ("Connection
    refused"), else the message without urllib3's `<... object at 0x...>: ` prefix."""
    from_os = next((cause for cause in _causes(exc) if isinstance(cause, OSError) and cause.strerror), None)
    return from_os.strerror if from_os else re.sub(r"<[^>]* object at 0x[0-9a-f]+>: ", "", str(exc))


def _http_error(exc) -> str:
    """A kfp_server_api ApiException as `HTTP 403 Forbidden: <the server's message>`."""
    try:
        message = json.loads(exc.body).get("message", "")
    except (TypeError, ValueError, AttributeError):  # no body, not JSON, not an object
        message = ""
    return f"HTTP {exc.status} {exc.reason}" + (f": {message}" if message else "")


def _timed_out(exc: BaseException) -> bool:
    """Whether `exc` is urllib3's word for a connection or an answer that took too long (its
    NewConnectionError, e.g. a refused connection, subclasses ConnectTimeoutError but is not one)."""
    from urllib3.exceptions import ConnectTimeoutError, NewConnectionError, ReadTimeoutError

    return isinstance(exc, (ReadTimeoutError, ConnectTimeoutError)) and not isinstance(exc, NewConnectionError)


@contextlib.contextmanager
def talking_to(target: KfpTarget):
    """Runs kfp client calls for `target`: kfp's UI links go to stderr (stdout stays
    machine-readable), and a network failure, a request that timed out or an HTTP error becomes a
    HostError naming the host."""
    import kfp_server_api
    import urllib3

    with contextlib.redirect_stdout(sys.stderr):
        try:
            yield
        except kfp_server_api.ApiException as exc:
            raise HostError(f"KFP host {target.host} refused the request: {_http_error(exc)}") from exc
        except (urllib3.exceptions.HTTPError, OSError) as exc:  # OSError: a socket error urllib3 did not wrap
            if any(_timed_out(cause) for cause in _causes(exc)):
                raise HostError(
                    f"KFP host {target.host} did not answer within {target.request_timeout:g} s "
                    "(kubeflow.request_timeout)"
                ) from exc
            raise HostError(f"cannot reach KFP host {target.host}: {_network_reason(exc)}") from exc


def _bound_requests(api_client, seconds: float) -> None:
    """Makes every request of a kfp_server_api ApiClient give up after `seconds`: to connect, and
    then without an answer. kfp.Client (2.5) never passes `_request_timeout`, and kfp_server_api's
    rest.py then sends `timeout=None`, with which urllib3 waits forever on a host that accepts the
    connection and never answers. A read that timed out is not retried (urllib3 retries a GET's
    three times by default), so the wait stays `seconds`; refused connections are still retried."""
    import urllib3

    rest = api_client.rest_client
    if getattr(rest, "textgen_timeout", None) == seconds:
        return
    send = rest.request

    def request(method, url, *args, _request_timeout=None, **kwargs):
        # A (connect, read) pair: rest.py takes a tuple or an int, and ignores a float.
        return send(method, url, *args, _request_timeout=_request_timeout or (seconds, seconds), **kwargs)

    rest.request, rest.textgen_timeout = request, seconds
    rest.pool_manager.connection_pool_kw["retries"] = urllib3.Retry(total=3, read=0)


def connect(target: KfpTarget):
    """A kfp.Client for `target` whose requests time out (`_bound_requests`), after one /healthz
    request."""
    import kfp

    if not target.host:
        raise ValueError("no KFP host: pass --host or set kubeflow.host")

    class BoundedClient(kfp.Client):
        def get_kfp_healthz(self, sleep_duration: int = 5):
            """One /healthz request, timed out. kfp.Client's __init__ calls this (when its saved
            context has no namespace) before a caller could bound its requests, and kfp's own
            retries an HTTP error five times, 5 s apart, logging each."""
            _bound_requests(self._healthz_api.api_client, target.request_timeout)  # one ApiClient serves every API
            return self._healthz_api.get_healthz()

    client = BoundedClient(host=target.host, namespace=target.namespace, existing_token=target.token())
    client.get_kfp_healthz()
    return client


def submit(
    target: KfpTarget,
    spec_path: str,
    run_name: str,
    pipeline_root: Optional[str],
    fallback_root: str,
    dry: bool = False,
) -> Dict[str, Any]:
    """Submits one run (or, with `dry`, returns what would be sent); the pipeline root is chosen by
    `spec_and_root`."""
    spec, pipeline_root = spec_and_root(spec_path, pipeline_root, fallback_root)
    if dry:
        return dry_run(
            target, RUNS_PATH, run_body(spec, run_name, pipeline_root, "<id of experiment " + target.experiment + ">")
        )
    with talking_to(target):
        client = connect(target)
        experiment = client.create_experiment(target.experiment, namespace=target.namespace)
        run = client.run_pipeline(
            experiment_id=experiment.experiment_id,
            job_name=run_name,
            pipeline_package_path=spec_path,
            pipeline_root=pipeline_root,
        )
    return {"run_id": run.run_id, "experiment_id": experiment.experiment_id, "host": target.host}


def schedule(
    target: KfpTarget,
    spec_path: str,
    name: str,
    pipeline_root: Optional[str],
    fallback_root: str,
    trigger: Schedule,
    dry: bool = False,
) -> Dict[str, Any]:
    """Creates a recurring run (or, with `dry`, returns what would be sent); the pipeline root is
    chosen by `spec_and_root`."""
    spec, pipeline_root = spec_and_root(spec_path, pipeline_root, fallback_root)
    if dry:
        body = recurring_run_body(spec, name, pipeline_root, trigger, "<id of experiment " + target.experiment + ">")
        return dry_run(target, RECURRING_RUNS_PATH, body)
    with talking_to(target):
        client = connect(target)
        experiment = client.create_experiment(target.experiment, namespace=target.namespace)
        recurring = client.create_recurring_run(
            experiment_id=experiment.experiment_id,
            job_name=name,
            cron_expression=trigger.cron,
            max_concurrency=trigger.max_concurrency,
            no_catchup=not trigger.catchup,
            start_time=trigger.start_time,
            end_time=trigger.end_time,
            pipeline_package_path=spec_path,
            pipeline_root=pipeline_root,
        )
    return {
        "recurring_run_id": recurring.recurring_run_id,
        "experiment_id": experiment.experiment_id,
        "host": target.host,
    }
