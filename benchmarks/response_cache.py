"""The response cache: what a hit costs the server, and whether memory stays flat while the
cache evicts.

``python -m benchmarks.response_cache [--hits 200] [--soak-minutes 5] [--clients 8]``

Hits: a python model whose execute sleeps 50 ms, ``response_cache { enable: true }``, two
instances (``--cpu-models dedicated``: two replicas on the node, sharing its cache), served
by ``rayton serve --cache-config local,size=64 MiB`` and by the reference tritonserver 2.51
with the same flag. One miss, then ``--hits`` repeated requests from one client; the server
time per hit is the statistics extension's ``success`` time over the hits (what Triton's
``nv_inference_request_duration_us`` counts), with the cache's own lookup time and the
client's p50 beside it.

Soak: a model answering 16 KiB per request without sleeping, ``--clients`` threads sending
only distinct inputs for ``--soak-minutes`` against a 16 MiB cache, so the cache fills and then
evicts on nearly every insert. Every 15 s it samples the resident memory of the node's cache
actor and of the model's replicas (``/proc`` of the server's session) and the cache gauges of
``/metrics``. Prints Markdown tables.
"""

from __future__ import annotations

import argparse
import os
import statistics as stats
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np
import tritonclient.http as httpclient

from tests.reference_triton import ReferenceTriton
from tests.support.ports import free_port
from tests.support.processes import (
    ServerProcess,
    rayton_serve_command,
    rayton_serve_env,
    session_pids,
)

HIT_MODEL = "slow_cached"
SOAK_MODEL = "wide_cached"
HIT_CACHE_BYTES = 64 << 20
SOAK_CACHE_BYTES = 16 << 20
SOAK_WIDTH = 4096  # FP32 elements per request and per output: 16 KiB
SAMPLE_S = 15.0

CONFIG = """\
name: "{name}"
backend: "python"
max_batch_size: 8
input [ {{ name: "IN" data_type: TYPE_FP32 dims: [ {width} ] }} ]
output [ {{ name: "OUT" data_type: TYPE_FP32 dims: [ {width} ] }} ]
dynamic_batching {{ max_queue_delay_microseconds: 1000 }}
instance_group [ {{ kind: KIND_CPU count: 2 }} ]
response_cache {{ enable: true }}
"""
MODEL_PY = """\
import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        time.sleep({sleep_s})
        return [
            pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy() * 2)]
            )
            for r in requests
        ]
"""


def write_repository(root: Path) -> Path:
    for name, width, sleep_s in ((HIT_MODEL, 4, 0.05), (SOAK_MODEL, SOAK_WIDTH, 0.0)):
        (root / name / "1").mkdir(parents=True)
        (root / name / "config.pbtxt").write_text(CONFIG.format(name=name, width=width))
        (root / name / "1" / "model.py").write_text(MODEL_PY.format(sleep_s=sleep_s))
    return root


def infer(client: httpclient.InferenceServerClient, model: str, data: np.ndarray) -> np.ndarray:
    tensor = httpclient.InferInput("IN", list(data.shape), "FP32")
    tensor.set_data_from_numpy(data)
    return client.infer(model, [tensor]).as_numpy("OUT")


def success(client: httpclient.InferenceServerClient) -> tuple[int, int, int, int]:
    """(requests, their ns, cache hits, the hits' lookup ns) of the hit model."""
    inference = client.get_inference_statistics(HIT_MODEL)["model_stats"][0]["inference_stats"]
    hit = inference["cache_hit"]
    return inference["success"]["count"], inference["success"]["ns"], hit["count"], hit["ns"]


def measure_hits(url: str, hits: int) -> dict[str, float]:
    """One miss, then ``hits`` repeated requests: the server's time per hit."""
    client = httpclient.InferenceServerClient(url)
    data = np.full((1, 4), 3.0, np.float32)
    infer(client, HIT_MODEL, data)  # the miss (50 ms)
    time.sleep(0.5)  # Triton counts a python model's request a moment after its response
    before = success(client)
    latencies = []
    for _ in range(hits):
        sent = time.perf_counter()
        out = infer(client, HIT_MODEL, data)
        latencies.append(time.perf_counter() - sent)
        if not np.array_equal(out, data * 2):
            raise RuntimeError("a hit answered a wrong output")
    after = success(client)
    counted = after[0] - before[0]
    if after[2] - before[2] != hits or counted != hits:
        raise RuntimeError(f"expected {hits} hits, the statistics counted {after[2] - before[2]}")
    return {
        "server_ms": (after[1] - before[1]) / counted / 1e6,
        "lookup_ms": (after[3] - before[3]) / counted / 1e6,
        "client_p50_ms": stats.median(latencies) * 1e3,
    }


def rss_mib(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def process_title(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode(errors="replace")
    except OSError:
        return ""


def cache_gauges(metrics_url: str) -> dict[str, float]:
    with urllib.request.urlopen(metrics_url, timeout=30) as reply:
        text = reply.read().decode()
    gauges = {}
    for line in text.splitlines():
        if line.startswith(("nv_cache_num_entries", "nv_cache_num_evictions", "nv_cache_util")):
            name, value = line.split()
            gauges[name] = float(value)
    return gauges


def soak(url: str, metrics_url: str, sid: int, minutes: float, clients: int) -> list[str]:
    """Distinct requests for ``minutes``; a row of memory and cache gauges every 15 s."""
    stop = threading.Event()
    sent = [0] * clients
    failures: list[str] = []

    def client_loop(index: int) -> None:
        client = httpclient.InferenceServerClient(url)
        base = np.arange(SOAK_WIDTH, dtype=np.float32)[None, :]
        while not stop.is_set():
            data = base + np.float32(index * 1e6 + sent[index])  # never the same input twice
            try:
                out = infer(client, SOAK_MODEL, data)
            except Exception as err:
                failures.append(str(err))
                return
            if not np.array_equal(out, data * 2):
                failures.append("wrong output")
                return
            sent[index] += 1

    threads = [threading.Thread(target=client_loop, args=(i,)) for i in range(clients)]
    for thread in threads:
        thread.start()
    rows = [
        "| minute | requests | cache actor RSS MiB | replicas' RSS MiB | entries | evictions "
        "| util |",
        "|---|---|---|---|---|---|---|",
    ]
    started = time.monotonic()
    try:
        while time.monotonic() - started < minutes * 60 and not failures:
            time.sleep(SAMPLE_S)
            pids = session_pids(sid)
            titles = {pid: process_title(pid) for pid in pids}
            actor = sum(rss_mib(p) for p, t in titles.items() if "ResponseCacheActor" in t)
            replicas = sum(rss_mib(p) for p, t in titles.items() if SOAK_MODEL in t)
            gauges = cache_gauges(metrics_url)
            rows.append(
                f"| {(time.monotonic() - started) / 60:.2f} | {sum(sent)} | {actor:.0f} "
                f"| {replicas:.0f} | {gauges.get('nv_cache_num_entries', 0):.0f} "
                f"| {gauges.get('nv_cache_num_evictions', 0):.0f} "
                f"| {gauges.get('nv_cache_util', 0):.3f} |"
            )
            print(rows[-1], flush=True)
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    if failures:
        raise RuntimeError(f"{len(failures)} requests failed: {failures[0]}")
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hits", type=int, default=200)
    parser.add_argument("--soak-minutes", type=float, default=5.0)
    parser.add_argument("--clients", type=int, default=8)
    args = parser.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="rayton-response-cache-"))
    repository = write_repository(root / "repository")
    results = {}
    reference = ReferenceTriton(
        repository, extra_args=[f"--cache-config=local,size={HIT_CACHE_BYTES}"]
    )
    reference.start()
    try:
        deadline = time.monotonic() + 60
        client = httpclient.InferenceServerClient(reference.http_url.removeprefix("http://"))
        while not client.is_model_ready(HIT_MODEL) and time.monotonic() < deadline:
            time.sleep(0.5)
        results["Triton 2.51"] = measure_hits(reference.http_url.removeprefix("http://"), args.hits)
    finally:
        reference.cleanup()
    for cache_bytes, label in ((HIT_CACHE_BYTES, "rayton"), (SOAK_CACHE_BYTES, "soak")):
        http_port, grpc_port, metrics_port = free_port(), free_port(), free_port()
        command = rayton_serve_command(repository, http_port, grpc_port)
        command[command.index("--metrics-port") + 1] = str(metrics_port)
        command += ["--cpu-models", "dedicated", "--cache-config", f"local,size={cache_bytes}"]
        server = ServerProcess(
            command, root / f"serve-{label}.log", rayton_serve_env(f"/tmp/rtrc{os.getpid()}")
        )
        try:
            server.wait_http(f"http://127.0.0.1:{http_port}/v2/health/ready")
            url = f"127.0.0.1:{http_port}"
            if label == "rayton":
                results["rayton"] = measure_hits(url, args.hits)
                continue
            metrics_url = f"http://127.0.0.1:{metrics_port}/metrics"
            rows = soak(url, metrics_url, server.process.pid, args.soak_minutes, args.clients)
        finally:
            server.stop()
    print("| server | server time per hit (ms) | cache lookup per hit (ms) | client p50 (ms) |")
    print("|---|---|---|---|")
    for name, figures in results.items():
        print(
            f"| {name} | {figures['server_ms']:.3f} | {figures['lookup_ms']:.3f} "
            f"| {figures['client_p50_ms']:.2f} |"
        )
    print()
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
