"""Where a replica runs (node, GPUs, process): what ``rayton status`` lists per model."""

from __future__ import annotations

import functools
import os

import ray
from ray import serve

from deployments.observability.status import ReplicaInfo


def replica_info(models: list[str], ingress_address: str = "") -> ReplicaInfo:
    """This replica, holding ``models``, its own HTTP port at ``ingress_address``."""
    node_id = ray.get_runtime_context().get_node_id()
    context = serve.get_replica_context()
    return ReplicaInfo(
        replica=context.replica_id.unique_id,
        deployment=context.deployment,
        node_id=node_id,
        node_ip=_node_address(node_id),
        gpu_ids=[str(gpu) for gpu in ray.get_gpu_ids()],
        cuda_visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES", ""),
        pid=os.getpid(),
        models=models,
        ingress_address=ingress_address,
    )


@functools.cache
def _node_address(node_id: str) -> str:
    """The address the node registered with (``ray start --node-ip-address``), not a guess
    from this machine's interfaces."""
    for node in ray.nodes():
        if node["NodeID"] == node_id:
            return node["NodeManagerAddress"]
    return ""
