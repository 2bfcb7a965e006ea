"""The object stores the project reads and writes, made usable in every process that may touch one.

The components use two file system layers, and a scheme works only where both open it:
- `tf.io.gfile` (schemas, tokenizer models, SavedModels, reports, the drift state, the serving
  directory). TF 2.16 itself opens local paths, `gs://` and `ram://`; `s3://` comes from
  tensorflow-io's file system plugin, which registers itself when `tensorflow_io` is imported.
- Beam's `FileSystems` (ExampleGen's output, TFDV, TF Transform). `gs://` needs apache-beam[gcp]
  and `s3://` apache-beam[aws] (boto3); both register when `apache_beam.io.filesystems` is imported.

`register()` does both, once per process: the CLI calls it before a local run, the Kubeflow
entrypoint before a step runs, and a TFJob replica before it trains.

S3 settings come from the environment, in tensorflow-io's (the AWS C++ SDK's) names, so a user
sets them once for both layers:

    S3_ENDPOINT            endpoint URL of an S3-compatible store, e.g. http://minio-service.kubeflow:9000
                           (unset: AWS S3). Path-style addressing is used with an endpoint.
    S3_USE_HTTPS           0 when S3_ENDPOINT is a bare host:port served over plain http
    AWS_REGION             the bucket's region (MinIO accepts any, e.g. us-east-1)
    AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY   credentials (or any other AWS credential source)
    S3_VERIFY_SSL          0 to skip TLS verification (tf.io.gfile, and Beam outside pipelines;
                           a CA bundle in S3_CA_FILE works for both everywhere)
    S3_CA_FILE             CA bundle for an https endpoint with a private CA

Beam's S3 file system builds a boto3 client from its pipeline options (`--s3_endpoint_url`, ...)
and boto3 fills what those leave out from the environment. `register()` derives both from the
variables above: boto3's names (AWS_ENDPOINT_URL_S3, AWS_DEFAULT_REGION, AWS_CA_BUNDLE; one the
user set is kept), which serve every Beam pipeline an executor builds from its own arguments and
every Beam worker process, and the S3 options (`beam_s3_options`) of the process-wide options
Beam's FileSystems use outside a pipeline (without any, Beam's S3 file system refuses to open).
Credentials stay in the environment: they never enter Beam arguments, which are recorded in ML
Metadata and in the compiled spec. With an endpoint set, the AWS C++ SDK's
EC2 metadata lookup (a minute of timeouts off AWS) is turned off (AWS_EC2_METADATA_DISABLED).

GCS folder markers: TF's own GCS file system (TF 2.16 core, tsl/platform/cloud/gcs_file_system.cc
`GcsFileSystem::CreateDir`) uploads a zero-byte object named `dir/` for every directory that
`tf.io.gfile.makedirs` creates. The open-source KFP launcher downloads each input artifact key by
key before a step runs and fails on such a marker ("mkdir ...: not a directory";
kubeflow/pipelines#13476). `remove_folder_markers` deletes them from a gs:// output artifact; the
Kubeflow entrypoint calls it for every output after a step succeeds. S3 has no such markers:
tensorflow-io's S3 file system creates none (tests/test_filesystems.py checks on a real server).

tensorflow-io 0.37.1 (the release for TF 2.16) aborts a process at exit, after any S3 access,
with "pure virtual method called" and status 134 (tensorflow/io#2039, open; fixed in its source
by PR #2120 after the last release). `exit_process` ends a process that may have used S3 without
running the C++ static destructors that crash, after Python's own exit handlers.
"""

import atexit
import os
import sys
from typing import Dict, Iterable, List, MutableMapping, NoReturn, Set

# URI schemes the project accepts for corpora, roots, state and serving locations ("" = a local path).
OBJECT_STORE_SCHEMES = ("gs", "s3")
ACCEPTED_SCHEMES = ("",) + OBJECT_STORE_SCHEMES

S3_ENDPOINT = "S3_ENDPOINT"
S3_USE_HTTPS = "S3_USE_HTTPS"
# tensorflow-io's S3 variables -> boto3's (Beam's S3 client) for the same setting.
_BOTO3_NAMES = {S3_ENDPOINT: "AWS_ENDPOINT_URL_S3", "AWS_REGION": "AWS_DEFAULT_REGION", "S3_CA_FILE": "AWS_CA_BUNDLE"}

_registered = False


class SchemeError(ValueError):
    """A location whose URI scheme the project's file systems cannot open."""


def scheme_of(uri: str) -> str:
    """The URI scheme of `uri` (`s3`, `gs`, ...), or "" for a local path."""
    return uri.split("://", 1)[0].lower() if "://" in uri else ""


def endpoint_url(env: MutableMapping[str, str]) -> str:
    """S3_ENDPOINT as a URL: a bare host:port gets http:// when S3_USE_HTTPS is 0, else https://."""
    endpoint = env.get(S3_ENDPOINT, "")
    if not endpoint or "://" in endpoint:
        return endpoint
    return ("http://" if env.get(S3_USE_HTTPS, "1") in ("0", "false", "False") else "https://") + endpoint


def configure_environment(env: MutableMapping[str, str]) -> None:
    """Derives boto3's S3 settings in `env` from tensorflow-io's (see the module docstring); a
    variable the user set is never replaced."""
    if env.get(S3_ENDPOINT):
        env[S3_ENDPOINT] = endpoint_url(env)
        env.setdefault("AWS_EC2_METADATA_DISABLED", "true")
    for tfio_name, boto3_name in _BOTO3_NAMES.items():
        if env.get(tfio_name):
            env.setdefault(boto3_name, env[tfio_name])


def beam_s3_options(env: MutableMapping[str, str]) -> Dict[str, object]:
    """Beam's S3Options for the S3 settings in `env` (endpoint, region, TLS verification)."""
    options: Dict[str, object] = {}
    if env.get(S3_ENDPOINT):
        options["s3_endpoint_url"] = endpoint_url(env)
    if env.get("AWS_REGION"):
        options["s3_region_name"] = env["AWS_REGION"]
    if env.get("S3_CA_FILE"):
        options["s3_verify"] = env["S3_CA_FILE"]
    elif env.get("S3_VERIFY_SSL") in ("0", "false", "False"):
        options["s3_verify"] = False
    return options


def register() -> None:
    """Makes every scheme in OBJECT_STORE_SCHEMES usable in this process, through tf.io.gfile and
    Beam's FileSystems (idempotent)."""
    global _registered
    if _registered:
        return
    configure_environment(os.environ)
    import tensorflow_io  # noqa: F401  (registers s3:// and others in tf.io.gfile)
    from apache_beam.io.filesystems import FileSystems  # registers Beam's gs:// and s3:// file systems
    from apache_beam.options.pipeline_options import PipelineOptions

    FileSystems.set_options(PipelineOptions(**beam_s3_options(os.environ)))

    _registered = True


def tensorflow_schemes() -> Set[str]:
    """Schemes tf.io.gfile opens in this process ("" = local paths)."""
    import tensorflow as tf

    return set(tf.io.gfile.get_registered_schemes()) | {""}


def beam_schemes() -> Set[str]:
    """Schemes Beam's FileSystems opens in this process ("" = local paths)."""
    from apache_beam.io.filesystem import FileSystem
    from apache_beam.io.filesystems import FileSystems

    schemes = {cls.scheme() for cls in FileSystem.get_all_subclasses() if cls.scheme()}
    try:
        FileSystems.get_filesystem(os.sep)  # the local file system has no scheme of its own
        schemes.add("")
    except ValueError:
        pass
    return schemes


def check_schemes(locations: Dict[str, str]) -> None:
    """Raises SchemeError naming the first location (a name -> URI mapping) whose scheme the
    project does not accept or this process's TF or Beam file systems cannot open."""
    register()
    opened = {"tf.io.gfile": tensorflow_schemes(), "Beam": beam_schemes()}
    for name, uri in locations.items():
        scheme = scheme_of(uri)
        if scheme not in ACCEPTED_SCHEMES:
            raise SchemeError(
                f"{name} {uri}: the {scheme}:// scheme is not supported "
                f"(use a local path or one of {', '.join(s + '://' for s in OBJECT_STORE_SCHEMES)})"
            )
        missing = [layer for layer, schemes in opened.items() if scheme not in schemes]
        if missing:
            raise SchemeError(
                f"{name} {uri}: the {scheme}:// scheme is not registered in {' and '.join(missing)} "
                f"(install tensorflow-io and apache-beam[gcp,aws] from requirements.lock)"
            )


def remove_folder_markers(uri: str) -> List[str]:
    """Deletes the GCS folder markers (zero-byte objects whose names end in '/') at and under the
    gs:// URI `uri` (module docstring); returns the URIs deleted. Any other scheme has none: [].

    Uses google-cloud-storage's client, which takes credentials from the environment as Beam's GCS
    file system does (and STORAGE_EMULATOR_HOST, for an emulator)."""
    if scheme_of(uri) != "gs":
        return []
    from google.cloud import storage

    bucket_name, _, path = uri[len("gs://") :].partition("/")
    prefix = path.strip("/") + "/" if path.strip("/") else None
    bucket = storage.Client(project=None).bucket(bucket_name)  # project=None: no project lookup needed
    removed = []
    for blob in bucket.list_blobs(prefix=prefix):
        if blob.name.endswith("/") and not blob.size:
            blob.delete()
            removed.append(f"gs://{bucket_name}/{blob.name}")
    return removed


def is_local(uri: str) -> bool:
    """True for a local path (no URI scheme)."""
    return not scheme_of(uri)


def _flush(streams: Iterable) -> None:
    for stream in streams:
        try:
            stream.flush()
        except (OSError, ValueError):  # closed or broken: nothing more can be written anyway
            pass


def exit_process(code: int) -> NoReturn:
    """Ends the process with `code`: Python's exit handlers run and the standard streams are
    flushed, then the process exits without the C++ static destructors that make tensorflow-io
    0.37.1 abort after S3 use (module docstring). Plain `sys.exit` when tensorflow-io is not loaded."""
    if "tensorflow_io" not in sys.modules:
        sys.exit(code)
    atexit._run_exitfuncs()  # pylint: disable=protected-access
    _flush((sys.stdout, sys.stderr))
    os._exit(code)  # pylint: disable=protected-access
