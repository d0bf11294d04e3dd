"""``rayton status``: the status document (models, versions, states, replicas) and its text.

Ray-free: the repository controller fills it from the repository index and each replica's
:class:`ReplicaInfo`; ``rayton status`` prints it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import TypedDict

from typing_extensions import NotRequired

from cluster.memory_budget import BudgetUsage
from repo_adapter.live_repository import IndexEntry


@dataclass(frozen=True)
class ReplicaInfo:
    """Where one replica runs: its Serve id and deployment, node, the GPU ids Ray gave it and
    the devices it sees (a pinned replica sees its pinned GPU), its pid, the models it holds,
    and where its own HTTP port listens behind HAProxy ("": it has none)."""

    replica: str
    deployment: str
    node_id: str
    node_ip: str
    gpu_ids: list[str] = field(default_factory=list)
    cuda_visible_devices: str = ""
    pid: int = 0
    models: list[str] = field(default_factory=list)
    ingress_address: str = ""


class VersionStatus(TypedDict):
    version: str
    state: str
    reason: str


class ModelStatus(TypedDict):
    versions: list[VersionStatus]
    replicas: list[dict[str, object]]  # a ReplicaInfo's fields but ``models``
    # Beyond Triton, where set: the version traffic policy the repository API set (its
    # JSON), and how many times the model's replicas were recycled.
    traffic: NotRequired[dict[str, object]]
    recycled: NotRequired[int]
    # --load-on-demand: the bytes it takes (or took when last loaded), how many times it was
    # loaded on demand and unloaded for the memory budget
    memory: NotRequired[ModelMemory]


class ModelMemory(TypedDict):
    resident: bool
    footprint_bytes: int
    loads: int
    evictions: int
    # --gpu-memory-budget, a GPU model: the GPU it counts against (<node id>/gpu<i>), its bytes
    gpu: NotRequired[str]
    gpu_bytes: NotRequired[int]


class BudgetStatus(TypedDict):
    capacity_bytes: int  # 0: no budget
    used_bytes: int
    gpu_capacity_bytes: NotRequired[int]  # per GPU, --gpu-memory-budget only
    gpu_used_bytes: NotRequired[int]


class StatusDocument(TypedDict):
    """``rayton status --json``."""

    repository: str
    model_control_mode: str
    models: dict[str, ModelStatus]
    memory_budget: NotRequired[BudgetStatus]  # --load-on-demand only


def status_document(
    repository: str,
    control_mode: str,
    index: Iterable[IndexEntry],
    replicas: Iterable[ReplicaInfo],
    traffic: dict[str, dict[str, object]] | None = None,
    recycled: dict[str, int] | None = None,
    memory: BudgetUsage | None = None,
) -> StatusDocument:
    """One entry per model of the index: its versions (state, reason) and its replicas;
    ``traffic`` and ``recycled`` by model where the server keeps them; ``memory`` where it
    loads models on demand."""
    models: dict[str, ModelStatus] = {}
    for entry in index:
        model = models.setdefault(entry["name"], ModelStatus(versions=[], replicas=[]))
        if "version" in entry:
            model["versions"].append(
                VersionStatus(
                    version=entry["version"],
                    state=entry.get("state", ""),
                    reason=entry.get("reason", ""),
                )
            )
    for info in replicas:
        where = {key: value for key, value in asdict(info).items() if key != "models"}
        for name in info.models:
            if name in models:
                models[name]["replicas"].append(where)
    for name, policy in (traffic or {}).items():
        if name in models:
            models[name]["traffic"] = policy
    for name, rounds in (recycled or {}).items():
        if name in models:
            models[name]["recycled"] = rounds
    document = StatusDocument(repository=repository, model_control_mode=control_mode, models=models)
    if memory is not None:
        budget = document["memory_budget"] = BudgetStatus(
            capacity_bytes=memory.capacity_bytes, used_bytes=memory.used_bytes
        )
        if memory.gpu_capacity_bytes:
            budget["gpu_capacity_bytes"] = memory.gpu_capacity_bytes
            budget["gpu_used_bytes"] = memory.gpu_used_bytes
        for residency in memory.models:
            if residency.model in models:
                entry = models[residency.model]["memory"] = ModelMemory(
                    resident=residency.resident,
                    footprint_bytes=residency.footprint_bytes,
                    loads=residency.loads,
                    evictions=residency.evictions,
                )
                if residency.gpu:
                    entry["gpu"] = residency.gpu
                    entry["gpu_bytes"] = residency.gpu_bytes
    return document


def format_status(document: StatusDocument) -> str:
    """Plain text: a line per model version, then the model's replicas (node, GPUs, pid)."""
    lines = [
        f"repository {document['repository']} "
        f"(model control mode {document['model_control_mode']})",
        *_budget_line(document),
        "",
        f"{'MODEL':32s} {'VERSION':8s} {'STATE':12s} REPLICAS",
    ]
    for name, model in document["models"].items():
        versions = model["versions"] or [{"version": "-", "state": "not loaded", "reason": ""}]
        for number, version in enumerate(versions):
            count = str(len(model["replicas"])) if number == 0 else ""
            line = f"{name if number == 0 else '':32s} {version['version']:8s} "
            line += f"{version['state']:12s} {count}"
            if version.get("reason"):
                line += f"  {version['reason']}"
            lines.append(line.rstrip())
        if "traffic" in model:
            lines.append(f"    traffic {json.dumps(model['traffic'])}")
        if "recycled" in model:
            lines.append(f"    replicas recycled {model['recycled']} times")
        if "memory" in model:
            memory = model["memory"]
            lines.append(
                f"    {'resident' if memory['resident'] else 'not resident'}, "
                f"{_mib(memory['footprint_bytes'])}, loaded on demand {memory['loads']} times, "
                f"evicted {memory['evictions']} times"
            )
        for replica in model["replicas"]:
            gpus = ",".join(replica.get("gpu_ids", [])) or "-"
            lines.append(
                f"    replica {replica['replica']}  node {replica['node_ip']} "
                f"({replica['node_id'][:12]})  gpus {gpus}  pid {replica['pid']}"
            )
    return "\n".join(lines) + "\n"


def _mib(size: int) -> str:
    return f"{size / 2**20:.1f} MiB"


def _budget_line(document: StatusDocument) -> list[str]:
    budget = document.get("memory_budget")
    if budget is None:
        return []
    if not budget["capacity_bytes"]:
        line = f"models load on demand; loaded models take {_mib(budget['used_bytes'])}"
    else:
        line = (
            f"models load on demand; memory budget {_mib(budget['capacity_bytes'])}, "
            f"{_mib(budget['used_bytes'])} used"
        )
    if "gpu_capacity_bytes" in budget:
        line += (
            f"; GPU memory budget {_mib(budget['gpu_capacity_bytes'])} per GPU, "
            f"{_mib(budget.get('gpu_used_bytes', 0))} used"
        )
    return [line]
