"""A multi-node Ray cluster on this machine, for developing and testing placement.

A head node and N worker nodes (``ray.cluster_utils.Cluster``: one raylet each, all on
127.0.0.1), each worker with logical GPUs and the per-GPU resources ``rayton_gpu_<i>`` that
pin instance groups (see :mod:`cluster.placement`). Logical GPUs are Ray's bookkeeping only:
replicas see ``CUDA_VISIBLE_DEVICES`` but no device. Every node is a child of this process,
which stops them all on Ctrl-C or SIGTERM. Serve it with
``rayton serve --address <address> --proxy-location HeadOnly`` (the nodes share one address,
so one proxy listens).
"""

from __future__ import annotations

import json
import signal
import sys
import threading
from dataclasses import dataclass
from typing import Any

from cluster.local import apply_serving_environment
from cluster.placement import gpu_resource

NODE_IP = "127.0.0.1"


@dataclass
class DevClusterSpec:
    """How many worker nodes, and what each offers."""

    workers: int = 2
    gpus_per_worker: int = 2
    cpus_per_worker: int = 1
    head_cpus: int = 1


def node_resources_of(spec: DevClusterSpec) -> dict[str, float]:
    """The custom resources of one worker node: one unit per logical GPU index."""
    return {gpu_resource(i): 1.0 for i in range(spec.gpus_per_worker)}


class DevCluster:
    """The running nodes (``ray.cluster_utils.Cluster``); :meth:`shutdown` stops them all."""

    def __init__(self, spec: DevClusterSpec) -> None:
        from ray.cluster_utils import Cluster

        apply_serving_environment(fast_ingress=True, own_cluster=True, host=NODE_IP)
        self.spec = spec
        self._cluster = Cluster(
            initialize_head=True,
            head_node_args={
                "num_cpus": spec.head_cpus,
                "node_ip_address": NODE_IP,
                "include_dashboard": False,
            },
        )
        self.workers = [
            self._cluster.add_node(
                num_cpus=spec.cpus_per_worker,
                num_gpus=spec.gpus_per_worker,
                resources=node_resources_of(spec),
                node_ip_address=NODE_IP,
            )
            for _ in range(spec.workers)
        ]
        self._cluster.wait_for_nodes()

    @property
    def address(self) -> str:
        return self._cluster.address

    def describe(self) -> dict[str, Any]:
        """The address and each worker's node id and resources (printed as JSON)."""
        return {
            "address": self.address,
            "workers": [
                {"node_id": node.node_id, "raylet_pid": _raylet_pid(node)} for node in self.workers
            ],
            "per_worker": {
                "CPU": self.spec.cpus_per_worker,
                "GPU": self.spec.gpus_per_worker,
                **node_resources_of(self.spec),
            },
        }

    def shutdown(self) -> None:
        self._cluster.shutdown()


def _raylet_pid(node: Any) -> int | None:
    processes = node.all_processes.get("raylet") or []
    return processes[0].process.pid if processes else None


def run(spec: DevClusterSpec) -> int:
    """Start the cluster, print its description, and hold it until Ctrl-C or SIGTERM."""
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    cluster = DevCluster(spec)
    try:
        print(json.dumps(cluster.describe()), flush=True)
        print(
            f"serve on it: rayton serve --address {cluster.address} --proxy-location HeadOnly "
            "--model-repository DIR",
            file=sys.stderr,
            flush=True,
        )
        stop.wait()
    finally:
        cluster.shutdown()
    return 0
