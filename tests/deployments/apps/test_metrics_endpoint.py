"""Triton's ``/metrics`` on a live cluster: the families' deltas after a known mix of requests,
equal to the statistics extension's counts, summed over replicas and over the shared host."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
import yaml
from prometheus_client.parser import text_string_to_metric_families
from tritonclient.utils import InferenceServerException

from cluster.serve_internals import session_dir
from deployments.metrics.grafana import (
    RAY_DASHBOARD_PATH,
    RAY_NAMES,
    dashboard,
    ray_dashboard_folder,
    state_query,
)
from tests.support.live_models import write_chain
from tests.support.ports import free_port
from tests.support.processes import session_pids, start_session

pytestmark = pytest.mark.cluster

COUNTED_MODEL = """\
import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.family = pb_utils.MetricFamily(
            name="rayton_test_requests", description="requests seen",
            kind=pb_utils.MetricFamily.COUNTER,
        )
        self.seen = self.family.Metric(labels={"model": args["model_name"]})

    def execute(self, requests):
        responses = []
        for request in requests:
            self.seen.increment(1)
            value = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            if (value == 7).all():
                raise ValueError("seven raises")  # the whole execution fails: BACKEND
            if (value < 0).any():  # an error response: a success for Triton's counters
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError("neg")))
                continue
            if (value > 100).any():
                time.sleep(0.3)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", value + 1)]))
        return responses
"""

CONFIG = """\
backend: "python"
max_batch_size: {batch}
input [ {{ name: "IN" data_type: TYPE_FP32 dims: [ 1 ] }} ]
output [ {{ name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] }} ]
instance_group [ {{ kind: KIND_CPU count: {count} }} ]
{extra}
"""

QUEUE_TIMEOUT = (
    "dynamic_batching { max_queue_delay_microseconds: 0 default_queue_policy { "
    "timeout_action: REJECT default_timeout_microseconds: 50000 } }"
)


def write_counted(root: Path, name: str, batch: int, count: int = 1, extra: str = "") -> None:
    (root / name / "1").mkdir(parents=True)
    (root / name / "1" / "model.py").write_text(COUNTED_MODEL)
    (root / name / "config.pbtxt").write_text(CONFIG.format(batch=batch, count=count, extra=extra))


@pytest.fixture(scope="module")
def repository(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("metrics") / "repository"
    write_counted(root, "counted", 8, count=2, extra="dynamic_batching { }")
    write_counted(root, "unbatched", 0)
    write_counted(root, "queued", 1, extra=QUEUE_TIMEOUT)  # one request per execution
    write_chain(root, "chain", "counted", "counted")
    return root


def scrape(port: int) -> dict[tuple[str, tuple], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as response:
        assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        text = response.read().decode()
    samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            # The parser names counter samples <family>_total; Triton prints them without.
            name = family.name if family.type == "counter" else sample.name
            samples[name, tuple(sorted(sample.labels.items()))] = sample.value
    return samples


def value(samples, name: str, model: str, **labels) -> float:
    key = tuple(sorted({"model": model, "version": "1", **labels}.items()))
    return samples.get((name, key), 0.0)


def infer(url: str, model: str, value_: float):
    inputs = [httpclient.InferInput("IN", [1, 1], "FP32")]
    inputs[0].set_data_from_numpy(np.full((1, 1), value_, np.float32))
    if model == "unbatched":
        inputs = [httpclient.InferInput("IN", [1], "FP32")]
        inputs[0].set_data_from_numpy(np.full((1,), value_, np.float32))
    with httpclient.InferenceServerClient(url, network_timeout=60) as client:
        try:
            client.infer(model, inputs)
            return "ok"
        except InferenceServerException as err:
            return str(err)


def run_the_mix(url: str) -> dict[str, list[str]]:
    """Successes, an error response, a failing execution, queue timeouts, an ensemble."""
    outcomes: dict[str, list[str]] = {}
    outcomes["counted"] = [infer(url, "counted", 1.0) for _ in range(6)]
    outcomes["counted"] += [infer(url, "counted", -1.0), infer(url, "counted", 7.0)]
    outcomes["unbatched"] = [infer(url, "unbatched", 1.0) for _ in range(3)]
    outcomes["chain"] = [infer(url, "chain", 1.0) for _ in range(2)] + [infer(url, "chain", 6.0)]
    with ThreadPoolExecutor(max_workers=4) as pool:  # 300 ms each, 50 ms queue timeout
        outcomes["queued"] = list(pool.map(lambda _: infer(url, "queued", 200.0), range(4)))
    return outcomes


def check_deltas(before, after, stats, outcomes):
    def delta(name, model, **labels):
        return value(after, name, model, **labels) - value(before, name, model, **labels)

    assert "neg" in outcomes["counted"][6]
    assert "seven raises" in outcomes["counted"][7]
    assert "seven raises" in outcomes["chain"][2]  # 6 -> 7 at the first step; the second fails
    # 6 successes + 1 error response (a success for Triton) + 2 chain requests x 2 steps + the
    # failing chain's first step; failures: the 7 and the failing chain's second step.
    assert delta("nv_inference_request_success", "counted") == 6 + 1 + 4 + 1
    assert delta("nv_inference_request_failure", "counted", reason="BACKEND") == 2
    assert delta("nv_inference_request_success", "unbatched") == 3
    assert delta("nv_inference_count", "unbatched") == 3
    assert delta("nv_inference_exec_count", "unbatched") == 3
    assert delta("nv_inference_request_success", "chain") == 2
    assert delta("nv_inference_request_failure", "chain", reason="OTHER") == 1
    rejected = sum(1 for o in outcomes["queued"] if "timeout" in o.lower())
    assert rejected >= 1, outcomes["queued"]
    assert delta("nv_inference_request_failure", "queued", reason="REJECTED") == rejected
    assert delta("nv_inference_request_success", "queued") == 4 - rejected
    assert delta("nv_inference_request_duration_us", "unbatched") > 0
    assert delta("nv_inference_queue_duration_us", "counted") >= 0
    assert value(after, "nv_inference_pending_request_count", "counted") == 0
    assert value(after, "nv_model_load_duration_secs", "counted") > 0
    # The same numbers as the statistics extension, model by model.
    for entry in stats:
        model = entry["name"]
        failures = sum(
            value(after, "nv_inference_request_failure", model, reason=r)
            for r in ("REJECTED", "CANCELED", "BACKEND", "OTHER")
        )
        inference = entry["inference_stats"]
        assert (
            value(after, "nv_inference_request_success", model) == inference["success"]["count"]
        ), model
        assert failures == inference["fail"]["count"], model
        assert value(after, "nv_inference_count", model) == entry["inference_count"], model
        assert value(after, "nv_inference_exec_count", model) == entry["execution_count"], model
        assert value(after, "nv_inference_request_duration_us", model) == (
            inference["success"]["ns"] // 1000
        ), model


def scrape_settled(port: int, url: str) -> tuple[dict, list]:
    """A scrape and the statistics once no request is in flight (both read the same records)."""
    with httpclient.InferenceServerClient(url) as client:
        stats = client.get_inference_statistics()["model_stats"]
    return scrape(port), stats


@pytest.fixture(scope="class")
def dedicated(serve_cluster, repository):
    """The repository as a Serve config deploys it: every model its own replicas."""
    metrics_port = free_port()
    serve_cluster.deploy_repository(repository, metrics_port=metrics_port)
    yield metrics_port
    serve_cluster.delete_all()


class TestDedicatedReplicas:
    def test_replicas_are_summed_and_match_the_statistics(self, serve_cluster, dedicated):
        url, metrics_port = serve_cluster.http_url, dedicated
        before = scrape(metrics_port)
        outcomes = run_the_mix(url)
        after, stats = scrape_settled(metrics_port, url)
        check_deltas(before, after, stats, outcomes)
        # counted runs two replicas (instance count 2): both took requests and are summed.
        with httpclient.InferenceServerClient(url) as client:
            for _ in range(20):
                client.infer("counted", [_input(1.0)])
        summed = scrape(metrics_port)
        assert value(summed, "nv_inference_request_success", "counted") == (
            value(after, "nv_inference_request_success", "counted") + 20
        )
        custom = summed[("rayton_test_requests", (("model", "counted"),))]
        assert custom == value(summed, "nv_inference_request_success", "counted") + value(
            summed, "nv_inference_request_failure", "counted", reason="BACKEND"
        )
        assert 0.0 <= summed[("nv_cpu_utilization", ())] <= 1.0
        assert summed[("nv_cpu_memory_total_bytes", ())] > summed[("nv_cpu_memory_used_bytes", ())]
        # The same counters through Ray's metrics export (metrics agent of the node).
        expected = value(summed, "nv_inference_request_success", "counted")
        ray_port = serve_cluster.ray_metrics_port
        assert wait_until(lambda: ray_value(ray_port, "counted") == expected, 60), ray_value(
            ray_port, "counted"
        )
        # ... and the python model's own counter, both ways.
        assert wait_until(
            lambda: ray_value(ray_port, "counted", "ray_rayton_test_requests_total") == custom, 60
        )

    @pytest.mark.timeout(600)  # its own waits bound it (Ray's endpoint, scraped every 30 s)
    def test_a_real_prometheus_scrapes_both_endpoints(self, serve_cluster, dedicated, tmp_path):
        binary = shutil.which("prometheus")
        assert binary, "no prometheus binary: 'make setup' installs Debian's package as root"
        port = free_port()
        # Ray's endpoint carries every Serve series of the session's earlier tests: late in
        # the suite, 43,000 series (20 MB), which it took 12 s to render in Prometheus's
        # format on a busy 2-core machine.
        jobs = {"rayton": (dedicated, "1s"), "ray": (serve_cluster.ray_metrics_port, "30s")}
        config = {
            "scrape_configs": [
                {
                    "job_name": job,
                    "scrape_interval": interval,
                    "scrape_timeout": interval,
                    "static_configs": [{"targets": [f"127.0.0.1:{target}"]}],
                }
                for job, (target, interval) in jobs.items()
            ],
        }
        (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
        command = [binary, f"--config.file={tmp_path / 'prometheus.yml'}"]
        command += [f"--storage.tsdb.path={tmp_path / 'data'}", "--log.level=warn"]
        command += [f"--web.listen-address=127.0.0.1:{port}"]
        prometheus = start_session(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            series = 'nv_inference_request_success{job="rayton",model="unbatched",version="1"}'
            ray_series = 'ray_nv_inference_request_success_total{model="unbatched",version="1"}'
            assert wait_until(lambda: query(port, series) is not None, 60), "never scraped"
            start = query(port, series)
            for _ in range(5):
                assert infer(serve_cluster.http_url, "unbatched", 1.0) == "ok"
            assert wait_until(lambda: query(port, series) == start + 5, 30), query(port, series)
            # Ray's copy passes the mirror's interval, the worker's report to its node's
            # metrics agent and the 30 s scrape.
            assert wait_until(lambda: query(port, ray_series) == start + 5, 180), query(
                port, ray_series
            )
            # Every query of the shipped Grafana dashboard is valid PromQL over these series.
            for panel in dashboard()["panels"]:
                for target in panel["targets"]:
                    expr = target["expr"].replace("$model", ".*")
                    expr = expr.replace("$__rate_interval", "1m")
                    answer = query_api(port, expr)
                    assert answer["status"] == "success", (panel["title"], answer)
            requests_panel = dashboard()["panels"][0]["targets"][0]["expr"]
            assert query_api(
                port,
                requests_panel.replace("$model", "unbatched").replace("$__rate_interval", "1m"),
            )["data"]["result"], "the throughput panel shows no series"
            # The dashboard for Ray's Prometheus: valid over Ray's series, and it shows the
            # model's state and replicas (exported with the counters waited for above).
            for panel in dashboard(RAY_NAMES)["panels"]:
                for target in panel["targets"]:
                    expr = target["expr"].replace("$model", ".*")
                    answer = query_api(port, expr.replace("$__rate_interval", "2m"))
                    assert answer["status"] == "success", (panel["title"], answer)
            states = query_api(port, state_query(RAY_NAMES).replace("$model", "unbatched"))
            assert [r["metric"]["state"] for r in states["data"]["result"]] == ["READY"], states
            replicas = 'max by (model) (ray_rayton_model_replicas{model="unbatched"})'
            assert (query(port, replicas) or 0) >= 1, query_api(port, replicas)
            # ... installed beside Ray's own dashboards, where Ray's Grafana loads them.
            installed = ray_dashboard_folder(session_dir()) / "rayton_models_grafana_dashboard.json"
            assert installed.read_text() == RAY_DASHBOARD_PATH.read_text()
        finally:
            for pid in session_pids(prometheus.pid):
                os.kill(pid, signal.SIGKILL)
            prometheus.wait(10)


def query_api(port: int, promql: str) -> dict:
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as err:  # 400 with Prometheus's error for invalid PromQL
        return json.loads(err.read())


def query(port: int, promql: str) -> float | None:
    """The value of ``promql`` (one series) from Prometheus's HTTP query API, or None."""
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            result = json.loads(response.read())["data"]["result"]
    except OSError:
        return None
    return float(result[0]["value"][1]) if len(result) == 1 else None


def test_the_shared_host_is_scraped_too(serve_cluster, repository):
    metrics_port = free_port()
    serve_cluster.deploy_live(repository, "none", metrics_port=metrics_port)
    try:
        url = serve_cluster.http_url
        before = scrape(metrics_port)
        outcomes = run_the_mix(url)
        after, stats = scrape_settled(metrics_port, url)
        check_deltas(before, after, stats, outcomes)
    finally:
        serve_cluster.delete_all()


def test_a_port_in_use_fails_the_metrics_application(serve_cluster, repository):
    import socket

    from ray import serve
    from ray.serve.api import RunTarget

    from deployments.apps.builders import build_metrics_app

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        app = build_metrics_app({"metrics_port": port})
        with pytest.raises(RuntimeError, match="Deploying application rayton-metrics failed"):
            serve.run_many(
                [RunTarget(app, name="rayton-metrics", route_prefix=None)],
                wait_for_applications_running=True,
            )
        message = serve.status().applications["rayton-metrics"].deployments["metrics"].message
    serve_cluster.delete(["rayton-metrics"])
    assert f"failed to start the metrics service: 127.0.0.1:{port}: Address already in use" in (
        message
    )


def _input(value_: float):
    tensor = httpclient.InferInput("IN", [1, 1], "FP32")
    tensor.set_data_from_numpy(np.full((1, 1), value_, np.float32))
    return tensor


def ray_value(
    port: int, model: str, name: str = "ray_nv_inference_request_success_total"
) -> float | None:
    """Sample ``name`` of ``model`` (version 1 where it has versions), as Ray exports it."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as response:
        text = response.read().decode()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name != name or sample.labels.get("model") != model:
                continue
            if sample.labels.get("version", "1") == "1":
                return sample.value
    return None


def wait_until(predicate, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(1.0)
    return False
