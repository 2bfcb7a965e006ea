"""Two Pushers racing on one `s3://` serving directory and one model registry: distinct versions,
every push registered, models.config and the registry aliases as the last writers left them, and
no version holding the files of two models.

The S3 server is moto's, serving one request at a time so that its conditional PutObject is
atomic as S3's is (tests/object_store.py `_SerialMotoServer`). The Pushers are the real executor
(components/pusher/component.py) in two threads of one subprocess (tensorflow-io's S3 file system
aborts the process that used it at exit: components/filesystems.py): one pushes as `stable`, the
other as `canary`, and every round they start their pushes at the same moment. The registry is
the embedded MLflow SQLite store. The models are file-level SavedModel stand-ins
(tests/pusher_fixtures.py) whose variables differ, so a version mixing two models' files shows.
"""

import json
import subprocess
import sys
import textwrap

import pytest

from pipeline.config import PROJECT_ROOT
from tests.object_store import serial_s3  # noqa: F401  (a fixture)

pytestmark = pytest.mark.slow  # about a minute: 12 pushes through S3 and the registry

ROUNDS = 6
KEEP_VERSIONS = 3

_SCRIPT = textwrap.dedent("""
    import hashlib, json, os, sys, threading, traceback
    from components import filesystems

    filesystems.register()
    import tensorflow as tf
    from tfx.dsl.components.base import base_executor
    from tfx.types import standard_artifacts

    from components.pusher import serving_config
    from components.pusher.component import VersionedPusherExecutor
    from components.pusher.options import PusherOptions
    from components.versioned_push import existing_versions, is_complete_saved_model, read_push_info, version_path
    from components.registry import model_registry as registry
    from components.registry.options import RegistryOptions
    from tests.pusher_fixtures import fake_saved_model

    serving, registry_dir, work, rounds, keep = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
    VARIABLES = os.path.join("variables", "variables.data-00000-of-00001")
    start, pushes, failures, variables_of = threading.Barrier(2), [], [], {}

    def digest(path):
        with tf.io.gfile.GFile(path, "rb") as handle:
            return hashlib.sha256(handle.read()).hexdigest()

    def push(label, artifact_id):
        model = standard_artifacts.Model()
        model.uri, model.id = os.path.join(work, f"model-{artifact_id}"), artifact_id
        fake_saved_model(os.path.join(model.uri, "Format-Serving"))
        variables_of[artifact_id] = digest(os.path.join(model.uri, "Format-Serving", VARIABLES))
        blessing = standard_artifacts.ModelBlessing()
        blessing.id = artifact_id + 1
        blessing.set_int_custom_property("blessed", 1)
        pushed = standard_artifacts.PushedModel()
        executor = VersionedPusherExecutor(base_executor.BaseExecutor.Context(pipeline_run_id=f"run-{artifact_id}"))
        start.wait()
        executor.Do({"model": [model], "model_blessing": [blessing]}, {"pushed_model": [pushed]},
                    {"options": PusherOptions(model_name="textgen", keep_versions=keep, label=label).to_parameter(),
                     "registry": RegistryOptions().to_parameter(), "serving_dir": serving, "registry_dir": registry_dir})
        pushes.append({"label": label, "model_id": artifact_id, "version": pushed.get_int_custom_property("pushed_version"),
                       "registered": pushed.get_int_custom_property("registered_model_version")})

    def pusher(label, first_id):
        try:
            for round_ in range(rounds):
                push(label, first_id + 10 * round_)
        except BaseException:
            failures.append(traceback.format_exc())
            start.abort()

    threads = [threading.Thread(target=pusher, args=args) for args in (("stable", 1000), ("canary", 2000))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    versions = {}
    for version in existing_versions(serving):
        path = version_path(serving, version)
        model_id = read_push_info(path).get("model_id")
        versions[version] = {"complete": is_complete_saved_model(path), "model_id": model_id,
                             "matches": variables_of.get(model_id) == digest(os.path.join(path, VARIABLES))}
    model_registry = registry.ModelRegistry(registry.embedded_tracking_uri(registry_dir), "textgen")
    registered = {v.version: {"serving_version": v.tags[registry.TAG_SERVING_VERSION],
                              "model_id": v.tags[registry.TAG_MODEL_ID]}
                  for v in model_registry.client.search_model_versions("name='textgen'")}
    aliases = {alias: model_registry.alias_version(alias) for alias in ("production", "canary")}
    print("RESULT " + json.dumps({"failures": failures, "pushes": pushes, "labels": serving_config.read_labels(serving),
                                  "versions": versions, "registered": registered, "aliases": aliases}))
    filesystems.exit_process(0)
""")


def test_two_pushers_racing_on_s3_take_distinct_versions_and_keep_each_others_labels(serial_s3, tmp_path):
    s3 = serial_s3
    s3.create_bucket("race")
    serving = "s3://race/serving"
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            _SCRIPT,
            serving,
            str(tmp_path / "registry"),
            str(tmp_path / "work"),
            str(ROUNDS),
            str(KEEP_VERSIONS),
        ],
        cwd=PROJECT_ROOT,
        env=s3.env(PYTHONPATH=PROJECT_ROOT),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0 and "RESULT " in result.stdout, result.stderr[-4000:]
    outcome = json.loads(result.stdout.split("RESULT ", 1)[1])
    assert outcome["failures"] == [], "\n".join(outcome["failures"])
    pushes = outcome["pushes"]
    assert len(pushes) == 2 * ROUNDS
    # Distinct versions, each registered once, as its own model.
    assert len({push["version"] for push in pushes}) == len(pushes)
    assert len({push["registered"] for push in pushes}) == len(pushes) == len(outcome["registered"])
    for push in pushes:
        assert outcome["registered"][str(push["registered"])] == {
            "serving_version": str(push["version"]),
            "model_id": str(push["model_id"]),
        }
    # models.config: each label on its Pusher's last version (neither writer lost the other's label),
    # and the aliases follow.
    last = {label: [push for push in pushes if push["label"] == label][-1] for label in ("stable", "canary")}
    assert outcome["labels"] == {"stable": last["stable"]["version"], "canary": last["canary"]["version"]}
    assert outcome["aliases"] == {"production": last["stable"]["registered"], "canary": last["canary"]["registered"]}
    # Every version left is whole and one model's; the labelled ones are kept.
    versions = {int(version): facts for version, facts in outcome["versions"].items()}
    assert {last["stable"]["version"], last["canary"]["version"]} <= set(versions)
    assert all(facts["complete"] and facts["matches"] for facts in versions.values()), versions
    pushed_as = {push["version"]: push["model_id"] for push in pushes}
    assert all(facts["model_id"] == pushed_as[version] for version, facts in versions.items())
    keys = s3.keys("race", "serving/")
    assert not [key for key in keys if "/.incoming-" in key or "/.retired-" in key or "probe" in key], keys
    assert sorted(key for key in keys if key.startswith("serving/.version-claims/")) == sorted(
        f"serving/.version-claims/{version}" for version in versions
    )
