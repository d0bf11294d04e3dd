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
