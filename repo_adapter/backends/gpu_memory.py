"""Each GPU instance's memory cap: its share of the device, in the form each runtime takes.

Instances packed on one GPU (``count: 4`` is four replicas of 0.25 GPU) would otherwise each
grow their runtime's memory pool until a neighbour fails to allocate. An instance's share
(:attr:`InstanceSpec.gpu_memory_fraction`) becomes ONNX Runtime's ``gpu_mem_limit`` (and the
TensorRT execution provider's workspace), PyTorch's per-process memory fraction, and the bound
a TensorRT engine's activation memory must fit in. A cap the model config sets itself
(``gpu_mem_limit``, ``max_workspace_size_bytes``) stays when it is smaller.
"""

from __future__ import annotations

import logging
import os

from repo_adapter.backends.base import InstanceSpec

logger = logging.getLogger(__name__)


def device_total_bytes(device_id: int = 0) -> int | None:
    """Total memory of visible CUDA device ``device_id`` (None when none can be read).

    torch's view honours ``CUDA_VISIBLE_DEVICES``; NVML counts physical devices, so its index
    is mapped through that variable.
    """
    try:
        import torch

        if torch.cuda.is_available() and device_id < torch.cuda.device_count():
            return int(torch.cuda.get_device_properties(device_id).total_memory)
    except ImportError:
        pass
    try:
        import pynvml

        pynvml.nvmlInit()
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        physical = int(visible.split(",")[device_id]) if visible else device_id
        handle = pynvml.nvmlDeviceGetHandleByIndex(physical)
        return int(pynvml.nvmlDeviceGetMemoryInfo(handle).total)
    except Exception as err:  # no driver, no such device, an index that is not a number
        logger.debug("no device memory for GPU %s: %s", device_id, err)
        return None


def memory_cap_bytes(instance: InstanceSpec, total_bytes: int | None) -> int | None:
    """The bytes ``instance`` may take of a device of ``total_bytes`` (None: no cap)."""
    if instance.kind != "GPU" or not instance.gpu_memory_fraction or not total_bytes:
        return None
    if instance.gpu_memory_fraction >= 1:
        return None  # the whole device: nothing to share
    return int(total_bytes * instance.gpu_memory_fraction)


def capped(configured: str | int | None, cap: int | None) -> str | None:
    """The smaller of a byte count the config set (if any) and ``cap``, as the string runtimes
    take; None when neither is set."""
    values = [int(v) for v in (configured, cap) if v is not None and str(v) != ""]
    return str(min(values)) if values else None


def torch_memory_fraction(instance: InstanceSpec) -> float | None:
    """The fraction ``torch.cuda.set_per_process_memory_fraction`` gets (None: no cap)."""
    if instance.kind != "GPU" or not 0 < instance.gpu_memory_fraction < 1:
        return None
    return instance.gpu_memory_fraction
