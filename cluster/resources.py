"""What the Ray cluster offers: GPU indices for instance-group normalisation."""

from __future__ import annotations


def cluster_gpu_ids() -> list[int]:
    """GPU indices a model instance may use: those of the node with the most GPUs.

    Triton normalises instance groups against the GPUs of its machine; on a Ray cluster the
    closest equivalent is the largest node. Empty when Ray is not connected or has no GPU.
    """
    import ray

    if not ray.is_initialized():
        return []
    most = max(
        (int(node["Resources"].get("GPU", 0)) for node in ray.nodes() if node["Alive"]), default=0
    )
    return list(range(most))


def node_resources() -> list[dict[str, float]]:
    """Total resources of each live node (empty when Ray is not connected)."""
    import ray

    if not ray.is_initialized():
        return []
    return [dict(node["Resources"]) for node in ray.nodes() if node["Alive"]]


def live_nodes() -> list[tuple[str, dict[str, float]]]:
    """``(node id, total resources)`` of each live node (empty when Ray is not connected)."""
    import ray

    if not ray.is_initialized():
        return []
    return [(node["NodeID"], dict(node["Resources"])) for node in ray.nodes() if node["Alive"]]


def unplaceable_reason(ray_actor_options: dict, nodes: list[dict[str, float]]) -> str:
    """Why no node of ``nodes`` can ever host one replica asking ``ray_actor_options`` ("" if
    one can). Only totals are compared: replicas waiting for busy resources are not refused."""
    wanted = {
        "CPU": float(ray_actor_options.get("num_cpus") or 0),
        "GPU": float(ray_actor_options.get("num_gpus") or 0),
        **{k: float(v) for k, v in (ray_actor_options.get("resources") or {}).items()},
    }
    wanted = {k: v for k, v in wanted.items() if v > 0}
    if not wanted or any(all(n.get(k, 0) >= v for k, v in wanted.items()) for n in nodes):
        return ""
    for key, amount in wanted.items():
        most = max((n.get(key, 0.0) for n in nodes), default=0.0)
        if most < amount:
            unit = {"CPU": "CPU", "GPU": "GPU"}.get(key, f"'{key}' resource")
            return (
                f"needs {amount:g} {unit} per instance, the largest node of the cluster has "
                f"{most:g}"
            )
    return f"needs {wanted} per instance, which no single node of the cluster has"
