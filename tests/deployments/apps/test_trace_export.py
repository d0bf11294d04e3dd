"""``--trace-config mode=opentelemetry`` on a live cluster: traced requests reach an OTLP/HTTP
collector as Triton's spans (an ensemble's step under the ensemble, in one trace)."""

from __future__ import annotations

import numpy as np
import pytest
import tritonclient.http as httpclient

from tests.deployments.apps.test_trace_control import ECHO, ECHO_CONFIG, PIPELINE_CONFIG
from tests.support.otlp_receiver import OtlpReceiver

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def served(serve_cluster, tmp_path_factory):
    root = tmp_path_factory.mktemp("otel") / "repository"
    (root / "echo" / "1").mkdir(parents=True)
    (root / "echo" / "config.pbtxt").write_text(ECHO_CONFIG)
    (root / "echo" / "1" / "model.py").write_text(ECHO)
    (root / "pipeline" / "1").mkdir(parents=True)
    (root / "pipeline" / "config.pbtxt").write_text(PIPELINE_CONFIG)
    with OtlpReceiver() as receiver:
        trace = {
            "trace_mode": "opentelemetry",
            "trace_otel_url": receiver.url,
            "trace_otel_resource": {"deployment.environment": "test"},
            "trace_level": ["TIMESTAMPS"],
            "trace_rate": 1,
        }
        serve_cluster.deploy_live(root, "none", trace=trace)
        yield serve_cluster.http_url, receiver
        serve_cluster.delete_all()


def test_an_ensemble_request_reaches_the_collector_as_one_trace(served):
    http_url, receiver = served
    with httpclient.InferenceServerClient(http_url) as client:
        settings = client.get_trace_settings()
        assert settings["trace_mode"] == "opentelemetry"
        assert settings["trace_level"] == ["TIMESTAMPS"]
        tensor = httpclient.InferInput("IN", [1, 2], "FP32")
        tensor.set_data_from_numpy(np.array([[1.0, 2.0]], np.float32))
        client.infer("pipeline", [tensor], request_id="shop-1")
    spans = receiver.wait_for(4)
    names = sorted(span.name for span in spans)
    assert names == ["InferRequest", "compute", "echo", "pipeline"], names
    by_name = {span.name: span for span in spans}
    assert len({span.trace_id for span in spans}) == 1
    assert by_name["pipeline"].parent_span_id == by_name["InferRequest"].span_id
    assert by_name["echo"].parent_span_id == by_name["pipeline"].span_id
    assert by_name["compute"].parent_span_id == by_name["echo"].span_id
    assert [e.name for e in by_name["InferRequest"].events][:2] == [
        "HTTP_RECV_START",
        "HTTP_RECV_END",
    ]
    attributes = {a.key: a.value.string_value for a in by_name["pipeline"].attributes}
    assert attributes["triton.request_id"] == "shop-1"
    assert receiver.resources[0]["deployment.environment"] == "test"
