from prometheus_client.parser import text_string_to_metric_families

from deployments.metrics.exposition import Family, format_value, render


def test_render_is_what_prometheus_parses():
    success = Family("nv_inference_request_success", "counter", "Number of successful requests")
    success.add({"model": 'we"ird\\name\n', "version": "1"}, 3)
    pending = Family("nv_inference_pending_request_count", "gauge", "pending")
    pending.add({"model": "m", "version": "1"}, 0)
    empty = Family("nv_unused", "gauge", "no samples: not printed")
    text = render([success, pending, empty])
    assert "nv_unused" not in text
    assert 'nv_inference_request_success{model="we\\"ird\\\\name\\n",version="1"} 3\n' in text
    parsed = {f.name: f for f in text_string_to_metric_families(text)}
    (sample,) = parsed["nv_inference_request_success"].samples
    assert sample.labels == {"model": 'we"ird\\name\n', "version": "1"}
    assert sample.value == 3
    assert parsed["nv_inference_request_success"].type == "counter"
    assert parsed["nv_inference_pending_request_count"].type == "gauge"


def test_values_print_as_triton_prints_them():
    assert format_value(6) == "6"
    assert format_value(2.0) == "2"
    assert format_value(0.25) == "0.25"
    assert format_value(float("nan")) == "NaN"
    assert format_value(float("inf")) == "+Inf"
    assert render([]) == ""
