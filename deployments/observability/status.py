"""``rayton status``: the status document (models, versions, states, replicas) and its text.

Ray-free: the repository controller fills it from the repository index and each replica's
:class:`ReplicaInfo`; ``rayton status`` prints it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class ReplicaInfo:
    """Where one replica runs: its Serve id and deployment, node, the GPU ids Ray gave it and
    the devices it sees (a pinned replica sees its pinned GPU), its pid, the models it holds."""

    replica: str
    deployment: str
    node_id: str
    node_ip: str
    gpu_ids: list[str] = field(default_factory=list)
    cuda_visible_devices: str = ""
    pid: int = 0
    models: list[str] = field(default_factory=list)


def status_document(
    repository: str,
    control_mode: str,
    index: Iterable[dict[str, Any]],
    replicas: Iterable[ReplicaInfo],
) -> dict[str, Any]:
    """One entry per model of the index: its versions (state, reason) and its replicas."""
    models: dict[str, dict[str, Any]] = {}
    for entry in index:
        model = models.setdefault(entry["name"], {"versions": [], "replicas": []})
        if "version" in entry:
            model["versions"].append({k: entry.get(k, "") for k in ("version", "state", "reason")})
    for info in replicas:
        where = {key: value for key, value in asdict(info).items() if key != "models"}
        for name in info.models:
            if name in models:
                models[name]["replicas"].append(where)
    return {"repository": repository, "model_control_mode": control_mode, "models": models}


def format_status(document: dict[str, Any]) -> str:
    """Plain text: a line per model version, then the model's replicas (node, GPUs, pid)."""
    lines = [
        f"repository {document['repository']} "
        f"(model control mode {document['model_control_mode']})",
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
        for replica in model["replicas"]:
            gpus = ",".join(replica.get("gpu_ids", [])) or "-"
            lines.append(
                f"    replica {replica['replica']}  node {replica['node_ip']} "
                f"({replica['node_id'][:12]})  gpus {gpus}  pid {replica['pid']}"
            )
    return "\n".join(lines) + "\n"
