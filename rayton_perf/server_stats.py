"""What the server says about the model: discovery before a run, statistics during it.

Discovery follows perf_analyzer's start-up calls: ``GET /v2`` (the ``statistics``
extension decides whether server-side numbers are collected), then the model's metadata
and config. Statistics are cumulative counters (``GET …/stats``); a window's server-side
numbers are the difference of two snapshots, summed over windows when they are merged.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from rayton_perf.client import TritonConnection
from rayton_perf.config import PerfError


@dataclass
class TensorMeta:
    """One input or output as the model metadata and config describe it.

    Attributes:
        name: tensor name.
        datatype: Triton datatype string (``FP32``, ``BYTES``, ...).
        dims: shape of one row, i.e. without the batch dimension; -1 marks a variable dim.
        optional: ``input[].optional`` from the config.
        is_shape_tensor: ``is_shape_tensor`` from the config.
    """

    name: str
    datatype: str
    dims: list[int]
    optional: bool = False
    is_shape_tensor: bool = False


@dataclass
class ModelInfo:
    """The parts of a model's metadata and config that shape the load.

    Attributes:
        name: model name.
        version: version asked for with ``-x`` ("" lets the server choose).
        platform: ``platform`` from the metadata (``python``, ``ensemble``, ...).
        max_batch_size: from the config; > 0 means requests carry a batch dimension.
        inputs: model inputs, dims without the batch dimension.
        outputs: model outputs, dims without the batch dimension.
        decoupled: ``model_transaction_policy.decoupled``.
        dynamic_batching: the config has a ``dynamic_batching`` section.
        sequence_batching: the config has a ``sequence_batching`` section.
        response_cache: ``response_cache.enable``.
    """

    name: str
    version: str
    platform: str
    max_batch_size: int
    inputs: list[TensorMeta]
    outputs: list[TensorMeta]
    decoupled: bool = False
    dynamic_batching: bool = False
    sequence_batching: bool = False
    response_cache: bool = False

    @property
    def batching(self) -> bool:
        """Whether requests carry a leading batch dimension."""
        return self.max_batch_size > 0


def supports_statistics(server_metadata: dict[str, Any]) -> bool:
    """perf_analyzer collects server-side statistics only if the server lists them."""
    return "statistics" in server_metadata.get("extensions", [])


def model_info_from(
    metadata: dict[str, Any], config: dict[str, Any], version: str = ""
) -> ModelInfo:
    """Combine model metadata and config JSON into a :class:`ModelInfo`.

    Raises:
        PerfError: the model needs features this tool does not drive (decoupled
            responses, sequence batching, shape tensors).
    """
    max_batch_size = int(config.get("max_batch_size", 0))
    config_inputs = {t.get("name"): t for t in config.get("input", [])}
    config_outputs = {t.get("name"): t for t in config.get("output", [])}

    def tensors(entries: list[dict[str, Any]], from_config: dict[str, Any]) -> list[TensorMeta]:
        result = []
        for entry in entries:
            shape = [int(d) for d in entry.get("shape", [])]
            # Metadata shows the batch dim as a leading -1 when the model batches.
            dims = shape[1:] if max_batch_size > 0 and shape else shape
            extra = from_config.get(entry["name"], {})
            result.append(
                TensorMeta(
                    name=entry["name"],
                    datatype=entry["datatype"],
                    dims=dims,
                    optional=bool(extra.get("optional", False)),
                    is_shape_tensor=bool(extra.get("is_shape_tensor", False)),
                )
            )
        return result

    info = ModelInfo(
        name=metadata.get("name", ""),
        version=version,
        platform=metadata.get("platform", "")
        or config.get("platform", "")
        or config.get("backend", ""),
        max_batch_size=max_batch_size,
        inputs=tensors(metadata.get("inputs", []), config_inputs),
        outputs=tensors(metadata.get("outputs", []), config_outputs),
        decoupled=bool(config.get("model_transaction_policy", {}).get("decoupled", False)),
        dynamic_batching="dynamic_batching" in config,
        sequence_batching="sequence_batching" in config,
        response_cache=bool(config.get("response_cache", {}).get("enable", False)),
    )
    if info.decoupled:
        raise PerfError(
            f"model '{info.name}' is decoupled; rayton perf measures models that answer each "
            "request with one response (use perf_analyzer --streaming)"
        )
    if info.sequence_batching:
        raise PerfError(
            f"model '{info.name}' uses sequence batching; sequence loads are not supported "
            "by rayton perf"
        )
    shape_tensors = [t.name for t in info.inputs if t.is_shape_tensor]
    if shape_tensors:
        raise PerfError(f"shape tensor inputs are not supported: {', '.join(shape_tensors)}")
    return info


async def discover_model(connection: TritonConnection, model: str, version: str) -> ModelInfo:
    """Fetch metadata and config of ``model`` and combine them.

    Raises:
        PerfError: the model is unknown or unusable.
    """
    try:
        metadata = await connection.model_metadata(model, version)
        config = await connection.model_config(model, version)
    except PerfError:
        raise
    except Exception as err:  # tritonclient raises its own exception types per protocol
        raise PerfError(f"failed to get metadata/config of model '{model}': {err}") from None
    return model_info_from(metadata, config, version)


# ---------------------------------------------------------------------------------------------
# Statistics


@dataclass
class ServerStats:
    """Cumulative (or, after subtraction, per-window) counters of one model version.

    Durations are nanoseconds. ``batch_executions`` maps a batch size to the number of
    executions of that size (from ``batch_stats[].compute_infer.count``).
    """

    inference_count: int = 0
    execution_count: int = 0
    success_count: int = 0
    success_ns: int = 0
    fail_count: int = 0
    queue_count: int = 0
    queue_ns: int = 0
    compute_input_count: int = 0
    compute_input_ns: int = 0
    compute_infer_count: int = 0
    compute_infer_ns: int = 0
    compute_output_count: int = 0
    compute_output_ns: int = 0
    cache_hit_count: int = 0
    cache_hit_ns: int = 0
    cache_miss_count: int = 0
    cache_miss_ns: int = 0
    batch_executions: dict[int, int] = field(default_factory=dict)

    @classmethod
    def from_json(cls, entry: dict[str, Any]) -> ServerStats:
        """Read one ``model_stats[]`` entry (HTTP JSON or gRPC's protobuf JSON)."""
        infer = entry.get("inference_stats", {})

        def stat(key: str) -> tuple[int, int]:
            duration = infer.get(key, {})
            return int(duration.get("count", 0)), int(duration.get("ns", 0))

        stats = cls(
            inference_count=int(entry.get("inference_count", 0)),
            execution_count=int(entry.get("execution_count", 0)),
        )
        stats.success_count, stats.success_ns = stat("success")
        stats.fail_count, _ = stat("fail")
        stats.queue_count, stats.queue_ns = stat("queue")
        stats.compute_input_count, stats.compute_input_ns = stat("compute_input")
        stats.compute_infer_count, stats.compute_infer_ns = stat("compute_infer")
        stats.compute_output_count, stats.compute_output_ns = stat("compute_output")
        stats.cache_hit_count, stats.cache_hit_ns = stat("cache_hit")
        stats.cache_miss_count, stats.cache_miss_ns = stat("cache_miss")
        for batch in entry.get("batch_stats", []):
            size = int(batch.get("batch_size", 0))
            count = int(batch.get("compute_infer", {}).get("count", 0))
            stats.batch_executions[size] = stats.batch_executions.get(size, 0) + count
        return stats

    def _combine(self, other: ServerStats, sign: int) -> ServerStats:
        result = ServerStats()
        for f in fields(self):
            if f.name != "batch_executions":
                setattr(result, f.name, getattr(self, f.name) + sign * getattr(other, f.name))
        sizes = set(self.batch_executions) | set(other.batch_executions)
        for size in sorted(sizes):
            count = self.batch_executions.get(size, 0) + sign * other.batch_executions.get(size, 0)
            if count:
                result.batch_executions[size] = count
        return result

    def __add__(self, other: ServerStats) -> ServerStats:
        return self._combine(other, 1)

    def __sub__(self, other: ServerStats) -> ServerStats:
        return self._combine(other, -1)

    # -- per-request averages, in whole µs as perf_analyzer prints them ----------------------

    @property
    def avg_request_us(self) -> int:
        """Mean server-side request latency (``success.ns / success.count``)."""
        return _avg_us(self.success_ns, self.success_count)

    @property
    def avg_queue_us(self) -> int:
        return _avg_us(self.queue_ns, self.queue_count)

    @property
    def avg_compute_input_us(self) -> int:
        return _avg_us(self.compute_input_ns, self.compute_input_count)

    @property
    def avg_compute_infer_us(self) -> int:
        return _avg_us(self.compute_infer_ns, self.compute_infer_count)

    @property
    def avg_compute_output_us(self) -> int:
        return _avg_us(self.compute_output_ns, self.compute_output_count)

    @property
    def avg_compute_us(self) -> int:
        """Mean of compute input + infer + output per computed request."""
        total = self.compute_input_ns + self.compute_infer_ns + self.compute_output_ns
        return _avg_us(total, self.compute_input_count)

    @property
    def avg_cache_hit_us(self) -> int:
        return _avg_us(self.cache_hit_ns, self.cache_hit_count)

    @property
    def avg_cache_miss_us(self) -> int:
        return _avg_us(self.cache_miss_ns, self.cache_miss_count)

    @property
    def avg_overhead_us(self) -> int:
        """Request latency not spent queued or computing (never negative)."""
        return max(0, self.avg_request_us - self.avg_queue_us - self.avg_compute_us)


def _avg_us(total_ns: int, count: int) -> int:
    return total_ns // (count * 1000) if count > 0 else 0


def parse_statistics(payload: dict[str, Any]) -> dict[tuple[str, str], ServerStats]:
    """Index a statistics answer by ``(model name, version)``."""
    return {
        (str(entry.get("name", "")), str(entry.get("version", ""))): ServerStats.from_json(entry)
        for entry in payload.get("model_stats", [])
    }


def select_version(
    model: str,
    requested: str,
    start: dict[tuple[str, str], ServerStats],
    end: dict[tuple[str, str], ServerStats],
) -> str:
    """The version whose statistics describe the window, as perf_analyzer picks it.

    With ``-x`` that version; otherwise the version whose ``queue.count`` grew during the
    window (the highest one if several did).

    Raises:
        PerfError: no matching version (perf_analyzer's "failed to find the requested
            model version").
    """
    if requested:
        if (model, requested) in end:
            return requested
        raise PerfError("failed to find the requested model version")
    grown = []
    for (name, version), stats in end.items():
        before = start.get((name, version), ServerStats())
        if name == model and stats.queue_count > before.queue_count:
            grown.append(version)
    if not grown:
        raise PerfError("failed to find the requested model version")
    return max(grown, key=lambda v: int(v) if v.isdigit() else -1)


def window_delta(
    model: str,
    requested: str,
    start: dict[tuple[str, str], ServerStats],
    end: dict[tuple[str, str], ServerStats],
) -> ServerStats:
    """Server-side counters accumulated between two snapshots."""
    version = select_version(model, requested, start, end)
    return end[(model, version)] - start.get((model, version), ServerStats())
