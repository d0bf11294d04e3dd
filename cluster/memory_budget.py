"""The memory budget of models loaded on demand, beyond Triton: which models to unload, least
recently used first, so that the ones requested now fit (Triton server#7279).

Ray-free. A model's footprint is what its config declares (``MEMORY_FOOTPRINT``, bytes with
an optional unit: ``"300MB"``, ``"1.5GiB"``) or, without that, what its replicas measured
when they loaded it (:class:`~deployments.core.model_slot.SlotStatus`), at least the size of
its files; times its replicas. The budget is bytes, or a percentage of a node's memory as Ray
counts it (``"40%"``).

Eviction never picks a model with requests in flight, one requested now, an ensemble (it
holds no memory of its own) or a model a loaded ensemble uses.

The budget holds per node. The shared host's replicas run on the head node, so the models it
hosts count there; a model with replicas of its own goes to the worker node (the head when
there is none) with the most room left, pinned there by Ray's node-id label.

A GPU budget (``--gpu-memory-budget``) holds per GPU: each GPU a node declares by its
``rayton_gpu_<i>`` resource is a :class:`GpuSlot`. A GPU model goes to one GPU, the one with
room (the most), else the one whose least recently used idle model is the oldest; its GPU
bytes are ``GPU_MEMORY_FOOTPRINT`` per GPU instance, else its files' size.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from tritonclient.grpc import model_config_pb2 as mc

FOOTPRINT_PARAMETER = "MEMORY_FOOTPRINT"
GPU_FOOTPRINT_PARAMETER = "GPU_MEMORY_FOOTPRINT"
# The custom resource a node declares, one unit, for its GPU <i> (cluster.placement pins on it)
GPU_RESOURCE_PREFIX = "rayton_gpu_"
# The label every Ray node carries with its id (a replica's label_selector pins it there)
NODE_ID_LABEL = "ray.io/node-id"
HEAD_NODE_RESOURCE = "node:__internal_head__"

_UNITS = {
    "": 1,
    "B": 1,
    "K": 10**3,
    "KB": 10**3,
    "M": 10**6,
    "MB": 10**6,
    "G": 10**9,
    "GB": 10**9,
    "KI": 2**10,
    "KIB": 2**10,
    "MI": 2**20,
    "MIB": 2**20,
    "GI": 2**30,
    "GIB": 2**30,
}
_SIZE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*")


def parse_bytes(text: str) -> int:
    """``"512MB"``, ``"1.5GiB"``, ``"1000000"`` -> bytes.

    Raises:
        ValueError: not a non-negative number with one of the units B, K(B), M(B), G(B),
            Ki(B), Mi(B), Gi(B).
    """
    found = _SIZE.fullmatch(text)
    unit = found.group(2).upper() if found else ""
    if found is None or unit not in _UNITS:
        raise ValueError(f"'{text}' is not a size in bytes (such as 500MB or 2GiB)")
    return int(float(found.group(1)) * _UNITS[unit])


def budget_bytes(setting: str, nodes: Iterable[dict[str, float]]) -> int:
    """The budget a ``--memory-budget`` setting gives on a cluster of ``nodes`` (their
    resources as Ray reports them): bytes, or ``N%`` of the smallest node's ``memory``.

    Raises:
        ValueError: a setting that is neither, or a percentage with no node known.
    """
    text = setting.strip()
    if text.endswith("%"):
        try:
            percent = float(text[:-1])
        except ValueError:
            raise ValueError(f"memory budget '{setting}' is not a percentage") from None
        if not 0 < percent <= 100:
            raise ValueError(f"memory budget '{setting}' must be above 0% and at most 100%")
        memories = [node.get("memory", 0.0) for node in nodes]
        if not memories or not min(memories):
            raise ValueError(f"memory budget '{setting}': no node reports its memory")
        return int(min(memories) * percent / 100)
    size = parse_bytes(text)
    if size <= 0:
        raise ValueError(f"memory budget '{setting}' must be more than 0 bytes")
    return size


@dataclass(frozen=True)
class BudgetNode:
    """A node models may load on, and the bytes they may take there."""

    node_id: str
    capacity: int
    head: bool = False


def budget_nodes(setting: str, nodes: Iterable[tuple[str, dict[str, float]]]) -> list[BudgetNode]:
    """Each node's budget under ``--memory-budget setting`` (a percentage is of that node's own
    memory); ``nodes`` are ``(node id, resources)`` of the live nodes.

    Raises:
        ValueError: a setting :func:`budget_bytes` refuses for a node.
    """
    return [
        BudgetNode(node_id, budget_bytes(setting, [resources]), HEAD_NODE_RESOURCE in resources)
        for node_id, resources in nodes
    ]


def node_for(nodes: list[BudgetNode], used: dict[str, int]) -> BudgetNode | None:
    """The node a model with replicas of its own goes to: the worker with the most room left
    (``used`` bytes by node id), the head when there is no worker; None without nodes."""
    workers = [node for node in nodes if not node.head] or nodes
    return max(workers, key=lambda node: node.capacity - used.get(node.node_id, 0), default=None)


def pin_to_node(ray_actor_options: dict, node_id: str) -> None:
    """Make a replica with these options start only on node ``node_id``."""
    ray_actor_options["label_selector"] = {NODE_ID_LABEL: node_id}


def check_budget_setting(setting: str) -> str:
    """``setting`` when it is a budget :func:`budget_bytes` can read (on any cluster)."""
    budget_bytes(setting, [{"memory": 1.0}])
    return setting


def declared_footprint(config: mc.ModelConfig, parameter: str = FOOTPRINT_PARAMETER) -> int | None:
    """The bytes one replica of the model takes, as its ``MEMORY_FOOTPRINT`` parameter (or
    ``parameter``: ``GPU_MEMORY_FOOTPRINT``, per GPU instance) says (None: not declared).

    Raises:
        ValueError: a value that is not a size in bytes.
    """
    if parameter not in config.parameters:
        return None
    text = config.parameters[parameter].string_value
    try:
        return parse_bytes(text)
    except ValueError as err:
        raise ValueError(f"parameter '{parameter}': {err}") from None


def gpu_instances(config: mc.ModelConfig) -> int:
    """The GPU instances of a model placed on one GPU: the counts of its GPU groups."""
    return sum(
        max(group.count, 1)
        for group in config.instance_group
        if group.kind == mc.ModelInstanceGroup.KIND_GPU
    )


def on_one_gpu(config: mc.ModelConfig, gpu: int) -> mc.ModelConfig:
    """A copy of a normalised config whose GPU groups all run on GPU ``gpu`` of a node:
    ``count`` instances there, instead of ``count`` on each GPU listed (server#1644)."""
    placed = mc.ModelConfig()
    placed.CopyFrom(config)
    for group in placed.instance_group:
        if group.kind == mc.ModelInstanceGroup.KIND_GPU:
            del group.gpus[:]
            group.gpus.append(gpu)
    return placed


@dataclass(frozen=True)
class GpuSlot:
    """One GPU of one node under ``--gpu-memory-budget``: the bytes GPU models may take."""

    node_id: str
    gpu: int
    capacity: int

    @property
    def key(self) -> str:
        """The slot's name in residencies, status and metrics: ``<node id>/gpu<i>``."""
        return f"{self.node_id}/gpu{self.gpu}"


def gpu_slots(setting: str, nodes: Iterable[tuple[str, dict[str, float]]]) -> list[GpuSlot]:
    """Each GPU the live ``nodes`` (id, resources) declare by ``rayton_gpu_<i>``, holding
    ``setting`` bytes (``--gpu-memory-budget``: a size, not a percentage).

    Raises:
        ValueError: a setting that is not a size in bytes above 0.
    """
    capacity = gpu_budget_bytes(setting)
    slots = []
    for node_id, resources in nodes:
        for key in resources:
            index = key.removeprefix(GPU_RESOURCE_PREFIX)
            if key.startswith(GPU_RESOURCE_PREFIX) and index.isdigit():
                slots.append(GpuSlot(node_id, int(index), capacity))
    return sorted(slots, key=lambda slot: (slot.node_id, slot.gpu))


def gpu_budget_bytes(setting: str) -> int:
    """The bytes a ``--gpu-memory-budget`` setting gives each GPU.

    Raises:
        ValueError: a percentage (Ray does not report a GPU's memory) or not a size above 0.
    """
    if setting.strip().endswith("%"):
        raise ValueError(
            f"GPU memory budget '{setting}' must be a size (such as 20GiB): Ray does not "
            "report a GPU's memory"
        )
    size = parse_bytes(setting)
    if size <= 0:
        raise ValueError(f"GPU memory budget '{setting}' must be more than 0 bytes")
    return size


def slot_for(
    slots: list[GpuSlot],
    residents: Iterable[Resident],
    needed: int,
    pending: dict[str, int] | None = None,
) -> GpuSlot | None:
    """The GPU a model needing ``needed`` GPU bytes goes to, given the GPU ``residents``
    (``node`` is their slot's key) and the bytes already given to each slot for models
    loading with it (``pending``, by slot key): the one with the most room where it fits;
    else the one whose least recently used idle, unpinned model is the oldest (it makes room
    there); else the one with the most room. None without slots."""
    residents = list(residents)
    used: dict[str, int] = dict(pending or {})
    for resident in residents:
        used[resident.node] = used.get(resident.node, 0) + resident.footprint
    room = {slot.key: slot.capacity - used.get(slot.key, 0) for slot in slots}
    fitting = [slot for slot in slots if room[slot.key] >= needed]
    if fitting:
        return max(fitting, key=lambda slot: room[slot.key])
    idle = [r for r in residents if not r.pinned and not r.in_flight and r.footprint > 0]
    oldest = {r.node: r.last_used for r in sorted(idle, key=lambda r: -r.last_used)}
    freeable = [slot for slot in slots if slot.key in oldest]
    if freeable:
        return min(freeable, key=lambda slot: oldest[slot.key])
    return max(slots, key=lambda slot: room[slot.key], default=None)


@dataclass(frozen=True)
class Resident:
    """A loaded model as the budget sees it.

    ``footprint`` is its bytes over all its replicas; ``last_used`` the wall time its latest
    request started (its load's when none came); ``in_flight`` its requests running now;
    ``pinned`` True where it must stay (an ensemble's member, one requested now); ``node`` the
    node whose budget it counts against.
    """

    name: str
    footprint: int
    last_used: float
    in_flight: int = 0
    pinned: bool = False
    node: str = ""


@dataclass(frozen=True)
class EvictionPlan:
    """What to unload so ``needed`` more bytes fit: ``evict`` (least recently used first),
    or ``busy`` where the models that could go have requests in flight (wait for them)."""

    evict: list[str]
    busy: list[str]

    @property
    def fits(self) -> bool:
        """Whether unloading ``evict`` makes room (nothing busy stood in the way)."""
        return not self.busy


def plan_evictions(residents: Iterable[Resident], needed: int, capacity: int) -> EvictionPlan:
    """The least recently used idle models to unload so ``needed`` bytes more fit in
    ``capacity``.

    ``evict`` is empty when they fit already; idle models go before busy ones. When the idle
    models are not enough, ``busy`` names the models with requests in flight that would have
    to go as well (the caller waits for them, and unloads nothing meanwhile). Where even
    every unpinned model would not make room (pinned models, or a model larger than the
    budget), the plan evicts the idle ones and the load goes over the budget: a budget must
    not make a model unservable.
    """
    residents = list(residents)
    used = sum(r.footprint for r in residents)
    over = used + needed - capacity
    if over <= 0:
        return EvictionPlan([], [])
    candidates = sorted(
        (r for r in residents if not r.pinned and r.footprint > 0), key=lambda r: r.last_used
    )
    evict: list[str] = []
    for resident in (r for r in candidates if not r.in_flight):
        if over <= 0:
            break
        evict.append(resident.name)
        over -= resident.footprint
    busy: list[str] = []
    for resident in (r for r in candidates if r.in_flight):
        if over <= 0 or needed > capacity:
            break
        busy.append(resident.name)
        over -= resident.footprint
    return EvictionPlan(evict, busy)


@dataclass(frozen=True)
class ModelResidency:
    """One model under the budget: whether it is loaded, the bytes it takes (or took last
    time), and how many times it was loaded on demand and evicted."""

    model: str
    resident: bool
    footprint_bytes: int
    loads: int
    evictions: int
    node: str = ""  # the node whose budget it counts against (its replicas' node)
    gpu: str = ""  # the GPU whose budget it counts against (GpuSlot.key; "": none)
    gpu_bytes: int = 0


@dataclass(frozen=True)
class BudgetUsage:
    """The budget (0: none, models only load on demand), what loaded models take now, and
    each model loaded on demand so far."""

    capacity_bytes: int  # per node
    used_bytes: int  # on all nodes
    models: list[ModelResidency]
    gpu_capacity_bytes: int = 0  # per GPU (0: no GPU budget)
    gpu_used_bytes: int = 0  # on all GPUs
