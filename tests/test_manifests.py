"""kubeflow/manifests parse as Kubernetes YAML and agree with what the Pusher writes.

No cluster runs here; the checks are structural (every document is a named, namespaced
Kubernetes object; Services select their Deployment's pods; TF Serving reads the files the Pusher
writes, under the names the pusher modules define).
"""

import glob
import os

import yaml

from components.pusher.batching import BATCHING_FILE_NAME
from components.pusher.monitoring import MONITORING_FILE_NAME
from components.pusher.options import MonitoringOptions
from components.pusher.serving_config import CONFIG_FILE_NAME
from pipeline.config import PROJECT_ROOT

MANIFESTS = sorted(glob.glob(os.path.join(PROJECT_ROOT, "kubeflow", "manifests", "*.yaml")))


def _documents():
    for path in MANIFESTS:
        with open(path, encoding="utf-8") as handle:
            for document in yaml.safe_load_all(handle):
                if document:
                    yield os.path.basename(path), document


def test_every_manifest_is_a_named_namespaced_kubernetes_object():
    documents = list(_documents())
    assert {name for name, _ in documents} == {os.path.basename(p) for p in MANIFESTS} and len(MANIFESTS) >= 3
    for name, document in documents:
        assert {"apiVersion", "kind", "metadata"} <= set(document), name
        assert document["metadata"].get("name") and document["metadata"].get("namespace"), name


def test_services_select_their_deployments_pods():
    documents = [d for _, d in _documents()]
    deployments = {d["metadata"]["name"]: d for d in documents if d["kind"] == "Deployment"}
    services = [d for d in documents if d["kind"] == "Service"]
    assert {s["metadata"]["name"] for s in services} == set(deployments) == {"textgen-serving", "mlflow"}
    for service in services:
        pod_labels = deployments[service["metadata"]["name"]]["spec"]["template"]["metadata"]["labels"]
        assert service["spec"]["selector"].items() <= pod_labels.items()
        container_ports = {
            p["name"]
            for c in deployments[service["metadata"]["name"]]["spec"]["template"]["spec"]["containers"]
            for p in c["ports"]
        }
        assert {p["targetPort"] for p in service["spec"]["ports"]} <= container_ports


def test_tf_serving_reads_the_files_the_pusher_writes_and_polls_the_config():
    (serving,) = [
        d for _, d in _documents() if d["kind"] == "Deployment" and d["metadata"]["name"] == "textgen-serving"
    ]
    args = serving["spec"]["template"]["spec"]["containers"][0]["args"]
    flags = dict(arg[2:].split("=", 1) for arg in args)
    assert flags["model_config_file"].endswith("/" + CONFIG_FILE_NAME)
    assert flags["batching_parameters_file"].endswith("/" + BATCHING_FILE_NAME)
    assert os.path.dirname(flags["model_config_file"]) == os.path.dirname(flags["batching_parameters_file"])
    assert int(flags["model_config_file_poll_wait_seconds"]) > 0
    assert (
        flags["enable_batching"]
        == flags["enable_model_warmup"]
        == flags["allow_version_labels_for_unavailable_models"]
        == "true"
    )


def test_tf_serving_exposes_the_prometheus_metrics_the_pusher_configures_and_the_pods_are_scraped():
    (serving,) = [
        d for _, d in _documents() if d["kind"] == "Deployment" and d["metadata"]["name"] == "textgen-serving"
    ]
    pod = serving["spec"]["template"]
    flags = dict(arg[2:].split("=", 1) for arg in pod["spec"]["containers"][0]["args"])
    assert flags["monitoring_config_file"].endswith("/" + MONITORING_FILE_NAME)
    assert os.path.dirname(flags["monitoring_config_file"]) == os.path.dirname(flags["model_config_file"])
    annotations = pod["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert annotations["prometheus.io/port"] == flags["rest_api_port"]  # TF Serving serves metrics on the REST port
    assert annotations["prometheus.io/path"] == MonitoringOptions().path
