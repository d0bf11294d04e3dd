"""Per-model-version inference statistics in the shape of Triton's statistics extension.

Counts follow Triton: ``success`` counts requests, ``inference_count`` rows,
``execution_count`` executions, ``queue.count == success.count``; durations are
cumulative nanoseconds. One recorder lives in each replica; the server sums replicas.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TypedDict

from typing_extensions import NotRequired

from deployments.observability.latency_sketch import WindowedSketch
from repo_adapter.inference_types import BackendReports, ComputeTimes

_INFERENCE_STAT_KEYS = (
    "success",
    "fail",
    "queue",
    "compute_input",
    "compute_infer",
    "compute_output",
    "cache_hit",
    "cache_miss",
)

_COMPUTE_KEYS = ("compute_input", "compute_infer", "compute_output")

# Why a request failed, as Triton's nv_inference_request_failure labels it.
REJECTED = "REJECTED"  # timed out in the queue
CANCELED = "CANCELED"  # the client went away before it ran
BACKEND = "BACKEND"  # its execution failed
OTHER = "OTHER"  # anything else (an ensemble step failed)
FAILURE_REASONS = (REJECTED, CANCELED, BACKEND, OTHER)
# Durations whose recent quantiles the metrics can show (Triton's summary_latencies).
LATENCY_KINDS = (
    "request",
    "queue",
    "compute_input",
    "compute_infer",
    "compute_output",
    "cache_hit",
    "cache_miss",
)


class DurationDocument(TypedDict):
    count: int
    ns: int


class BatchDocument(TypedDict):
    batch_size: int
    compute_input: DurationDocument
    compute_infer: DurationDocument
    compute_output: DurationDocument


class MemoryUsageDocument(TypedDict):
    type: str
    id: int
    byte_size: int


class ModelStatistics(TypedDict):
    """One model version's entry of Triton's statistics extension."""

    name: str
    version: str
    last_inference: int
    inference_count: int
    execution_count: int
    inference_stats: dict[str, DurationDocument]  # by _INFERENCE_STAT_KEYS
    response_stats: dict[str, dict[str, DurationDocument]]  # decoupled models' (none here)
    batch_stats: list[BatchDocument]
    memory_usage: list[MemoryUsageDocument]


class VersionMetrics(TypedDict):
    """One model version's counters behind Triton's metric families (one replica's, or
    summed over replicas)."""

    model: str
    version: str
    success: int
    failures: dict[str, int]  # by FAILURE_REASONS
    inference_count: int
    execution_count: int
    request_ns: int
    queue_ns: int
    compute_input_ns: int
    compute_infer_ns: int
    compute_output_ns: int
    cache_hit_count: int
    cache_hit_ns: int
    cache_miss_count: int
    cache_miss_ns: int
    latency_windows: dict[str, dict[int, dict[int, int]]]  # by LATENCY_KINDS: sketch slots
    # Added by the served model: requests queued now, load time, a GPU model's device.
    pending: NotRequired[int]
    load_duration_s: NotRequired[float]
    gpu_uuid: NotRequired[str]
    response_cache: NotRequired[bool]  # the version's responses are cached
    # A version that received shadow copies (repo_adapter/version_traffic.py): their outcomes.
    shadow: NotRequired[bool]
    shadow_success: NotRequired[int]
    shadow_failure: NotRequired[int]
    shadow_ns: NotRequired[int]
    shadow_dropped: NotRequired[int]


@dataclass
class ShadowRecord:
    """A shadow version's copies of requests: their outcomes and time, apart from its own
    requests' statistics; ``dropped`` copies were not sent as too many were running."""

    success: int = 0
    failure: int = 0
    ns: int = 0
    dropped: int = 0

    def metrics(self) -> dict[str, int | bool]:
        return {
            "shadow": True,
            "shadow_success": self.success,
            "shadow_failure": self.failure,
            "shadow_ns": self.ns,
            "shadow_dropped": self.dropped,
        }


@dataclass
class Duration:
    count: int = 0
    ns: int = 0

    def add(self, ns: int, count: int = 1) -> None:
        self.count += count
        self.ns += ns

    def to_json(self) -> DurationDocument:
        return {"count": self.count, "ns": self.ns}


@dataclass
class BatchStats:
    compute_input: Duration = field(default_factory=Duration)
    compute_infer: Duration = field(default_factory=Duration)
    compute_output: Duration = field(default_factory=Duration)


@dataclass(frozen=True)
class RequestOutcome:
    """One request of an execution: when it arrived, its rows, whether it failed."""

    arrival_ns: int
    rows: int
    failed: bool


@dataclass
class ExecutionTiming:
    """Nanosecond timestamps of one execution (monotonic clock)."""

    start_ns: int
    infer_start_ns: int
    infer_end_ns: int
    end_ns: int

    @property
    def compute(self) -> ComputeTimes:
        return ComputeTimes(
            self.infer_start_ns - self.start_ns,
            self.infer_end_ns - self.infer_start_ns,
            self.end_ns - self.infer_end_ns,
        )


class VersionStatistics:
    """Statistics of one model version in one replica."""

    def __init__(self, name: str, version: str) -> None:
        self.name = name
        self.version = version
        self.last_inference_ms = 0
        self.inference_count = 0
        self.execution_count = 0
        self.durations = {key: Duration() for key in _INFERENCE_STAT_KEYS}
        self.failures = dict.fromkeys(FAILURE_REASONS, 0)  # sums to durations["fail"].count
        self.latencies = {kind: WindowedSketch() for kind in LATENCY_KINDS}  # microseconds
        self.batch_stats: dict[int, BatchStats] = {}

    def record_execution(self, timing: ExecutionTiming, requests: list[RequestOutcome]) -> None:
        """Record one batch execution of ``requests``."""
        self.record_composed(timing.start_ns, timing.end_ns, timing.compute, requests)

    def record_composed(
        self, start_ns: int, end_ns: int, compute: ComputeTimes, requests: list[RequestOutcome]
    ) -> None:
        """Record one execution from ``start_ns`` to ``end_ns`` whose compute phases took
        ``compute``: a batch's own timestamps, or an ensemble's sums over its members."""
        now = time.time()
        self.execution_count += 1
        self.last_inference_ms = int(now * 1000)
        batch = self.batch_stats.setdefault(sum(r.rows for r in requests), BatchStats())
        batch.compute_input.add(compute.input_ns)
        batch.compute_infer.add(compute.infer_ns)
        batch.compute_output.add(compute.output_ns)
        durations, latencies = self.durations, self.latencies
        succeeded = 0
        for outcome in requests:
            total_ns = end_ns - outcome.arrival_ns
            if outcome.failed:
                durations["fail"].add(total_ns)
                self.failures[BACKEND] += 1
                continue
            succeeded += 1
            queue_ns = start_ns - outcome.arrival_ns
            self.inference_count += outcome.rows
            durations["success"].add(total_ns)
            durations["queue"].add(queue_ns)
            latencies["request"].observe(total_ns / 1000, now)
            latencies["queue"].observe(queue_ns / 1000, now)
        if succeeded:  # every successful request of the execution shares its compute phases
            phases = (compute.input_ns, compute.infer_ns, compute.output_ns)
            for kind, ns in zip(_COMPUTE_KEYS, phases, strict=True):
                durations[kind].add(ns * succeeded, succeeded)
                latencies[kind].observe(ns / 1000, now, succeeded)

    def record_reported(self, reports: BackendReports, requests: list[RequestOutcome]) -> None:
        """Record one execution as its backend reported it (a Triton C backend's
        ``ReportBatchStatistics`` and ``ReportStatistics``, as Triton records them): a batch
        per batch report, each request with the backend's stamps; requests the backend
        reported nothing for are not counted, as in Triton."""
        now = time.time()
        if reports.batches:
            self.last_inference_ms = int(now * 1000)
        for batch_size, times in reports.batches:
            self.execution_count += 1
            self.inference_count += batch_size
            batch = self.batch_stats.setdefault(batch_size, BatchStats())
            compute = times.compute
            batch.compute_input.add(compute.input_ns)
            batch.compute_infer.add(compute.infer_ns)
            batch.compute_output.add(compute.output_ns)
        durations, latencies = self.durations, self.latencies
        for outcome, report in zip(requests, reports.requests, strict=True):
            if report is None:
                continue
            success, times = report
            total_ns = max(times.exec_end_ns - outcome.arrival_ns, 0)
            if not success:
                durations["fail"].add(total_ns)
                self.failures[BACKEND] += 1
                continue
            queue_ns = max(times.exec_start_ns - outcome.arrival_ns, 0)
            durations["success"].add(total_ns)
            durations["queue"].add(queue_ns)
            latencies["request"].observe(total_ns / 1000, now)
            latencies["queue"].observe(queue_ns / 1000, now)
            compute = times.compute
            phases = (compute.input_ns, compute.infer_ns, compute.output_ns)
            for kind, ns in zip(_COMPUTE_KEYS, phases, strict=True):
                durations[kind].add(ns)
                latencies[kind].observe(ns / 1000, now)

    def record_cache_hit(self, arrival_ns: int, lookup_start_ns: int, lookup_ns: int) -> None:
        """A request answered from the response cache: a success without an execution, its
        queue time until the lookup (as Triton counts a hit)."""
        now_ns = time.monotonic_ns()
        durations = self.durations
        durations["success"].add(now_ns - arrival_ns)
        durations["queue"].add(lookup_start_ns - arrival_ns)
        durations["cache_hit"].add(lookup_ns)
        now = time.time()
        self.latencies["request"].observe((now_ns - arrival_ns) / 1000, now)
        self.latencies["queue"].observe((lookup_start_ns - arrival_ns) / 1000, now)
        self.latencies["cache_hit"].observe(lookup_ns / 1000, now)

    def record_cache_miss(self, miss_ns: int) -> None:
        """A request the cache did not hold, recorded with its execution: its lookup and
        insertion time, added to its request time as Triton adds it."""
        self.durations["cache_miss"].add(miss_ns)
        self.durations["success"].ns += miss_ns
        self.latencies["cache_miss"].observe(miss_ns / 1000, time.time())

    def record_failure(self, arrival_ns: int, reason: str) -> None:
        """A request that failed without an execution of its own (``reason``: one of
        :data:`FAILURE_REASONS`)."""
        self.durations["fail"].add(time.monotonic_ns() - arrival_ns)
        self.failures[reason] += 1

    def metrics_entry(self) -> VersionMetrics:
        """The counters of Triton's per-model metric families, from the same records as
        :meth:`to_json` (see :mod:`deployments.metrics.families`)."""
        durations = self.durations
        return {
            "model": self.name,
            "version": self.version,
            "success": durations["success"].count,
            "failures": dict(self.failures),
            "inference_count": self.inference_count,
            "execution_count": self.execution_count,
            "request_ns": durations["success"].ns,
            "queue_ns": durations["queue"].ns,
            "compute_input_ns": durations["compute_input"].ns,
            "compute_infer_ns": durations["compute_infer"].ns,
            "compute_output_ns": durations["compute_output"].ns,
            "cache_hit_count": durations["cache_hit"].count,
            "cache_hit_ns": durations["cache_hit"].ns,
            "cache_miss_count": durations["cache_miss"].count,
            "cache_miss_ns": durations["cache_miss"].ns,
            "latency_windows": {kind: s.snapshot() for kind, s in self.latencies.items()},
        }

    def to_json(self) -> ModelStatistics:
        return {
            "name": self.name,
            "version": self.version,
            "last_inference": self.last_inference_ms,
            "inference_count": self.inference_count,
            "execution_count": self.execution_count,
            "inference_stats": {k: d.to_json() for k, d in self.durations.items()},
            "response_stats": {},
            "batch_stats": [
                {
                    "batch_size": size,
                    "compute_input": stats.compute_input.to_json(),
                    "compute_infer": stats.compute_infer.to_json(),
                    "compute_output": stats.compute_output.to_json(),
                }
                for size, stats in sorted(self.batch_stats.items())
            ],
            "memory_usage": [],
        }


def merge_statistics(entries: list[ModelStatistics]) -> ModelStatistics:
    """Sum the statistics JSON of the same model version from several replicas."""
    merged = ModelStatistics(**entries[0])
    merged["inference_stats"] = {
        key: {
            "count": sum(e["inference_stats"][key]["count"] for e in entries),
            "ns": sum(e["inference_stats"][key]["ns"] for e in entries),
        }
        for key in _INFERENCE_STAT_KEYS
    }
    for key in ("inference_count", "execution_count"):
        merged[key] = sum(e[key] for e in entries)
    merged["last_inference"] = max(e["last_inference"] for e in entries)
    sizes: dict[int, BatchDocument] = {}
    for entry in entries:
        for batch in entry["batch_stats"]:
            target = sizes.setdefault(
                batch["batch_size"],
                BatchDocument(
                    batch_size=batch["batch_size"],
                    compute_input={"count": 0, "ns": 0},
                    compute_infer={"count": 0, "ns": 0},
                    compute_output={"count": 0, "ns": 0},
                ),
            )
            for key in _COMPUTE_KEYS:
                target[key]["count"] += batch[key]["count"]  # type: ignore[literal-required]
                target[key]["ns"] += batch[key]["ns"]  # type: ignore[literal-required]
    merged["batch_stats"] = [sizes[s] for s in sorted(sizes)]
    return merged


def merge_entries(entries: list[ModelStatistics]) -> list[ModelStatistics]:
    """Entries of many replicas (and models) -> one merged entry per model version."""
    by_version: dict[tuple[str, str], list[ModelStatistics]] = {}
    for entry in entries:
        by_version.setdefault((entry["name"], entry["version"]), []).append(entry)
    return [merge_statistics(group) for group in by_version.values()]
