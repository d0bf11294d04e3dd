"""Instance groups -> Serve deployments of replicas: how many, where, with which resources.

Triton runs ``count`` instances per listed GPU (or ``count`` CPU instances); rayton runs one
instance per replica. A GPU instance asks Ray for ``1 / count`` of a GPU, so ``count: 4``
packs four replicas on each GPU as Triton packs four instances, and gets the same share of the
device's memory as its cap (passed to its runtime).

A Serve deployment has one set of resources for all its replicas, so each kind of replica is
its own :class:`ReplicaGroup`: a CPU group, and for a GPU group one per listed GPU when the
cluster declares per-GPU resources (``rayton_gpu_<i>``: ``rayton cluster``, the KubeRay
manifest, or ``ray start --resources``). Ray cannot hand out a chosen GPU index; the per-GPU
resource sends a replica to a node whose GPU ``i`` has room, and the replica makes that GPU its
only visible device. Without those resources Ray picks each replica's GPU, and the placement
says so (``notes``) when the config pinned GPUs. A model of one group is one deployment named
after it; a model of several is served by a router in front of them (see
:mod:`deployments.apps.router_deployment`).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from tritonclient.grpc import model_config_pb2 as mc

from cluster.memory_budget import GPU_RESOURCE_PREFIX, declared_footprint
from cluster.queue_autoscaling import PENDING_PARAMETER, QUEUE_TIME_PARAMETER, queue_targets
from cluster.recycling import ReplicaRecycling, replica_recycling
from repo_adapter.backends import is_registered

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
# A router forwards every request of its model: its cap is the sum its groups can hold.
ROUTER_MAX_ONGOING_REQUESTS = 1024
# In-flight requests get this long to finish when a replica stops (Serve's default is 20 s).
GRACEFUL_SHUTDOWN_TIMEOUT_S = 5
# The front deployments run on the head node: the server with the repository controller (the
# repository's state lives there, and must not go with a lost worker), and the gRPC and metrics
# frontends, which listen on the address clients are given. Ray gives every head node this.
HEAD_NODE_ACTOR_OPTIONS = {"num_cpus": 0, "resources": {"node:__internal_head__": 0.001}}
# Ray's resources are counted in units of 1/10000.
_RESOURCE_PRECISION = 4


def gpu_resource(gpu: int) -> str:
    """The custom resource a node declares, one unit, for its GPU ``gpu``."""
    return f"{GPU_RESOURCE_PREFIX}{gpu}"


def declared_gpu_resources(nodes: Iterable[dict[str, float]]) -> set[str]:
    """The per-GPU resources some node of the cluster declares."""
    return {key for node in nodes for key in node if key.startswith(GPU_RESOURCE_PREFIX)}


@dataclass
class ReplicaGroup:
    """Replicas alike in kind, device and resources: one Serve deployment.

    ``name`` is the deployment's name. ``pinned_gpu`` is the GPU index every replica of the
    group uses (None: Ray's choice); ``gpu_memory_fraction`` is each replica's share of its
    device, the memory cap its runtime gets (0 for CPU instances).
    """

    name: str
    group_name: str
    instance_kind: str  # "CPU" or "GPU"
    num_replicas: int
    max_ongoing_requests: int
    ray_actor_options: dict[str, Any] = field(default_factory=dict)
    pinned_gpu: int | None = None
    gpu_memory_fraction: float = 0.0
    # Serve's autoscaling_config (the model config's AUTOSCALING_CONFIG parameter): replaces
    # the fixed count, which becomes the initial number of replicas unless it says otherwise.
    autoscaling_config: dict[str, Any] | None = None
    # At most this many replicas of the group on one node (MAX_REPLICAS_PER_NODE; None: any)
    max_replicas_per_node: int | None = None

    def deployment_options(self) -> dict[str, Any]:
        options: dict[str, Any] = {
            "max_ongoing_requests": self.max_ongoing_requests,
            "graceful_shutdown_timeout_s": GRACEFUL_SHUTDOWN_TIMEOUT_S,
            "ray_actor_options": copy.deepcopy(self.ray_actor_options),
        }
        if self.max_replicas_per_node is not None:
            options["max_replicas_per_node"] = self.max_replicas_per_node
        if self.autoscaling_config is None:
            return {"num_replicas": self.num_replicas, **options}
        scaling = {"initial_replicas": self.num_replicas, **self.autoscaling_config}
        low, high = scaling.get("min_replicas", 1), scaling.get("max_replicas", 1)
        scaling["initial_replicas"] = min(max(scaling["initial_replicas"], low), high)
        return {"autoscaling_config": scaling, **options}


@dataclass
class ModelPlacement:
    """Where a model's instances run: its replica groups, and what the cluster cannot honour."""

    model: str
    groups: list[ReplicaGroup]
    notes: list[str] = field(default_factory=list)
    # Needs processes of its own (an environment of its own: EXECUTION_ENV_PATH, a runtime_env;
    # a C/C++ backend's native code; replicas recycled on a schedule of their own)
    isolated: bool = False
    recycling: ReplicaRecycling | None = None  # when its replicas are replaced
    # Bytes one replica takes, as its config declares (MEMORY_FOOTPRINT; None: measured)
    footprint: int | None = None

    @property
    def routed(self) -> bool:
        """Whether the model needs a router in front of several deployments."""
        return len(self.groups) > 1

    @property
    def only(self) -> ReplicaGroup:
        """The single group of an unrouted model."""
        assert not self.routed, self.model
        return self.groups[0]

    @property
    def uses_gpu(self) -> bool:
        return any(g.instance_kind == "GPU" for g in self.groups)

    def router_options(self) -> dict[str, Any]:
        """Deployment options of the router (``routed`` models only)."""
        return {
            "num_replicas": 1,
            "max_ongoing_requests": ROUTER_MAX_ONGOING_REQUESTS,
            "graceful_shutdown_timeout_s": GRACEFUL_SHUTDOWN_TIMEOUT_S,
            "ray_actor_options": {"num_cpus": 0},
        }


def share_gpus(placement: ModelPlacement, share: float) -> None:
    """Make each GPU replica of ``placement`` ask Ray for ``share`` of its GPU (and of the
    GPU's ``rayton_gpu_<i>`` resource) instead of ``1/count``: under a GPU memory budget,
    its bytes over the GPU's budget, so Ray packs models on a GPU as the budget does."""
    share = min(max(round(share, _RESOURCE_PRECISION), 10**-_RESOURCE_PRECISION), 1.0)
    for group in placement.groups:
        if group.instance_kind != "GPU":
            continue
        options = group.ray_actor_options
        options["num_gpus"] = share
        resources = options.get("resources", {})
        for key in resources:
            if key.startswith(GPU_RESOURCE_PREFIX):
                resources[key] = share


def placement_for(config: mc.ModelConfig, nodes: Iterable[dict[str, float]] = ()) -> ModelPlacement:
    """Replica groups for a normalised model config on a cluster of ``nodes`` (each node's
    total resources; none: a cluster not known yet, as ``rayton build`` writes a config).

    GPU groups are pinned where the nodes declare a per-GPU resource for each listed GPU.
    """
    name = config.name
    if config.platform == "ensemble":
        ensemble = ReplicaGroup(
            name=name,
            group_name=name,
            instance_kind="CPU",
            num_replicas=1,
            max_ongoing_requests=ENSEMBLE_MAX_ONGOING_REQUESTS,
            ray_actor_options={"num_cpus": 0},
        )
        return ModelPlacement(name, [ensemble])
    nodes = list(nodes)
    declared = declared_gpu_resources(nodes)
    node_gpus = int(max((n.get("GPU", 0) for n in nodes), default=0))
    groups = [g for g in config.instance_group if not g.passive] or list(config.instance_group)
    max_ongoing = max(MIN_MAX_ONGOING_REQUESTS, 4 * config.max_batch_size)
    placed: list[ReplicaGroup] = []
    notes: list[str] = []
    cpu: ReplicaGroup | None = None
    for group in groups:
        count = max(group.count, 1)
        if group.kind != _GROUP.KIND_GPU:  # KIND_CPU, KIND_MODEL (normalisation resolved AUTO)
            if cpu is not None:  # CPU instances are alike: one deployment holds them all
                cpu.num_replicas += count
                continue
            cpu = ReplicaGroup(
                name=group.name,
                group_name=group.name,
                instance_kind="CPU",
                num_replicas=count,
                max_ongoing_requests=max_ongoing,
                ray_actor_options={"num_cpus": DEFAULT_CPU_INSTANCE_NUM_CPUS},
            )
            placed.append(cpu)
            continue
        share = round(1.0 / count, _RESOURCE_PRECISION)
        gpus = list(group.gpus)
        if gpus and all(gpu_resource(g) in declared for g in gpus):
            for gpu in gpus:
                placed.append(
                    ReplicaGroup(
                        name=f"{group.name}.gpu{gpu}",
                        group_name=group.name,
                        instance_kind="GPU",
                        num_replicas=count,
                        max_ongoing_requests=max_ongoing,
                        ray_actor_options={
                            "num_cpus": 0,
                            "num_gpus": share,
                            "resources": {gpu_resource(gpu): share},
                        },
                        pinned_gpu=gpu,
                        gpu_memory_fraction=share,
                    )
                )
            continue
        if node_gpus and sorted(gpus) != list(range(node_gpus)):
            # A subset of a node's GPUs, which only the per-GPU resources can hold to.
            notes.append(
                f"instance group '{group.name}' lists GPUs {gpus}, but the cluster declares "
                f"no rayton_gpu_<i> resource for {'some of them' if declared else 'its GPUs'}: "
                f"Ray picks the GPU of each of its {count * max(len(gpus), 1)} replicas"
            )
        placed.append(
            ReplicaGroup(
                name=group.name,
                group_name=group.name,
                instance_kind="GPU",
                num_replicas=count * max(len(gpus), 1),
                max_ongoing_requests=max_ongoing,
                ray_actor_options={"num_cpus": 0, "num_gpus": share},
                gpu_memory_fraction=share,
            )
        )
    scaling = autoscaling_config(config)
    if config.HasField("sequence_batching"):
        # A sequence's state lives in the replica that runs it, and its requests are routed
        # there: replicas come and go only when Serve replaces a lost one, and the routing
        # runs within one deployment (one replica group).
        if len(placed) > 1:
            notes.append(
                f"a sequence model runs one replica group: '{placed[0].group_name}' "
                f"({placed[0].num_replicas} replicas), not {len(placed)}"
            )
        if scaling is not None:
            notes.append(
                "a sequence model does not autoscale: a replica stopped by a scale-down would "
                "take its running sequences with it"
            )
        placed = placed[:1]
        scaling = None
    recycling = replica_recycling(config)
    if recycling is not None and config.HasField("sequence_batching"):
        notes.append(
            "a sequence model's replicas are not recycled: a replaced replica would take its "
            "running sequences with it"
        )
        recycling = None
    runtime_env = ray_runtime_env(config)
    per_node = max_replicas_per_node(config)
    for group in placed:
        group.autoscaling_config = scaling
        group.max_replicas_per_node = per_node
        if runtime_env is not None:
            group.ray_actor_options["runtime_env"] = copy.deepcopy(runtime_env)
    # A C/C++ backend's native code in the shared host could take every hosted model down.
    native = bool(config.backend) and not is_registered(config.backend)
    # A sequence model too: the shared host may run several replicas (--host-replicas).
    sequences = config.HasField("sequence_batching")
    isolated = (
        native
        or sequences
        or runtime_env is not None
        or per_node is not None  # the shared host's replicas follow its own rule
        or EXECUTION_ENV_PARAMETER in config.parameters
        or recycling is not None
    )
    if len(placed) == 1:  # one deployment: named after the model, as YAML overrides expect
        placed[0].name = name
    else:
        for group in placed:
            group.name = f"{name}.{group.name}"
    return ModelPlacement(name, placed, notes, isolated, recycling, declared_footprint(config))


AUTOSCALING_PARAMETER = "AUTOSCALING_CONFIG"


def autoscaling_config(config: mc.ModelConfig) -> dict[str, Any] | None:
    """Serve's ``autoscaling_config`` from the model config's ``AUTOSCALING_CONFIG`` parameter
    (a JSON object of Serve's fields), checked by Serve's own schema; None when not set.

    Raises :class:`ValueError` with the reason for a value Serve would refuse.
    """
    value = _json_object_parameter(config, AUTOSCALING_PARAMETER)
    targets = queue_targets(config)
    if value is None:
        if targets is not None:
            raise ValueError(
                f"parameters '{QUEUE_TIME_PARAMETER}' and '{PENDING_PARAMETER}' need "
                f"'{AUTOSCALING_PARAMETER}' (the replica bounds they scale within)"
            )
        return None
    if targets is not None:
        if "policy" in value:
            raise ValueError(
                f"parameter '{AUTOSCALING_PARAMETER}' names a policy of its own, and "
                f"'{QUEUE_TIME_PARAMETER}' or '{PENDING_PARAMETER}' another: keep one"
            )
        value = {**value, "policy": targets.serve_policy()}
    from pydantic import ValidationError
    from ray.serve.config import AutoscalingConfig

    try:
        AutoscalingConfig.model_validate(value)
    except ValidationError as err:
        problems = "; ".join(
            f"{'.'.join(map(str, e['loc'])) or 'value'}: {e['msg']}" for e in err.errors()
        )
        raise ValueError(f"parameter '{AUTOSCALING_PARAMETER}': {problems}") from None
    return value


PER_NODE_PARAMETER = "MAX_REPLICAS_PER_NODE"


def max_replicas_per_node(config: mc.ModelConfig) -> int | None:
    """How many replicas of each of the model's groups one node may run at most, from its
    ``MAX_REPLICAS_PER_NODE`` parameter (Serve's ``max_replicas_per_node``: 1 puts each
    replica on a node of its own, so a lost node takes one); None when not set.

    Raises :class:`ValueError` for a value that is not a positive integer.
    """
    if PER_NODE_PARAMETER not in config.parameters:
        return None
    text = config.parameters[PER_NODE_PARAMETER].string_value.strip()
    if not text.isdigit() or int(text) < 1:
        raise ValueError(f"parameter '{PER_NODE_PARAMETER}' must be an integer >= 1, not {text!r}")
    return int(text)


RUNTIME_ENV_PARAMETER = "RAY_RUNTIME_ENV"
# The python backend's packed environment (repo_adapter/python_backend/execution_env.py)
EXECUTION_ENV_PARAMETER = "EXECUTION_ENV_PATH"


def ray_runtime_env(config: mc.ModelConfig) -> dict[str, Any] | None:
    """Ray's ``runtime_env`` for the model's replicas from its ``RAY_RUNTIME_ENV`` parameter
    (a JSON object: ``pip``, ``uv``, ``conda``, ``env_vars``, ...), checked by Ray's own
    ``RuntimeEnv``; None when not set. Raises :class:`ValueError` with the reason."""
    value = _json_object_parameter(config, RUNTIME_ENV_PARAMETER)
    if value is None:
        return None
    from ray.runtime_env import RuntimeEnv

    try:
        RuntimeEnv(**value)
    except Exception as err:  # Ray raises TypeError / ValueError / its own for bad fields
        raise ValueError(f"parameter '{RUNTIME_ENV_PARAMETER}': {err}") from None
    return value


def _json_object_parameter(config: mc.ModelConfig, key: str) -> dict[str, Any] | None:
    """The JSON object a ``parameters`` entry holds (None when absent); ValueError otherwise."""
    if key not in config.parameters:
        return None
    try:
        value = json.loads(config.parameters[key].string_value)
    except json.JSONDecodeError as err:
        raise ValueError(f"parameter '{key}' is not JSON: {err}") from None
    if not isinstance(value, dict):
        raise ValueError(f"parameter '{key}' must be a JSON object")
    return value
