"""``pb_utils.MetricFamily`` / ``Metric``: custom model metrics, kept in this process.

Families live in a process-wide registry (Triton keeps them in the server's Prometheus
registry); :func:`collect_metrics` returns a snapshot for whoever exports them. A family name
may be declared again with the same kind (both objects share the data); metrics with the same
labels in one family share their value.
"""

from __future__ import annotations

import bisect
import enum
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TypedDict

from repo_adapter.python_backend.triton_error import TritonModelException


class MetricSample(TypedDict, total=False):
    """One label set's value: ``value`` (and a gauge's ``updated``), or a histogram's
    cumulative ``buckets`` (upper bound -> count), ``sum`` and ``count``."""

    labels: dict[str, str]
    value: float
    updated: float
    buckets: dict[float, int]
    sum: float
    count: int


class CustomFamily(TypedDict):
    """One custom metric family as :func:`collect_metrics` snapshots it."""

    name: str
    description: str
    kind: str  # "counter", "gauge" or "histogram"
    samples: list[MetricSample]


class MetricKind(enum.IntEnum):
    """Kinds of custom metrics."""

    COUNTER = 0
    GAUGE = 1
    HISTOGRAM = 2


@dataclass
class _Series:
    value: float = 0.0
    buckets: tuple[float, ...] = ()
    bucket_counts: list[int] = field(default_factory=list)
    count: int = 0
    updated: float = 0.0  # wall clock of a gauge's last set (replicas' gauges merge by it)


@dataclass
class _Family:
    name: str
    description: str
    kind: MetricKind
    series: dict[tuple[tuple[str, str], ...], _Series] = field(default_factory=dict)


_LOCK = threading.Lock()
_FAMILIES: dict[str, _Family] = {}
# Families kept in other processes (python instances in stub processes), by owner.
_SOURCES: dict[object, Callable[[], list[CustomFamily]]] = {}


class Metric:
    """One labelled series of a :class:`MetricFamily` (create with ``family.Metric(...)``)."""

    def __init__(self, family: _Family, series: _Series) -> None:
        self._family = family
        self._series = series

    def increment(self, value: float) -> None:
        """Add ``value`` (counters: must not be negative; not for histograms)."""
        kind = self._family.kind
        if kind == MetricKind.HISTOGRAM:
            raise TritonModelException("increment() is not supported for histogram metrics")
        if kind == MetricKind.COUNTER and value < 0:
            raise TritonModelException("counter metrics cannot be decremented")
        with _LOCK:
            self._series.value += float(value)

    def set(self, value: float) -> None:
        """Set a gauge to ``value``."""
        if self._family.kind != MetricKind.GAUGE:
            raise TritonModelException(
                f"set() is only supported for gauge metrics, not {self._family.kind.name.lower()}"
            )
        with _LOCK:
            self._series.value = float(value)
            self._series.updated = time.time()

    def observe(self, value: float) -> None:
        """Record ``value`` in a histogram."""
        if self._family.kind != MetricKind.HISTOGRAM:
            raise TritonModelException("observe() is only supported for histogram metrics")
        with _LOCK:
            series = self._series
            series.bucket_counts[bisect.bisect_left(series.buckets, value)] += 1
            series.value += float(value)
            series.count += 1

    def value(self) -> float:
        """The current value (counters and gauges)."""
        if self._family.kind == MetricKind.HISTOGRAM:
            raise TritonModelException("value() is not supported for histogram metrics")
        with _LOCK:
            return self._series.value


class MetricFamily:
    """A named family of metrics of one kind.

    Args:
        name: Metric name (Prometheus rules).
        description: Help text.
        kind: ``MetricFamily.COUNTER``, ``GAUGE`` or ``HISTOGRAM``.

    Raises:
        TritonModelException: when ``name`` is already registered with another kind.
    """

    COUNTER = MetricKind.COUNTER
    GAUGE = MetricKind.GAUGE
    HISTOGRAM = MetricKind.HISTOGRAM

    def __init__(self, name: str, description: str, kind: MetricKind) -> None:
        if not isinstance(name, str) or not name:
            raise TritonModelException("metric family name must be a non-empty str")
        metric_kind = MetricKind(kind)
        with _LOCK:
            family = _FAMILIES.get(name)
            if family is None:
                family = _Family(name, str(description), metric_kind)
                _FAMILIES[name] = family
            elif family.kind != metric_kind:
                raise TritonModelException(
                    f"metric family '{name}' already exists as a {family.kind.name.lower()}"
                )
        self._family = family

    def Metric(
        self, labels: dict[str, str] | None = None, buckets: Sequence[float] | None = None
    ) -> Metric:
        """The series of this family with ``labels`` (created on first use).

        Args:
            labels: Label names to values, all ``str``.
            buckets: Histogram bucket upper bounds (required for, and only for, histograms).
        """
        labels = labels or {}
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in labels.items()):
            raise TritonModelException("metric labels must map str to str")
        is_histogram = self._family.kind == MetricKind.HISTOGRAM
        if is_histogram and buckets is None:
            raise TritonModelException("histogram metrics need 'buckets'")
        if not is_histogram and buckets is not None:
            raise TritonModelException("'buckets' are only supported for histogram metrics")
        bounds = tuple(sorted(float(b) for b in buckets or ()))
        key = tuple(sorted(labels.items()))
        with _LOCK:
            series = self._family.series.get(key)
            if series is None:
                series = _Series(buckets=bounds, bucket_counts=[0] * (len(bounds) + 1))
                self._family.series[key] = series
        return Metric(self._family, series)


def add_metrics_source(owner: object, source: Callable[[], list[CustomFamily]]) -> None:
    """Include ``source``'s families (kept in another process) in :func:`collect_metrics`
    until :func:`remove_metrics_source` of ``owner``."""
    with _LOCK:
        _SOURCES[owner] = source


def remove_metrics_source(owner: object) -> None:
    with _LOCK:
        _SOURCES.pop(owner, None)


def collect_metrics() -> list[CustomFamily]:
    """Snapshot of every family: name, description, kind and per-label-set samples.

    Histogram samples carry cumulative ``buckets`` (upper bound -> count), ``sum`` and
    ``count``; counter and gauge samples carry ``value``. Families of the sources added with
    :func:`add_metrics_source` follow this process's own (a family may then appear more than
    once: whoever exports merges them).
    """
    with _LOCK:
        sources = list(_SOURCES.values())
    snapshot = _local_families()
    for source in sources:
        snapshot.extend(source())
    return snapshot


def _local_families() -> list[CustomFamily]:
    snapshot: list[CustomFamily] = []
    with _LOCK:
        for family in _FAMILIES.values():
            samples = []
            for key, series in family.series.items():
                sample = MetricSample(labels=dict(key))
                if family.kind == MetricKind.HISTOGRAM:
                    cumulative, running = {}, 0
                    for bound, count in zip(series.buckets, series.bucket_counts, strict=False):
                        running += count
                        cumulative[bound] = running
                    cumulative[float("inf")] = series.count
                    sample.update(buckets=cumulative, sum=series.value, count=series.count)
                else:
                    sample["value"] = series.value
                    if family.kind == MetricKind.GAUGE:
                        sample["updated"] = series.updated
                samples.append(sample)
            snapshot.append(
                {
                    "name": family.name,
                    "description": family.description,
                    "kind": family.kind.name.lower(),
                    "samples": samples,
                }
            )
    return snapshot


def clear_metrics() -> None:
    """Forget every family (tests, and model reloads that redefine metrics)."""
    with _LOCK:
        _FAMILIES.clear()
