"""Triton's CPU and GPU families of the node the metrics endpoint runs on.

CPU from Linux's ``/proc`` (utilization over the last sampling interval, memory used as
total minus available, as Triton computes them); GPU through NVML (``nvidia-ml-py``), one
series per device labelled ``gpu_uuid``. A machine without NVML or without GPUs has no GPU
families, as Triton prints none there.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from deployments.metrics.exposition import Family

logger = logging.getLogger(__name__)


class CpuSampler:
    """CPU utilization between two calls of :meth:`utilization` (0.0 - 1.0)."""

    def __init__(self, stat_path: Path = Path("/proc/stat")) -> None:
        self._stat_path = stat_path
        self._last = self._times()

    def _times(self) -> tuple[int, int]:
        """(busy, total) jiffies since boot over all CPUs."""
        fields = self._stat_path.read_text().splitlines()[0].split()[1:]
        values = [int(v) for v in fields[:8]]  # user nice system idle iowait irq softirq steal
        idle = values[3] + values[4]
        return sum(values) - idle, sum(values)

    def utilization(self) -> float:
        busy, total = self._times()
        last_busy, last_total = self._last
        self._last = (busy, total)
        if total <= last_total:
            return 0.0
        return max(0.0, min(1.0, (busy - last_busy) / (total - last_total)))


def memory_bytes(meminfo_path: Path = Path("/proc/meminfo")) -> tuple[int, int]:
    """(total, used) RAM in bytes; used = MemTotal - MemAvailable."""
    found: dict[str, int] = {}
    for line in meminfo_path.read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in ("MemTotal", "MemAvailable"):
            found[key] = int(rest.split()[0]) * 1024
    total = found.get("MemTotal", 0)
    return total, total - found.get("MemAvailable", total)


def cpu_families(utilization: float, memory: tuple[int, int]) -> list[Family]:
    total, used = memory
    families = [
        Family("nv_cpu_utilization", "gauge", "CPU utilization rate [0.0 - 1.0]"),
        Family("nv_cpu_memory_total_bytes", "gauge", "CPU total memory (RAM), in bytes"),
        Family("nv_cpu_memory_used_bytes", "gauge", "CPU used memory (RAM), in bytes"),
    ]
    for family, value in zip(families, (utilization, total, used), strict=True):
        family.add({}, value)
    return families


@dataclass
class GpuSample:
    uuid: str
    utilization: float  # 0.0 - 1.0
    memory_total: int
    memory_used: int
    power_usage_w: float
    power_limit_w: float
    energy_j: float  # since the sampler started


class GpuSampler:
    """NVML readings per device; no devices where NVML is missing or finds none."""

    def __init__(self) -> None:
        self._nvml: Any = None
        self._devices: list[tuple[str, Any]] = []
        self._energy_start: dict[str, float] = {}
        try:
            import pynvml

            pynvml.nvmlInit()
            for index in range(pynvml.nvmlDeviceGetCount()):
                handle = pynvml.nvmlDeviceGetHandleByIndex(index)
                uuid = pynvml.nvmlDeviceGetUUID(handle)
                uuid = uuid.decode() if isinstance(uuid, bytes) else uuid
                self._devices.append((uuid, handle))
                self._energy_start[uuid] = self._energy_j(pynvml, handle)
            self._nvml = pynvml
        except Exception as err:  # no NVML library, no driver, no devices: no GPU families
            logger.debug("no GPU metrics: %s", err)
            self._devices = []

    @property
    def device_count(self) -> int:
        return len(self._devices)

    @staticmethod
    def _energy_j(pynvml: Any, handle: Any) -> float:
        try:
            return pynvml.nvmlDeviceGetTotalEnergyConsumption(handle) / 1000.0  # mJ
        except Exception:  # not supported on this device
            return 0.0

    def sample(self) -> list[GpuSample]:
        pynvml, samples = self._nvml, []
        for uuid, handle in self._devices:
            try:
                rates = pynvml.nvmlDeviceGetUtilizationRates(handle)
                memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
                power = pynvml.nvmlDeviceGetPowerUsage(handle) / 1000.0  # mW
                limit = pynvml.nvmlDeviceGetPowerManagementLimit(handle) / 1000.0
            except Exception as err:  # a device that stopped answering: skip this round
                logger.debug("GPU %s: %s", uuid, err)
                continue
            energy = self._energy_j(pynvml, handle) - self._energy_start[uuid]
            samples.append(
                GpuSample(uuid, rates.gpu / 100.0, memory.total, memory.used, power, limit, energy)
            )
        return samples


_GPU_FAMILIES = (
    ("nv_gpu_utilization", "GPU utilization rate [0.0 - 1.0)", "utilization"),
    ("nv_gpu_memory_total_bytes", "GPU total memory, in bytes", "memory_total"),
    ("nv_gpu_memory_used_bytes", "GPU used memory, in bytes", "memory_used"),
    ("nv_gpu_power_usage", "GPU power usage in watts", "power_usage_w"),
    ("nv_gpu_power_limit", "GPU power management limit in watts", "power_limit_w"),
)


def gpu_families(samples: list[GpuSample]) -> list[Family]:
    families = []
    for name, help_text, attribute in _GPU_FAMILIES:
        family = Family(name, "gauge", help_text)
        for sample in samples:
            family.add({"gpu_uuid": sample.uuid}, getattr(sample, attribute))
        families.append(family)
    energy = Family(
        "nv_energy_consumption",
        "counter",
        "GPU energy consumption in joules since the Triton Server started",
    )
    for sample in samples:
        energy.add({"gpu_uuid": sample.uuid}, sample.energy_j)
    families.append(energy)
    return families
