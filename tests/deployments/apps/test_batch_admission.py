"""``--batch-admission`` on a live cluster: ``serve-batch`` admits a model's requests through
``@serve.batch`` (its batch series on Ray's metrics export, tagged
``rayton_batch_<model>_<version>``), ``direct`` (the default) straight into the batcher's
queue (no such series); both batch as Triton does."""

from __future__ import annotations

import urllib.request
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import tritonclient.http as httpclient

from tests.support.crashing_models import wait_until
from tests.support.live_models import write_adder

pytestmark = pytest.mark.cluster

BATCHES = "ray_serve_batches_processed_total"


def ray_series(port: int, name: str, function_name: str) -> float | None:
    """The value of ``name``'s series for ``function_name`` on Ray's export (None: none)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as response:
        page = response.read().decode()
    values = [
        float(line.rsplit(" ", 1)[1])
        for line in page.splitlines()
        if line.startswith(name + "{") and f'function_name="{function_name}"' in line
    ]
    return sum(values) if values else None


def infer_concurrently(url: str, model: str, count: int) -> list[float]:
    def one(value: float) -> float:
        with httpclient.InferenceServerClient(url) as client:
            tensor = httpclient.InferInput("IN", [1, 1], "FP32")
            tensor.set_data_from_numpy(np.array([[value]], np.float32))
            return float(client.infer(model, [tensor]).as_numpy("OUT")[0, 0])

    with ThreadPoolExecutor(count) as pool:
        return list(pool.map(one, [float(i) for i in range(count)]))


def batched_executions(url: str, model: str) -> dict[int, int]:
    with httpclient.InferenceServerClient(url) as client:
        (stats,) = client.get_inference_statistics(model)["model_stats"]
    return {int(b["batch_size"]): int(b["compute_infer"]["count"]) for b in stats["batch_stats"]}


@pytest.mark.parametrize("admission", ["serve-batch", "direct"])
def test_batch_admission(serve_cluster, tmp_path, admission):
    model = f"admitted_{admission.replace('-', '_')}"
    root = tmp_path / "repository"
    write_adder(root, model, offset=1.0, delay_us=200_000)  # a window 8 requests fill
    serve_cluster.deploy_live(root, "none", server_options={"batch_admission": admission})
    try:
        url = serve_cluster.http_url
        assert infer_concurrently(url, model, 8) == [i + 1.0 for i in range(8)]
        executions = batched_executions(url, model)
        assert max(executions) > 1, executions  # requests shared executions both ways
        function_name = f"rayton_batch_{model}_1"
        port = serve_cluster.ray_metrics_port
        if admission == "serve-batch":
            assert wait_until(lambda: (ray_series(port, BATCHES, function_name) or 0) >= 1, 60)
        else:
            # Ray reports every second here (the session's metrics_report_interval_ms)
            assert wait_until(lambda: ray_series(port, BATCHES, function_name), 5) is None
    finally:
        serve_cluster.delete_all()
