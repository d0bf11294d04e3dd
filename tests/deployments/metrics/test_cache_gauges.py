from deployments.core.response_cache import CacheUsage
from deployments.metrics.cache_gauges import cache_families


def usage(capacity: int, used: int, hits: int) -> CacheUsage:
    return CacheUsage(capacity, used, 3, hits + 1, hits, 1, 2, 4_000, 6_000)


def test_the_gauges_sum_every_nodes_cache():
    families = {
        f.name: f.samples[0].value for f in cache_families([usage(100, 30, 5), usage(100, 10, 1)])
    }
    assert families == {
        "nv_cache_util": 0.2,
        "nv_cache_num_entries": 6,
        "nv_cache_num_hits": 6,
        "nv_cache_num_misses": 2,
        "nv_cache_num_lookups": 8,
        "nv_cache_num_evictions": 4,
        "nv_cache_lookup_duration": 8,
        "nv_cache_insertion_duration": 12,
    }


def test_a_server_whose_caches_have_not_started_shows_zeros():
    families = {f.name: f.samples[0].value for f in cache_families([])}
    assert families["nv_cache_util"] == 0 and families["nv_cache_num_entries"] == 0
