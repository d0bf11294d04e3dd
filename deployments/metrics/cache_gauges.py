"""Triton's server-wide response cache gauges (``nv_cache_util``, ``nv_cache_num_*``,
``nv_cache_*_duration``), summed over every node's cache: utilization is the bytes used over
the bytes of all nodes' caches."""

from __future__ import annotations

from collections.abc import Sequence

from deployments.core.response_cache import CacheUsage
from deployments.metrics.exposition import Family

# (family, help) after nv_cache_util, in Triton 2.51's order and words.
_GAUGES = (
    ("nv_cache_num_entries", "Number of responses stored in response cache"),
    ("nv_cache_num_hits", "Number of cache hits in response cache"),
    ("nv_cache_num_misses", "Number of cache misses in response cache"),
    ("nv_cache_num_lookups", "Number of cache lookups in response cache"),
    ("nv_cache_num_evictions", "Number of cache evictions in response cache"),
    ("nv_cache_lookup_duration", "Total cache lookup duration (hit and miss), in microseconds"),
    ("nv_cache_insertion_duration", "Total cache insertion duration, in microseconds"),
)


def cache_families(usages: Sequence[CacheUsage]) -> list[Family]:
    """The gauges of a server with a response cache, over ``usages`` (its nodes' caches; none
    yet: zeros)."""
    capacity = sum(usage.capacity_bytes for usage in usages)
    used = sum(usage.used_bytes for usage in usages)
    util = Family("nv_cache_util", "gauge", "Cache utilization [0.0 - 1.0]")
    util.add({}, used / capacity if capacity else 0.0)
    values = (
        sum(u.entries for u in usages),
        sum(u.hits for u in usages),
        sum(u.misses for u in usages),
        sum(u.lookups for u in usages),
        sum(u.evictions for u in usages),
        sum(u.lookup_ns for u in usages) // 1000,
        sum(u.insertion_ns for u in usages) // 1000,
    )
    families = [util]
    for (name, help_text), value in zip(_GAUGES, values, strict=True):
        family = Family(name, "gauge", help_text)
        family.add({}, value)
        families.append(family)
    return families
