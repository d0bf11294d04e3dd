from deployments.metrics.families import (
    FAILURE_REASONS,
    LatencyOptions,
    merge_versions,
    model_families,
)


def entry(model="m", version="1", **fields):
    base = {
        "model": model,
        "version": version,
        "success": 0,
        "failures": {},
        "inference_count": 0,
        "execution_count": 0,
        "request_ns": 0,
        "queue_ns": 0,
        "compute_input_ns": 0,
        "compute_infer_ns": 0,
        "compute_output_ns": 0,
        "pending": 0,
        "load_duration_s": 0.0,
    }
    return base | fields


def by_name(families):
    return {f.name: f for f in families}


def test_replicas_of_a_version_add_up_and_versions_stay_apart():
    merged = merge_versions(
        [
            entry(success=2, inference_count=5, request_ns=3_000, failures={"BACKEND": 1}),
            entry(success=1, inference_count=1, request_ns=2_500, load_duration_s=1.5),
            entry(version="2", success=7, load_duration_s=0.2),
            entry(model="other", pending=3),
        ]
    )
    assert [(e["model"], e["version"]) for e in merged] == [("m", "1"), ("m", "2"), ("other", "1")]
    first = merged[0]
    assert (first["success"], first["inference_count"], first["request_ns"]) == (3, 6, 5_500)
    assert first["failures"] == {"REJECTED": 0, "CANCELED": 0, "BACKEND": 1, "OTHER": 0}
    assert first["load_duration_s"] == 1.5  # the slowest replica's load


def test_triton_families_names_types_labels_and_units():
    families = by_name(
        model_families(
            merge_versions(
                [
                    entry(
                        success=4,
                        inference_count=10,
                        execution_count=2,
                        request_ns=9_999,
                        queue_ns=1_000,
                        failures={"REJECTED": 2},
                        pending=1,
                        load_duration_s=0.5,
                    )
                ]
            )
        )
    )
    labels = {"model": "m", "version": "1"}
    success = families["nv_inference_request_success"]
    assert success.kind == "counter"
    assert [(s.labels, s.value) for s in success.samples] == [(labels, 4)]
    failure = families["nv_inference_request_failure"]
    assert [s.labels["reason"] for s in failure.samples] == list(FAILURE_REASONS)
    assert list(failure.samples[0].labels) == ["model", "reason", "version"]  # Triton's order
    assert {s.labels["reason"]: s.value for s in failure.samples}["REJECTED"] == 2
    assert families["nv_inference_count"].samples[0].value == 10
    assert families["nv_inference_exec_count"].samples[0].value == 2
    assert families["nv_inference_request_duration_us"].samples[0].value == 9  # ns -> us
    assert families["nv_inference_queue_duration_us"].samples[0].value == 1
    pending = families["nv_inference_pending_request_count"]
    assert (pending.kind, pending.samples[0].value) == ("gauge", 1)
    assert families["nv_model_load_duration_secs"].samples[0].value == 0.5


def test_gpu_instances_are_labelled_with_their_device():
    (success, *_) = model_families(merge_versions([entry(gpu_uuid="GPU-1", success=1)]))
    assert list(success.samples[0].labels) == ["gpu_uuid", "model", "version"]


def test_counter_latencies_false_drops_the_duration_counters():
    names = by_name(model_families([entry()], LatencyOptions(counter_latencies=False)))
    assert "nv_inference_request_duration_us" not in names
    assert "nv_inference_compute_infer_duration_us" not in names
    assert "nv_inference_request_success" in names


def test_summary_latencies_add_quantiles_over_every_replicas_last_minute():
    from prometheus_client.parser import text_string_to_metric_families

    from deployments.metrics.exposition import render
    from deployments.observability.statistics import RequestOutcome, VersionStatistics
    from repo_adapter.inference_types import ComputeTimes

    replicas = [VersionStatistics("m", "1"), VersionStatistics("m", "1")]
    for number, statistics in enumerate(replicas):
        for request_us in range(100, 1100, 100):  # 10 requests per replica
            end_ns = 10_000_000_000
            arrival_ns = end_ns - (request_us + number * 1000) * 1000
            statistics.record_composed(
                arrival_ns,
                end_ns,
                ComputeTimes(0, 50_000, 0),
                [RequestOutcome(arrival_ns, 1, False)],
            )
    merged = merge_versions([s.metrics_entry() for s in replicas])
    options = LatencyOptions(summary_latencies=True, quantiles=(0.5, 0.99))
    text = render(model_families(merged, options))
    families = {f.name: f for f in text_string_to_metric_families(text)}
    request = families["nv_inference_request_summary_us"]
    assert request.type == "summary"
    samples = {(s.name, s.labels.get("quantile")): s.value for s in request.samples}
    assert samples[("nv_inference_request_summary_us_count", None)] == 20
    assert 1000 * 0.97 < samples[("nv_inference_request_summary_us", "0.5")] < 1100 * 1.03
    assert samples[("nv_inference_request_summary_us", "0.99")] > 1900  # the slower replica
    infer = {
        s.labels.get("quantile"): s.value
        for s in families["nv_inference_compute_infer_summary_us"].samples
    }
    assert abs(infer["0.5"] - 50) / 50 < 0.03
    assert "nv_inference_queue_summary_us" not in by_name(model_families(merged))  # off by default


def test_cached_versions_get_tritons_per_model_cache_counters_summed_over_replicas():
    cached = {"response_cache": True, "cache_hit_count": 2, "cache_hit_ns": 5_000}
    merged = merge_versions(
        [
            entry(**cached, cache_miss_count=1, cache_miss_ns=40_000),
            entry(**cached, cache_miss_count=0, cache_miss_ns=0),
            entry(model="plain"),
        ]
    )
    families = by_name(model_families(merged))
    hits = families["nv_cache_num_hits_per_model"].samples
    assert [(s.labels["model"], s.value) for s in hits] == [("m", 4)]
    assert families["nv_cache_hit_duration_per_model"].samples[0].value == 10  # us
    assert families["nv_cache_num_misses_per_model"].samples[0].value == 1
    assert families["nv_cache_miss_duration_per_model"].samples[0].value == 40
    names = list(families)
    assert names.index("nv_inference_compute_output_duration_us") + 1 == names.index(
        "nv_cache_num_hits_per_model"
    )
    assert "nv_cache_num_hits_per_model" not in by_name(model_families(merge_versions([entry()])))


def test_a_cached_models_summaries_count_hits_and_misses_and_only_executed_compute():
    cached = entry(
        success=7,
        compute_infer_ns=3_000_000,
        response_cache=True,
        cache_hit_count=4,
        cache_hit_ns=24_000,
        cache_miss_count=3,
        cache_miss_ns=89_000,
    )
    families = by_name(
        model_families(
            merge_versions([cached, entry(model="plain", success=2)]),
            LatencyOptions(summary_latencies=True),
        )
    )
    hits = {s.suffix: s.value for s in families["nv_cache_hit_summary_per_model"].samples}
    assert (hits["_count"], hits["_sum"]) == (4, 24)
    misses = families["nv_cache_miss_summary_per_model"].samples
    assert {s.labels["model"] for s in misses} == {"m"}  # an uncached model has none
    infer = {
        (s.labels["model"], s.suffix): s.value
        for s in families["nv_inference_compute_infer_summary_us"].samples
    }
    assert infer[("m", "_count")] == 3 and infer[("plain", "_count")] == 2


def test_a_shadow_versions_copies_get_raytons_families_after_tritons():
    shadow = {"shadow": True, "shadow_success": 3, "shadow_failure": 1, "shadow_ns": 9_000}
    merged = merge_versions(
        [
            entry(version="1"),
            entry(version="2"),  # a replica where the version got no copy yet
            entry(version="2", **shadow, shadow_dropped=2),
        ]
    )
    families = by_name(model_families(merged))
    success = families["rayton_shadow_request_success"].samples
    assert [(s.labels["version"], s.value) for s in success] == [("2", 3)]
    assert families["rayton_shadow_request_failure"].samples[0].value == 1
    assert families["rayton_shadow_request_duration_us"].samples[0].value == 9  # us
    assert families["rayton_shadow_request_dropped"].samples[0].value == 2
    names = list(families)
    assert names.index("nv_model_load_duration_secs") < names.index("rayton_shadow_request_success")
    assert "rayton_shadow_request_success" not in by_name(model_families(merge_versions([entry()])))
