"""Triton's per-model metric families, built from every replica's per-version counters.

Each replica reports, per model version, the counters its
:class:`~deployments.observability.statistics.VersionStatistics` keeps (the same ones the statistics
extension reports, so a request counted in one is counted in the other), the failures by
reason, the requests pending in its queue and the version's load time. :func:`merge_versions`
sums them over replicas; :func:`model_families` renders Triton's families: names, types, help
texts and labels as tritonserver 2.51 prints them (``nv_model_load_duration_secs`` as newer
releases add it).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from deployments.metrics.exposition import Family
from deployments.observability.latency_sketch import merge_windows, quantile
from deployments.observability.statistics import FAILURE_REASONS, LATENCY_KINDS

# Per-version counters that add up over replicas (nanoseconds for durations).
SUMMED_FIELDS = (
    "success",
    "inference_count",
    "execution_count",
    "request_ns",
    "queue_ns",
    "compute_input_ns",
    "compute_infer_ns",
    "compute_output_ns",
    "cache_hit_count",
    "cache_hit_ns",
    "cache_miss_count",
    "cache_miss_ns",
    "pending",
    "shadow_success",
    "shadow_failure",
    "shadow_ns",
    "shadow_dropped",
)

_CACHED = "(includes cached requests)"
_NOT_CACHED = "(does not include cached requests)"
# (family, entry field, help): Triton's counters, then its cumulative durations (in us).
_COUNTERS = (
    (
        "nv_inference_request_success",
        "success",
        "Number of successful inference requests, all batch sizes",
    ),
    ("nv_inference_count", "inference_count", f"Number of inferences performed {_NOT_CACHED}"),
    (
        "nv_inference_exec_count",
        "execution_count",
        f"Number of model executions performed {_NOT_CACHED}",
    ),
)
_DURATIONS = (
    (
        "nv_inference_request_duration_us",
        "request_ns",
        f"Cumulative inference request duration in microseconds {_CACHED}",
    ),
    (
        "nv_inference_queue_duration_us",
        "queue_ns",
        f"Cumulative inference queuing duration in microseconds {_CACHED}",
    ),
    (
        "nv_inference_compute_input_duration_us",
        "compute_input_ns",
        f"Cumulative compute input duration in microseconds {_NOT_CACHED}",
    ),
    (
        "nv_inference_compute_infer_duration_us",
        "compute_infer_ns",
        f"Cumulative compute inference duration in microseconds {_NOT_CACHED}",
    ),
    (
        "nv_inference_compute_output_duration_us",
        "compute_output_ns",
        f"Cumulative inference compute output duration in microseconds {_NOT_CACHED}",
    ),
)
# (family, entry field, help, whether it is a duration): a cached model's response cache.
_CACHE_COUNTERS = (
    ("nv_cache_num_hits_per_model", "cache_hit_count", "Number of cache hits per model", False),
    (
        "nv_cache_hit_duration_per_model",
        "cache_hit_ns",
        "Total cache hit duration per model, in microseconds",
        True,
    ),
    (
        "nv_cache_num_misses_per_model",
        "cache_miss_count",
        "Number of cache misses per model",
        False,
    ),
    (
        "nv_cache_miss_duration_per_model",
        "cache_miss_ns",
        "Total cache miss (insert+lookup) duration per model, in microseconds",
        True,
    ),
)
# (family, entry field, help, whether it is a duration): a shadow version's copies of requests
# (repo_adapter/version_traffic.py), rayton's own families.
_SHADOW_COUNTERS = (
    (
        "rayton_shadow_request_success",
        "shadow_success",
        "Number of shadow copies of requests the version answered",
        False,
    ),
    (
        "rayton_shadow_request_failure",
        "shadow_failure",
        "Number of shadow copies of requests that failed in the version",
        False,
    ),
    (
        "rayton_shadow_request_duration_us",
        "shadow_ns",
        "Cumulative duration of the version's shadow copies in microseconds",
        True,
    ),
    (
        "rayton_shadow_request_dropped",
        "shadow_dropped",
        "Number of shadow copies not sent as too many were running",
        False,
    ),
)
FAILURE_HELP = "Number of failed inference requests, all batch sizes"
PENDING_HELP = "Instantaneous number of pending requests awaiting execution per-model."
LOAD_HELP = "Model load time in seconds"


# (family, statistics field of its _sum, help): Triton's summaries, one per latency kind.
_SUMMARIES = {
    "request": (
        "nv_inference_request_summary_us",
        "request_ns",
        f"Summary of inference request duration in microseconds {_CACHED}",
    ),
    "queue": (
        "nv_inference_queue_summary_us",
        "queue_ns",
        f"Summary of inference queuing duration in microseconds {_CACHED}",
    ),
    "compute_input": (
        "nv_inference_compute_input_summary_us",
        "compute_input_ns",
        f"Cumulative compute input duration in microseconds {_NOT_CACHED}",
    ),
    "compute_infer": (
        "nv_inference_compute_infer_summary_us",
        "compute_infer_ns",
        f"Cumulative compute inference duration in microseconds {_NOT_CACHED}",
    ),
    "compute_output": (
        "nv_inference_compute_output_summary_us",
        "compute_output_ns",
        f"Cumulative inference compute output duration in microseconds {_NOT_CACHED}",
    ),
    "cache_hit": (
        "nv_cache_hit_summary_per_model",
        "cache_hit_ns",
        "Summary of cache hit counts/durations per model, in microseconds.",
    ),
    "cache_miss": (
        "nv_cache_miss_summary_per_model",
        "cache_miss_ns",
        "Summary of cache miss counts/durations per model, in microseconds.",
    ),
}  # Triton 2.51's help texts, "Cumulative" for the compute ones included
# What a summary's _count counts: requests, or only those that executed (not cache hits), or
# the cache's hits or misses.
_SUMMARY_COUNTS = {"cache_hit": "cache_hit_count", "cache_miss": "cache_miss_count"}
_EXECUTED_KINDS = ("compute_input", "compute_infer", "compute_output")


@dataclass(frozen=True)
class LatencyOptions:
    """``--metrics-config`` keys that shape the latency families."""

    counter_latencies: bool = True
    summary_latencies: bool = False
    quantiles: tuple[float, ...] = (0.5, 0.9, 0.95, 0.99, 0.999)


def version_key(entry: dict[str, Any]) -> tuple[str, str, str]:
    return entry["model"], entry["version"], entry.get("gpu_uuid", "")


def merge_versions(entries: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Sum per-version entries of the same model, version and GPU over replicas (load time:
    the slowest replica's), in first-seen order."""
    merged: dict[tuple[str, str, str], dict[str, Any]] = {}
    for entry in entries:
        key = version_key(entry)
        windows = entry.get("latency_windows", {})
        total = merged.get(key)
        if total is None:
            merged[key] = {
                **entry,
                "failures": {r: entry.get("failures", {}).get(r, 0) for r in FAILURE_REASONS},
                "latency_windows": {kind: [windows[kind]] for kind in windows},
            }
            continue
        for kind, window in windows.items():
            total["latency_windows"].setdefault(kind, []).append(window)
        for name in SUMMED_FIELDS:
            total[name] = total.get(name, 0) + entry.get(name, 0)
        total["shadow"] = bool(total.get("shadow") or entry.get("shadow"))
        for reason in FAILURE_REASONS:
            total["failures"][reason] += entry.get("failures", {}).get(reason, 0)
        total["load_duration_s"] = max(
            total.get("load_duration_s", 0.0), entry.get("load_duration_s", 0.0)
        )
    return list(merged.values())


def labels_of(entry: dict[str, Any]) -> dict[str, str]:
    """Triton's labels of a model version, in its order (``gpu_uuid`` for GPU instances)."""
    labels = {"model": entry["model"], "version": entry["version"]}
    if entry.get("gpu_uuid"):
        labels = {"gpu_uuid": entry["gpu_uuid"], **labels}
    return labels


def model_families(
    versions: list[dict[str, Any]], options: LatencyOptions = LatencyOptions()
) -> list[Family]:
    """Triton's per-model families for merged ``versions`` (see :func:`merge_versions`)."""
    families: list[Family] = []
    success = Family(_COUNTERS[0][0], "counter", _COUNTERS[0][2])
    failure = Family("nv_inference_request_failure", "counter", FAILURE_HELP)
    families += [success, failure]
    for entry in versions:
        labels = labels_of(entry)
        success.add(labels, int(entry.get("success", 0)))
        for reason in FAILURE_REASONS:
            with_reason = {k: v for k, v in labels.items() if k != "version"}
            with_reason |= {"reason": reason, "version": labels["version"]}
            failure.add(with_reason, int(entry["failures"].get(reason, 0)))
    for name, field_name, help_text in _COUNTERS[1:]:
        family = Family(name, "counter", help_text)
        for entry in versions:
            family.add(labels_of(entry), int(entry.get(field_name, 0)))
        families.append(family)
    if options.counter_latencies:
        for name, field_name, help_text in _DURATIONS:
            family = Family(name, "counter", help_text)
            for entry in versions:
                family.add(labels_of(entry), int(entry.get(field_name, 0)) // 1000)
            families.append(family)
    families += _counters_of(versions, "response_cache", _CACHE_COUNTERS)
    if options.summary_latencies:
        families += _summary_families(versions, options.quantiles)
    pending = Family("nv_inference_pending_request_count", "gauge", PENDING_HELP)
    load = Family("nv_model_load_duration_secs", "gauge", LOAD_HELP)
    for entry in versions:
        pending.add(labels_of(entry), int(entry.get("pending", 0)))
        load.add(labels_of(entry), float(entry.get("load_duration_s", 0.0)))
    families += [pending, load]
    families += _counters_of(versions, "shadow", _SHADOW_COUNTERS)
    return families


def _counters_of(
    versions: list[dict[str, Any]], flag: str, counters: tuple[tuple[str, str, str, bool], ...]
) -> list[Family]:
    """``counters`` (family, entry field, help, whether in ns shown as us) over the versions
    whose entry sets ``flag``; none when no version does."""
    flagged = [entry for entry in versions if entry.get(flag)]
    families = []
    for name, field_name, help_text, in_us in counters if flagged else ():
        family = Family(name, "counter", help_text)
        for entry in flagged:
            value = int(entry.get(field_name, 0))
            family.add(labels_of(entry), value // 1000 if in_us else value)
        families.append(family)
    return families


def _summary_families(versions: list[dict[str, Any]], quantiles: tuple[float, ...]) -> list[Family]:
    """Triton's summaries: ``_count`` and ``_sum`` over all time (the counters' values), the
    quantiles over the last minute of every replica's requests; a cached model's cache hits
    and misses too (its compute summaries count only the requests that ran)."""
    families = []
    for kind in LATENCY_KINDS:
        name, sum_field, help_text = _SUMMARIES[kind]
        family = Family(name, "summary", help_text)
        for entry in versions:
            if kind in _SUMMARY_COUNTS and not entry.get("response_cache"):
                continue  # the cache's summaries are a cached model's
            labels = labels_of(entry)
            count = int(entry.get(_SUMMARY_COUNTS.get(kind, "success"), 0))
            if kind in _EXECUTED_KINDS:
                count -= int(entry.get("cache_hit_count", 0))
            family.add(labels, count, "_count")
            family.add(labels, int(entry.get(sum_field, 0)) // 1000, "_sum")
            buckets = merge_windows(entry.get("latency_windows", {}).get(kind, []))
            for q in quantiles:
                family.add({**labels, "quantile": _quantile_label(q)}, quantile(buckets, q))
        families.append(family)
    return families


def _quantile_label(q: float) -> str:
    return repr(q) if not float(q).is_integer() else str(int(q))
