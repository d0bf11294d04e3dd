"""Server GPU metrics for ``--collect-metrics``, scraped the way perf_analyzer does.

perf_analyzer queries the server's Prometheus endpoint every ``--metrics-interval`` ms
while it measures, and reports per GPU (the ``gpu_uuid`` label): the mean utilisation and
power, the peak memory used and the total memory, over the scrapes of the reported windows.
A scrape that fails ends the run; a family the server does not export is warned about once.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from rayton_perf.config import PerfError

# Prometheus family -> GpuMetrics attribute, in perf_analyzer's report order.
FAMILIES = {
    "nv_gpu_utilization": "utilization",
    "nv_gpu_power_usage": "power_w",
    "nv_gpu_memory_used_bytes": "memory_used_bytes",
    "nv_gpu_memory_total_bytes": "memory_total_bytes",
}
_FRACTIONAL = ("utilization", "power_w")
_SAMPLE = re.compile(r"^(?P<name>[A-Za-z_:][\w:]*)\{(?P<labels>[^}]*)\}\s+(?P<value>\S+)")
_GPU_UUID = re.compile(r'gpu_uuid="(?P<uuid>[^"]*)"')

FetchFn = Callable[[str], Awaitable[str]]


@dataclass
class GpuMetrics:
    """Per-GPU values of one scrape, or of several merged (keys are GPU UUIDs).

    Attributes:
        utilization: ``nv_gpu_utilization``, a fraction in [0, 1].
        power_w: ``nv_gpu_power_usage`` in watts.
        memory_used_bytes: ``nv_gpu_memory_used_bytes``.
        memory_total_bytes: ``nv_gpu_memory_total_bytes``.
    """

    utilization: dict[str, float] = field(default_factory=dict)
    power_w: dict[str, float] = field(default_factory=dict)
    memory_used_bytes: dict[str, int] = field(default_factory=dict)
    memory_total_bytes: dict[str, int] = field(default_factory=dict)

    def missing(self) -> list[str]:
        """Families this scrape had no GPU sample of."""
        return [name for name, attr in FAMILIES.items() if not getattr(self, attr)]


def parse_metrics(text: str) -> GpuMetrics:
    """Read the four GPU families from Prometheus text exposition format.

    Samples without a ``gpu_uuid`` label and values that are not numbers are skipped, as
    perf_analyzer's parser matches only ``family{gpu_uuid="..."} value`` lines.
    """
    metrics = GpuMetrics()
    for line in text.splitlines():
        match = _SAMPLE.match(line.strip())
        if match is None or match["name"] not in FAMILIES:
            continue
        uuid = _GPU_UUID.search(match["labels"])
        try:
            value = float(match["value"])
        except ValueError:
            continue
        if uuid is None:
            continue
        attr = FAMILIES[match["name"]]
        getattr(metrics, attr)[uuid["uuid"]] = value if attr in _FRACTIONAL else int(value)
    return metrics


def merge_metrics(samples: Sequence[GpuMetrics]) -> GpuMetrics:
    """perf_analyzer's ``MergeMetrics``: mean utilisation and power, peak memory used,
    first total memory, each per GPU over the scrapes that have it."""
    merged = GpuMetrics()
    for attr, combine in (
        ("utilization", _mean),
        ("power_w", _mean),
        ("memory_used_bytes", max),
        ("memory_total_bytes", _first),
    ):
        per_gpu: dict[str, list] = {}
        for sample in samples:
            for uuid, value in getattr(sample, attr).items():
                per_gpu.setdefault(uuid, []).append(value)
        setattr(merged, attr, {uuid: combine(values) for uuid, values in per_gpu.items()})
    return merged


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


def _first(values: list[int]) -> int:
    return values[0]


async def fetch_text(url: str, timeout_s: float = 10.0) -> str:
    """GET ``url`` and return its body (the default fetcher of :class:`MetricsCollector`)."""
    import aiohttp

    async with (
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout_s)) as session,
        session.get(url) as response,
    ):
        response.raise_for_status()
        return await response.text()


class MetricsCollector:
    """Scrapes ``url`` every ``interval_ms`` in the background while a level is measured.

    Args:
        url: the metrics endpoint (``http://host:8002/metrics``).
        interval_ms: time between the starts of two scrapes.
        fetch: coroutine returning the body of a URL (tests pass a fake).
    """

    def __init__(self, url: str, interval_ms: int, fetch: FetchFn | None = None):
        self.url = url
        self.interval_s = interval_ms / 1000
        self._fetch = fetch or fetch_text
        self._samples: list[GpuMetrics] = []
        self._task: asyncio.Task | None = None
        self._warned: set[str] = set()
        self._new_warnings: list[str] = []
        self.error: str | None = None

    def start(self) -> None:
        """Begin scraping (returns immediately)."""
        self.error = None
        self._samples = []
        self._task = asyncio.ensure_future(self._loop())

    async def stop(self) -> None:
        """Stop scraping; samples not taken yet are dropped."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def take(self) -> list[GpuMetrics]:
        """The scrapes finished since the last call (one window's worth).

        Raises:
            PerfError: a scrape failed (perf_analyzer ends the run too).
        """
        if self.error is not None:
            raise PerfError(f"failed to get metrics from {self.url}: {self.error}")
        samples, self._samples = self._samples, []
        return samples

    def warnings(self) -> list[str]:
        """Missing-family warnings not handed out yet (each at most once per run)."""
        new, self._new_warnings = self._new_warnings, []
        return new

    async def _loop(self) -> None:
        while True:
            started = time.monotonic()
            try:
                sample = parse_metrics(await self._fetch(self.url))
            except asyncio.CancelledError:
                raise
            except Exception as err:  # aiohttp and the fetcher raise many types
                self.error = f"{type(err).__name__}: {err}"
                return
            self._note_missing(sample)
            self._samples.append(sample)
            await asyncio.sleep(max(0.0, self.interval_s - (time.monotonic() - started)))

    def _note_missing(self, sample: GpuMetrics) -> None:
        for name in sample.missing():
            if name not in self._warned:
                self._warned.add(name)
                self._new_warnings.append(f"WARNING: Unable to parse '{name}' metric.")
