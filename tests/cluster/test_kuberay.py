"""``rayton kuberay``: the RayService manifest, checked against the CRD's required fields and
Serve's own schema for ``serveConfigV2``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from ray.serve.schema import ServeDeploySchema

from cluster.local import FAST_INGRESS_ENV, SERVING_ENV
from deployments.cli import main
from tests.support.live_models import write_adder

GPU_MODEL = """\
backend: "python"
max_batch_size: 8
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] } ]
instance_group [ { count: 2 kind: KIND_GPU gpus: [ 1 ] } ]
"""

# Fields ray.io/v1's CRDs require (KubeRay's raycluster_types.go / rayservice_types.go: fields
# without omitempty), and what a pod's container needs.
REQUIRED_WORKER_FIELDS = ("groupName", "minReplicas", "maxReplicas", "template")


@pytest.fixture
def manifest(tmp_path: Path):
    repository = tmp_path / "zoo"
    write_adder(repository, "adder", version=1, offset=1.0)
    (repository / "pinned" / "1").mkdir(parents=True)
    (repository / "pinned" / "config.pbtxt").write_text(GPU_MODEL)
    (repository / "pinned" / "1" / "model.py").write_text(
        (repository / "adder" / "1" / "model.py").read_text()
    )
    output = tmp_path / "rayservice.yaml"
    command = ["kuberay", str(repository), "-o", str(output), "--gpus-per-worker", "2"]
    assert main([*command, "--image", "registry.example/rayton:1", "--max-workers", "3"]) == 0
    return yaml.safe_load(output.read_text())


def _containers(group: dict) -> list[dict]:
    return group["template"]["spec"]["containers"]


def test_manifest_has_the_fields_the_crd_requires(manifest):
    assert manifest["apiVersion"] == "ray.io/v1" and manifest["kind"] == "RayService"
    assert manifest["metadata"]["name"] == "rayton"
    cluster = manifest["spec"]["rayClusterConfig"]
    assert cluster["rayVersion"] == "2.60.0"
    head = cluster["headGroupSpec"]
    assert _containers(head), "the head pod template needs a container"
    for group in cluster["workerGroupSpecs"]:
        for field in REQUIRED_WORKER_FIELDS:
            assert field in group, field
        assert group["minReplicas"] <= group["replicas"] <= group["maxReplicas"] == 3
    for group in [head, *cluster["workerGroupSpecs"]]:
        for container in _containers(group):
            assert container["name"] and container["image"] == "registry.example/rayton:1"
            env = {e["name"]: e["value"] for e in container["env"]}
            assert env.items() >= {**SERVING_ENV, **FAST_INGRESS_ENV}.items()
            mount = container["volumeMounts"][0]
            assert mount == {"name": "model-repository", "mountPath": "/models", "readOnly": True}
        volume = group["template"]["spec"]["volumes"][0]
        assert volume["persistentVolumeClaim"]["claimName"] == "rayton-models"


def test_gpu_workers_request_gpus_and_declare_the_pinning_resources(manifest):
    (workers,) = manifest["spec"]["rayClusterConfig"]["workerGroupSpecs"]
    limits = _containers(workers)[0]["resources"]["limits"]
    assert limits["nvidia.com/gpu"] == "2"
    # `ray start --resources` takes a JSON object; KubeRay passes the quoted string verbatim.
    quoted = workers["rayStartParams"]["resources"]
    assert quoted.startswith('"') and quoted.endswith('"')
    assert json.loads(quoted[1:-1].replace('\\"', '"')) == {"rayton_gpu_0": 1, "rayton_gpu_1": 1}


def test_serve_service_carries_http_grpc_and_metrics(manifest):
    ports = manifest["spec"]["serveService"]["spec"]["ports"]
    assert {p["name"]: p["port"] for p in ports} == {"http": 8000, "grpc": 8001, "metrics": 8002}
    head_ports = {
        p["containerPort"]
        for p in _containers(manifest["spec"]["rayClusterConfig"]["headGroupSpec"])[0]["ports"]
    }
    assert {8000, 8001, 8002} <= head_ports


def test_serve_config_parses_as_serve_config_with_every_model(manifest):
    config = ServeDeploySchema.model_validate(yaml.safe_load(manifest["spec"]["serveConfigV2"]))
    apps = {app.name: app for app in config.applications}
    assert {"adder", "pinned", "rayton-server", "rayton-grpc", "rayton-metrics"} <= set(apps)
    assert config.http_options.host == "0.0.0.0" and config.http_options.port == 8000
    assert apps["rayton-grpc"].args["grpc_host"] == "0.0.0.0"
    for name in ("adder", "pinned", "rayton-server"):
        assert apps[name].args["model_repository"] == "/models/zoo"
    # A GPU group listing GPU 1: its replicas pinned there by the workers' per-GPU resource.
    (pinned,) = apps["pinned"].deployments
    assert pinned.name == "pinned" and pinned.num_replicas == 2
    assert pinned.ray_actor_options.resources == {"rayton_gpu_1": 0.5}
    assert pinned.ray_actor_options.num_gpus == 0.5


def test_a_missing_repository_is_one_line(tmp_path, capsys):
    assert main(["kuberay", str(tmp_path / "absent"), "-o", str(tmp_path / "m.yaml")]) == 2
    assert "is not a directory" in capsys.readouterr().err


def test_the_image_is_built_on_rays_image_of_the_same_version():
    root = Path(__file__).resolve().parents[2]
    dockerfile = (root / "cluster" / "Dockerfile").read_text()
    assert "ARG RAY_IMAGE=rayproject/ray:2.60.0-py311\n" in dockerfile
    import ray

    assert ray.__version__ == "2.60.0"
    for line in dockerfile.splitlines():
        if line.startswith("COPY "):
            for source in line.split()[2:-1]:
                assert (root / source).exists(), source
