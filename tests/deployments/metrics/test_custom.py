from prometheus_client.parser import text_string_to_metric_families

from deployments.metrics.custom import custom_families, merge_custom
from deployments.metrics.exposition import render


def counter(value, labels=None):
    return {
        "name": "my_requests",
        "description": "requests seen",
        "kind": "counter",
        "samples": [{"labels": labels or {"kind": "seen"}, "value": value}],
    }


def gauge(value, updated):
    return {
        "name": "my_temperature",
        "description": "last reading",
        "kind": "gauge",
        "samples": [{"labels": {}, "value": value, "updated": updated}],
    }


def histogram(observations):
    buckets = {1.0: sum(1 for o in observations if o <= 1.0), float("inf"): len(observations)}
    return {
        "name": "my_sizes",
        "description": "sizes",
        "kind": "histogram",
        "samples": [
            {"labels": {}, "buckets": buckets, "sum": sum(observations), "count": len(observations)}
        ],
    }


def test_counters_and_histograms_add_up_and_a_gauge_is_its_latest_value():
    merged = merge_custom(
        [
            [counter(2), gauge(30.0, updated=100.0), histogram([0.5, 3.0])],
            [counter(5), counter(1, {"kind": "other"}), gauge(20.0, updated=200.0)],
            [histogram([0.1])],
        ]
    )
    by_name = {f["name"]: f for f in merged}
    values = {tuple(s["labels"].items()): s["value"] for s in by_name["my_requests"]["samples"]}
    assert values == {(("kind", "seen"),): 7, (("kind", "other"),): 1}
    assert by_name["my_temperature"]["samples"][0]["value"] == 20.0
    (sizes,) = by_name["my_sizes"]["samples"]
    assert (sizes["count"], sizes["sum"], sizes["buckets"][1.0]) == (3, 3.6, 2)


def test_custom_families_render_and_parse():
    text = render(custom_families(merge_custom([[counter(2), histogram([0.5, 3.0])]])))
    parsed = {f.name: f for f in text_string_to_metric_families(text)}
    assert parsed["my_requests"].samples[0].value == 2
    buckets = {
        s.labels["le"]: s.value for s in parsed["my_sizes"].samples if s.name.endswith("_bucket")
    }
    assert buckets == {"1": 1, "+Inf": 2}


def test_a_model_cannot_shadow_tritons_families():
    shadow = counter(1) | {"name": "nv_inference_count"}
    assert custom_families(merge_custom([[shadow]])) == []
