"""Python models' own metrics (``pb_utils.MetricFamily``) merged over the replicas that keep them.

Each replica process keeps its families (:func:`repo_adapter.python_backend.collect_metrics`);
the same family and labels in several replicas is one series: counters and histograms add
up, a gauge shows the value set last (its samples carry when they were set).
"""

from __future__ import annotations

from collections.abc import Iterable

from deployments.metrics.exposition import Family
from repo_adapter.python_backend.metrics import CustomFamily, MetricSample

_TRITON_PREFIX = "nv_"  # Triton's own families; a model may not shadow them


def merge_custom(snapshots: Iterable[list[CustomFamily]]) -> list[CustomFamily]:
    """One snapshot (``collect_metrics`` form) from several replicas' snapshots."""
    families: dict[str, CustomFamily] = {}
    by_labels: dict[str, dict[tuple[tuple[str, str], ...], MetricSample]] = {}
    for snapshot in snapshots:
        for family in snapshot:
            merged = families.setdefault(family["name"], CustomFamily(**{**family, "samples": []}))
            if merged["kind"] != family["kind"]:
                continue  # declared with another kind elsewhere: the first one wins
            samples = by_labels.setdefault(family["name"], {})
            for sample in family["samples"]:
                key = tuple(sorted(sample["labels"].items()))
                found = samples.get(key)
                if found is None:
                    copy = MetricSample(**sample)
                    if "buckets" in copy:
                        copy["buckets"] = dict(copy["buckets"])
                    samples[key] = copy
                    merged["samples"].append(copy)
                elif family["kind"] == "gauge":
                    if sample.get("updated", 0.0) >= found.get("updated", 0.0):
                        found.update(value=sample["value"], updated=sample.get("updated", 0.0))
                elif family["kind"] == "histogram":
                    for bound, count in sample["buckets"].items():
                        found["buckets"][bound] = found["buckets"].get(bound, 0) + count
                    found["sum"] += sample["sum"]
                    found["count"] += sample["count"]
                else:
                    found["value"] += sample["value"]
    return list(families.values())


def custom_families(snapshot: list[CustomFamily]) -> list[Family]:
    """Exposition families of a merged snapshot (names starting ``nv_`` are left out)."""
    families = []
    for entry in snapshot:
        if entry["name"].startswith(_TRITON_PREFIX):
            continue
        family = Family(entry["name"], entry["kind"], entry["description"])
        for sample in entry["samples"]:
            labels = sample["labels"]
            if entry["kind"] != "histogram":
                family.add(labels, sample["value"])
                continue
            family.add(labels, sample["count"], "_count")
            family.add(labels, sample["sum"], "_sum")
            for bound, count in sorted(sample["buckets"].items()):
                le = "+Inf" if bound == float("inf") else _bound(bound)
                family.add({**labels, "le": le}, count, "_bucket")
        families.append(family)
    return families


def _bound(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))
