"""Beyond Triton, measured: the version traffic split and replica recycling under load.

``python -m benchmarks.model_management [--split-requests 10000] [--recycle-every 30]
[--recycle-minutes 3] [--clients 8]``

One ``rayton serve`` of a generated repository (python models, stub processes):

* ``split``: versions 1-3 answering their version number; config ``VERSION_WEIGHTS 1:90,2:10``
  and a 10% shadow copy to version 3. ``--split-requests`` requests from ``--clients``
  clients: each version's share, that no client saw version 3, the shadow counters of
  ``/metrics``. Then the policy moves to 0/100 through the repository API while the clients
  send 3,000 more: their failures, and which versions answered after the move.
* ``recycled``: two replicas answering their process id, ``RECYCLE_AFTER_SECONDS``
  ``--recycle-every``; the clients send for ``--recycle-minutes``: failures, how many replica
  processes answered, latency p50 / p99 (ms).
* ``to_zero``: autoscaled with ``min_replicas: 0``: once ``/metrics`` shows it at zero
  replicas, one request (its latency: a replica starting), then the clients for 30 s (the
  replicas it reached, failures), then the time back to zero.

Prints Markdown tables.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

from tests.support.closed_loop import closed_loop
from tests.support.ports import free_port
from tests.support.processes import ServerProcess, rayton_serve_command, rayton_serve_env
from tests.support.versioned_models import write_pid_model, write_versioned_model

TO_ZERO = (
    '{"min_replicas": 0, "max_replicas": 2, "target_ongoing_requests": 2, "upscale_delay_s": 1,'
    ' "downscale_delay_s": 3, "downscale_to_zero_delay_s": 5, "look_back_period_s": 2,'
    ' "metrics_interval_s": 0.5}'
)
SPLIT = {"VERSION_WEIGHTS": "1:90,2:10", "SHADOW_VERSION": "3", "SHADOW_PERCENT": "10"}


def shadow_counters(metrics_url: str) -> dict[str, float]:
    with urllib.request.urlopen(metrics_url, timeout=30) as reply:
        lines = reply.read().decode().splitlines()
    return {
        line.split("{")[0]: float(line.rsplit(" ", 1)[1])
        for line in lines
        if line.startswith("rayton_shadow_request") and 'model="split"' in line
    }


def set_traffic(url: str, model: str, policy: dict) -> dict:
    request = urllib.request.Request(
        f"http://{url}/v2/repository/models/{model}/traffic",
        data=json.dumps(policy).encode(),
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=60) as reply:
        return json.loads(reply.read())


def measure_split(url: str, metrics_url: str, requests: int, clients: int) -> list[str]:
    outcome = closed_loop(url, "split", "VERSION", clients, total=requests)
    rows = [
        "| requests | version 1 | version 2 | version 3 seen by clients | errors |",
        "|---|---|---|---|---|",
        f"| {outcome.answered} | {outcome.answers[1] / outcome.answered:.2%} "
        f"| {outcome.answers[2] / outcome.answered:.2%} | {outcome.answers[3]} "
        f"| {len(outcome.errors)} |",
        "",
        f"shadow counters: {shadow_counters(metrics_url)}",
        "",
    ]
    during: dict = {}

    def load() -> None:
        during["outcome"] = closed_loop(url, "split", "VERSION", clients, total=3000)

    loader = threading.Thread(target=load)
    loader.start()
    applied = set_traffic(url, "split", {"weights": {"1": 0, "2": 100}})
    after = closed_loop(url, "split", "VERSION", clients, total=1000)
    loader.join()
    moved = during["outcome"]
    rows += [
        f"moved to {applied['weights']} under load: {moved.answered} answered "
        f"({dict(moved.answers)}), {len(moved.errors)} failed; after the move "
        f"{dict(after.answers)}, {len(after.errors)} failed",
        "",
    ]
    return rows


def measure_recycling(url: str, minutes: float, every: float, clients: int) -> list[str]:
    outcome = closed_loop(url, "recycled", "PID", clients, seconds=minutes * 60)
    return [
        "| recycle every (s) | minutes | requests | failed | replica processes | p50 (ms) "
        "| p99 (ms) |",
        "|---|---|---|---|---|---|---|",
        f"| {every:g} | {minutes:g} | {outcome.answered} | {len(outcome.errors)} "
        f"| {len(outcome.answers)} | {outcome.percentile_ms(50):.2f} "
        f"| {outcome.percentile_ms(99):.2f} |",
    ]


def replicas(metrics_url: str, model: str) -> int:
    with urllib.request.urlopen(metrics_url, timeout=30) as reply:
        for line in reply.read().decode().splitlines():
            if line.startswith(f'rayton_model_replicas{{model="{model}"}}'):
                return int(float(line.rsplit(" ", 1)[1]))
    return -1


def wait_replicas(metrics_url: str, model: str, count: int, timeout_s: float = 300) -> float:
    start = time.monotonic()
    while replicas(metrics_url, model) != count:
        if time.monotonic() - start > timeout_s:
            raise TimeoutError(f"{model} did not reach {count} replicas")
        time.sleep(0.5)
    return time.monotonic() - start


def measure_scale_to_zero(url: str, metrics_url: str, clients: int) -> list[str]:
    wait_replicas(metrics_url, "to_zero", 0)
    first = closed_loop(url, "to_zero", "PID", 1, total=1)
    most = 0
    outcome: dict = {}

    def load() -> None:
        outcome["load"] = closed_loop(url, "to_zero", "PID", clients, seconds=30)

    loader = threading.Thread(target=load)
    loader.start()
    while loader.is_alive():
        most = max(most, replicas(metrics_url, "to_zero"))
        time.sleep(0.5)
    down = wait_replicas(metrics_url, "to_zero", 0)
    loaded = outcome["load"]
    return [
        "",
        "| first request from zero (s) | requests in 30 s | failed | most replicas "
        "| back to zero after (s) |",
        "|---|---|---|---|---|",
        f"| {first.latencies_ms[0] / 1e3 if first.latencies_ms else float('nan'):.2f} "
        f"| {loaded.answered} | {len(loaded.errors) + len(first.errors)} | {most} "
        f"| {down:.1f} |",
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--split-requests", type=int, default=10_000)
    parser.add_argument("--recycle-every", type=float, default=30.0)
    parser.add_argument("--recycle-minutes", type=float, default=3.0)
    parser.add_argument("--clients", type=int, default=8)
    args = parser.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="rayton-model-management-")) / "repository"
    write_versioned_model(root, "split", parameters=SPLIT)
    write_pid_model(
        root, "recycled", {"RECYCLE_AFTER_SECONDS": f"{args.recycle_every:g}"}, replicas=2
    )
    write_pid_model(root, "to_zero", {"AUTOSCALING_CONFIG": TO_ZERO})
    http_port, grpc_port, metrics_port = free_port(), free_port(), free_port()
    command = rayton_serve_command(root, http_port, grpc_port)
    command[command.index("--metrics-port") + 1] = str(metrics_port)
    server = ServerProcess(
        command, root.parent / "serve.log", rayton_serve_env(f"/tmp/rtmm{os.getpid()}")
    )
    try:
        server.wait_http(f"http://127.0.0.1:{http_port}/v2/health/ready")
        url = f"127.0.0.1:{http_port}"
        metrics_url = f"http://127.0.0.1:{metrics_port}/metrics"
        rows = measure_split(url, metrics_url, args.split_requests, args.clients)
        rows += measure_scale_to_zero(url, metrics_url, args.clients)
        rows += measure_recycling(url, args.recycle_minutes, args.recycle_every, args.clients)
    finally:
        server.stop()
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
