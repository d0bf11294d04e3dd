"""Instance groups -> Serve replicas: how many, with which Ray resources.

Triton runs ``count`` instances per listed GPU (or ``count`` CPU instances); rayton runs one
instance per replica, so a group becomes ``count * len(gpus)`` replicas. A GPU instance asks
Ray for ``1 / count`` of a GPU: ``count: 4`` packs four replicas on each GPU, as Triton packs
four instances. Ray cannot pin a GPU index, so ``gpus: [...]`` only sets how many GPUs the
group spans; pin with custom resources (YAML ``ray_actor_options.resources``) when it matters.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from tritonclient.grpc import model_config_pb2 as mc

logger = logging.getLogger(__name__)

_GROUP = mc.ModelInstanceGroup

# Logical CPU a CPU instance reserves: none, as Triton reserves none for an instance, so any
# repository fits (a fraction per replica left a 13-model repository unschedulable on 2 CPUs).
# Serve spreads replicas over nodes regardless; reserve CPUs (YAML ``ray_actor_options``) for
# heavy CPU models that must not share a node's cores.
DEFAULT_CPU_INSTANCE_NUM_CPUS = 0
# Requests one replica holds at once. Triton queues without bound; Serve caps in-flight
# requests per replica, so the cap must leave room for full batches to form.
MIN_MAX_ONGOING_REQUESTS = 64
ENSEMBLE_MAX_ONGOING_REQUESTS = 256
# In-flight requests get this long to finish when a replica stops (Serve's default is 20 s).
GRACEFUL_SHUTDOWN_TIMEOUT_S = 5


@dataclass
class ReplicaPlacement:
    """Serve deployment options for one model."""

    num_replicas: int
    instance_kind: str  # "CPU" or "GPU"
    group_name: str
    max_ongoing_requests: int
    ray_actor_options: dict[str, Any] = field(default_factory=dict)

    def deployment_options(self) -> dict[str, Any]:
        return {
            "num_replicas": self.num_replicas,
            "max_ongoing_requests": self.max_ongoing_requests,
            "graceful_shutdown_timeout_s": GRACEFUL_SHUTDOWN_TIMEOUT_S,
            "ray_actor_options": dict(self.ray_actor_options),
        }


def placement_for(config: mc.ModelConfig) -> ReplicaPlacement:
    """Replicas and resources for a normalised model config."""
    if config.platform == "ensemble":
        return ReplicaPlacement(
            num_replicas=1,
            instance_kind="CPU",
            group_name=config.name,
            max_ongoing_requests=ENSEMBLE_MAX_ONGOING_REQUESTS,
            ray_actor_options={"num_cpus": 0},
        )
    groups = [g for g in config.instance_group if not g.passive] or list(config.instance_group)
    kinds = {g.kind for g in groups}
    if len(kinds) > 1:
        logger.warning(
            "model '%s' mixes instance kinds; all replicas use the first group's kind",
            config.name,
        )
    first = groups[0]
    replicas = sum(
        g.count * (max(len(g.gpus), 1) if g.kind == _GROUP.KIND_GPU else 1) for g in groups
    )
    max_ongoing = max(MIN_MAX_ONGOING_REQUESTS, 4 * config.max_batch_size)
    if first.kind == _GROUP.KIND_GPU:
        per_gpu = max(first.count, 1)
        options = {"num_cpus": 0, "num_gpus": round(1.0 / per_gpu, 4)}
        kind = "GPU"
    else:
        options = {"num_cpus": DEFAULT_CPU_INSTANCE_NUM_CPUS}
        kind = "CPU"
    return ReplicaPlacement(
        num_replicas=max(replicas, 1),
        instance_kind=kind,
        group_name=first.name,
        max_ongoing_requests=max_ongoing,
        ray_actor_options=options,
    )
