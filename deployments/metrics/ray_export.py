"""The ``/metrics`` numbers in Ray's metrics too (``ray.util.metrics``).

Ray's Prometheus export (each node's metrics agent, ``--metrics-export-port``) and the Ray
dashboard's Grafana then show Triton's families next to ``ray_serve_*``: Ray prefixes every
name with ``ray_`` and counters get ``_total`` (``ray_nv_inference_request_success_total``).
The mirror receives the merged families each interval: counters advance by what they grew
since the last export (a replica restart that resets a count is not subtracted), gauges are
set. Histograms and summaries stay on ``/metrics`` only: Ray's histograms are fed
observations, not bucket counts.
"""

from __future__ import annotations

import logging
from typing import Any

from deployments.metrics.exposition import Family

logger = logging.getLogger(__name__)


class RayMetricsMirror:
    """Keeps one Ray metric per family, created on first sight with that family's labels."""

    def __init__(self) -> None:
        self._metrics: dict[str, tuple[Any, tuple[str, ...]]] = {}
        self._last: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}

    def export(self, families: list[Family]) -> None:
        for family in families:
            if family.kind not in ("counter", "gauge") or not family.samples:
                continue
            metric, keys = self._metric(family)
            if metric is None:
                continue
            for sample in family.samples:
                tags = {key: str(sample.labels.get(key, "")) for key in keys}
                if family.kind == "gauge":
                    metric.set(float(sample.value), tags=tags)
                    continue
                series = (family.name, tuple(sorted(tags.items())))
                grown = float(sample.value) - self._last.get(series, 0.0)
                self._last[series] = float(sample.value)
                if grown > 0:
                    metric.inc(grown, tags=tags)

    def _metric(self, family: Family) -> tuple[Any, tuple[str, ...]]:
        found = self._metrics.get(family.name)
        if found is not None:
            return found
        from ray.util import metrics

        keys = tuple(sorted({key for sample in family.samples for key in sample.labels}))
        kind = metrics.Counter if family.kind == "counter" else metrics.Gauge
        try:
            metric = kind(family.name, description=family.help, tag_keys=keys)
        except Exception as err:  # a name Ray refuses: keep it on /metrics only
            logger.warning("metric '%s' not exported to Ray: %s", family.name, err)
            metric = None
        self._metrics[family.name] = (metric, keys)
        return metric, keys
