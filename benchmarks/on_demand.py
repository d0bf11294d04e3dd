"""Models loaded on demand within a memory budget, measured: a repository larger than the
budget served to clients cycling through more models than fit.

``python -m benchmarks.on_demand [--models 200] [--cycled 60] [--fit 20] [--clients 8]
[--passes 2] [--burst 20] [--python-instances stub-process|in-replica]``

A generated repository of ``--models`` small models (python in stub processes and ONNX,
alternating), each declaring ``MEMORY_FOOTPRINT 10MB`` and answering ``IN + its number``.
``rayton serve --load-on-demand`` runs twice: with a budget that holds ``--fit`` models, then
one that holds all ``--cycled``. Each run, ``--clients`` closed-loop HTTP clients walk the
first ``--cycled`` models ``--passes`` times, each from its own starting model, sending
``--burst`` requests to a model before the next. Every answer is checked against the model's
number. A burst's first request may wait for a load ("cold"); the others are "warm".

Prints a Markdown table: requests, failures, wrong answers, loads and evictions from
``/metrics``, cold and warm latencies, and the warm p99 ratio of the two runs.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import tritonclient.http as httpclient

from tests.support.numbered_models import write_numbered_model
from tests.support.ports import free_port
from tests.support.processes import ServerProcess, rayton_serve_command, rayton_serve_env

FOOTPRINT_MB = 10


@dataclass
class RunOutcome:
    """One run's requests as the clients saw them."""

    warm_ms: list[float] = field(default_factory=list)
    cold_ms: list[float] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    wrong: int = 0
    seconds: float = 0.0


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q / 100 * len(ordered)))] if ordered else 0.0


def write_repository(root: Path, models: int) -> None:
    for number in range(models):
        kind = "python" if number % 2 == 0 else "onnx"
        write_numbered_model(root, f"model_{number:03d}", number, kind, f"{FOOTPRINT_MB}MB")


def cycle(url: str, cycled: int, clients: int, passes: int, burst: int) -> RunOutcome:
    outcome = RunOutcome()
    lock = threading.Lock()

    def client_loop(index: int) -> None:
        client = httpclient.InferenceServerClient(url, network_timeout=300)
        start = index * cycled // clients
        for step in range(passes * cycled):
            number = (start + step) % cycled
            model = f"model_{number:03d}"
            for request in range(burst):
                value = float(step * burst + request)
                tensor = httpclient.InferInput("IN", [1, 1], "FP32")
                tensor.set_data_from_numpy(np.full((1, 1), value, np.float32))
                began = time.perf_counter()
                try:
                    answer = client.infer(model, [tensor]).as_numpy("OUT")[0, 0]
                except Exception as err:
                    with lock:
                        outcome.failures.append(f"{model}: {err}")
                    continue
                elapsed_ms = (time.perf_counter() - began) * 1000
                with lock:
                    (outcome.cold_ms if request == 0 else outcome.warm_ms).append(elapsed_ms)
                    if answer != value + number:
                        outcome.wrong += 1

    threads = [threading.Thread(target=client_loop, args=(i,)) for i in range(clients)]
    began = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    outcome.seconds = time.monotonic() - began
    return outcome


def metric_total(metrics_url: str, family: str) -> float:
    with urllib.request.urlopen(metrics_url, timeout=30) as reply:
        text = reply.read().decode()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(family + "{") or line.startswith(family + " ")
    )


def run(root: Path, fit: int, args: argparse.Namespace) -> tuple[RunOutcome, float, float]:
    """One server with a budget of ``fit`` models: the clients' outcome, loads, evictions."""
    http_port, grpc_port, metrics_port = free_port(), free_port(), free_port()
    budget = f"{fit * FOOTPRINT_MB}MB"
    command = rayton_serve_command(
        root,
        http_port,
        grpc_port,
        "--load-on-demand",
        "true",
        "--memory-budget",
        budget,
        "--python-instances",
        args.python_instances,
    )
    command[command.index("--metrics-port") + 1] = str(metrics_port)
    server = ServerProcess(
        command, root.parent / f"serve-{fit}.log", rayton_serve_env(f"/tmp/rtod{os.getpid()}")
    )
    try:
        server.wait_http(f"http://127.0.0.1:{http_port}/v2/health/ready")
        url = f"127.0.0.1:{http_port}"
        outcome = cycle(url, args.cycled, args.clients, args.passes, args.burst)
        metrics_url = f"http://127.0.0.1:{metrics_port}/metrics"
        loads = metric_total(metrics_url, "rayton_model_loads_on_demand")
        evictions = metric_total(metrics_url, "rayton_model_evictions")
    finally:
        server.stop()
    return outcome, loads, evictions


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=int, default=200)
    parser.add_argument("--cycled", type=int, default=60)
    parser.add_argument("--fit", type=int, default=20)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--passes", type=int, default=2)
    parser.add_argument("--burst", type=int, default=20)
    parser.add_argument(
        "--python-instances", choices=("stub-process", "in-replica"), default="stub-process"
    )
    args = parser.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="rayton-on-demand-")) / "repository"
    write_repository(root, args.models)
    rows = [
        "| budget holds | requests | failed | wrong | loads | evictions | s | req/s "
        "| cold p50 ms | cold p99 ms | warm p50 ms | warm p99 ms |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    warm_p99 = {}
    for fit in (args.fit, args.cycled):
        outcome, loads, evictions = run(root, fit, args)
        requests = len(outcome.warm_ms) + len(outcome.cold_ms) + len(outcome.failures)
        warm_p99[fit] = percentile(outcome.warm_ms, 99)
        rows.append(
            f"| {fit} models | {requests} | {len(outcome.failures)} | {outcome.wrong} "
            f"| {loads:.0f} | {evictions:.0f} | {outcome.seconds:.0f} "
            f"| {requests / outcome.seconds:.0f} | {percentile(outcome.cold_ms, 50):.1f} "
            f"| {percentile(outcome.cold_ms, 99):.1f} | {percentile(outcome.warm_ms, 50):.2f} "
            f"| {warm_p99[fit]:.2f} |"
        )
        for failure in outcome.failures[:5]:
            rows.append(f"    failure: {failure}")
    ratio = warm_p99[args.fit] / warm_p99[args.cycled] if warm_p99[args.cycled] else 0.0
    rows.append(f"\nwarm p99, budget of {args.fit} / budget of {args.cycled}: {ratio:.2f}x")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
