"""A KubeRay ``RayService`` (``ray.io/v1``) serving a model repository on Kubernetes.

``serveConfigV2`` comes from the same planner as ``rayton build`` (one application per
model, the server, gRPC and metrics applications), with the repository at the path it is
mounted at in every pod. The head group runs Serve's controller and the front applications;
the worker group carries the GPUs (``nvidia.com/gpu``) and declares the per-GPU resources
``rayton_gpu_<i>`` that pin instance groups (see :mod:`cluster.placement`). Every container
gets the serving environment rayton's own clusters start with (fast ingress, message sizes).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from cluster.local import FAST_INGRESS_ENV, SERVING_ENV
from cluster.placement import gpu_resource

RAY_VERSION = "2.60.0"
HTTP_PORT, GRPC_PORT, METRICS_PORT = 8000, 8001, 8002
# Inside a pod, Serve must listen where the pod's Service reaches it.
POD_HOST = "0.0.0.0"


@dataclass
class KubeRaySpec:
    """What the manifest names: the image, the repository's volume, the worker nodes."""

    name: str = "rayton"
    image: str = "rayton:latest"
    mount_path: str = "/models"
    # The repository's volume: a PersistentVolumeClaim of this name (read-only), or None for a
    # volume the user adds (the manifest then has an emptyDir placeholder they replace).
    claim_name: str | None = "rayton-models"
    workers: int = 1
    max_workers: int = 4
    gpus_per_worker: int = 0
    cpus_per_worker: str = "4"
    memory_per_worker: str = "16Gi"
    head_cpus: str = "2"
    head_memory: str = "8Gi"


def worker_node_resources(spec: KubeRaySpec) -> dict[str, float]:
    """The resources a worker pod's Ray node offers (what placement plans against)."""
    pins = {gpu_resource(i): 1.0 for i in range(spec.gpus_per_worker)}
    return {"CPU": float(spec.cpus_per_worker), "GPU": float(spec.gpus_per_worker), **pins}


def in_cluster_config(serve_config: dict[str, Any], local: str, mounted: str) -> dict[str, Any]:
    """``serve_config`` with every application's repository path ``local`` replaced by the
    ``mounted`` path, and Serve's listeners on the pod's address."""
    config = yaml.safe_load(yaml.safe_dump(serve_config))  # a deep copy of plain data
    config["http_options"]["host"] = POD_HOST
    for app in config["applications"]:
        args = app.get("args", {})
        if args.get("model_repository") == local:
            args["model_repository"] = mounted
        for key in ("grpc_host", "metrics_host"):
            if key in args:
                args[key] = POD_HOST
    return config


def _env() -> list[dict[str, str]]:
    return [{"name": k, "value": v} for k, v in {**SERVING_ENV, **FAST_INGRESS_ENV}.items()]


def _volume(spec: KubeRaySpec) -> dict[str, Any]:
    if spec.claim_name:
        source: dict[str, Any] = {
            "persistentVolumeClaim": {"claimName": spec.claim_name, "readOnly": True}
        }
    else:
        source = {"emptyDir": {}}
    return {"name": "model-repository", **source}


def _container(
    spec: KubeRaySpec, name: str, ports: list[dict[str, Any]], resources: dict[str, Any]
) -> dict[str, Any]:
    return {
        "name": name,
        "image": spec.image,
        "env": _env(),
        "ports": ports,
        "resources": resources,
        "volumeMounts": [
            {"name": "model-repository", "mountPath": spec.mount_path, "readOnly": True}
        ],
    }


def _head(spec: KubeRaySpec) -> dict[str, Any]:
    ports = [
        {"containerPort": 6379, "name": "gcs-server"},
        {"containerPort": 8265, "name": "dashboard"},
        {"containerPort": 10001, "name": "client"},
        {"containerPort": HTTP_PORT, "name": "serve"},
        {"containerPort": GRPC_PORT, "name": "grpc"},
        {"containerPort": METRICS_PORT, "name": "triton-metrics"},
    ]
    amounts = {"cpu": spec.head_cpus, "memory": spec.head_memory}
    return {
        # The head holds Serve's controller and the front applications, no model replicas
        # that need a GPU (its pod asks for none).
        "rayStartParams": {"dashboard-host": POD_HOST},
        "template": {
            "spec": {
                "containers": [
                    _container(spec, "ray-head", ports, {"requests": amounts, "limits": amounts})
                ],
                "volumes": [_volume(spec)],
            }
        },
    }


def _workers(spec: KubeRaySpec) -> dict[str, Any]:
    amounts: dict[str, Any] = {"cpu": spec.cpus_per_worker, "memory": spec.memory_per_worker}
    params: dict[str, str] = {}
    if spec.gpus_per_worker:
        amounts["nvidia.com/gpu"] = str(spec.gpus_per_worker)
        pins = {
            k: int(v) for k, v in worker_node_resources(spec).items() if k.startswith("rayton_")
        }
        # KubeRay passes this verbatim to `ray start --resources`: a quoted JSON string.
        params["resources"] = '"' + json.dumps(pins, sort_keys=True).replace('"', '\\"') + '"'
    name = "gpu-workers" if spec.gpus_per_worker else "workers"
    return {
        "groupName": name,
        "replicas": spec.workers,
        "minReplicas": min(spec.workers, 1),
        "maxReplicas": max(spec.max_workers, spec.workers),
        "rayStartParams": params,
        "template": {
            "spec": {
                "containers": [
                    _container(spec, "ray-worker", [], {"requests": amounts, "limits": amounts})
                ],
                "volumes": [_volume(spec)],
            }
        },
    }


def rayservice(serve_config: dict[str, Any], spec: KubeRaySpec) -> dict[str, Any]:
    """The ``RayService`` document serving ``serve_config`` (already :func:`in_cluster_config`)."""
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayService",
        "metadata": {"name": spec.name},
        "spec": {
            "serveConfigV2": dump(serve_config),
            # The Service in front of Serve: HTTP, gRPC and Triton's metrics, as Triton's ports.
            "serveService": {
                "metadata": {"name": f"{spec.name}-serve"},
                "spec": {
                    "ports": [
                        {"name": "http", "port": HTTP_PORT, "targetPort": HTTP_PORT},
                        {"name": "grpc", "port": GRPC_PORT, "targetPort": GRPC_PORT},
                        {"name": "metrics", "port": METRICS_PORT, "targetPort": METRICS_PORT},
                    ]
                },
            },
            "rayClusterConfig": {
                "rayVersion": RAY_VERSION,
                "enableInTreeAutoscaling": True,
                "headGroupSpec": _head(spec),
                "workerGroupSpecs": [_workers(spec)],
            },
        },
    }


class _ManifestDumper(yaml.SafeDumper):
    """Plain YAML for people and kubectl: no anchors, multi-line strings as ``|`` blocks."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _string(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_ManifestDumper.add_representer(str, _string)


def dump(document: dict[str, Any]) -> str:
    return yaml.dump(document, Dumper=_ManifestDumper, sort_keys=False)


def write_manifest(path: Path, document: dict[str, Any], header: str = "") -> None:
    path.write_text(header + dump(document))
