"""What the hop to a sequence's holder costs: HTTP sequence requests to a sequence model with
one replica (every request runs where it enters) and with several (HAProxy picks a replica
per request, so most are forwarded to the holder's port).

``python -m benchmarks.sequence_hops [--replicas 1,3] [--sequences 8] [--requests 300]``

The model is the tests' ``sequence_pair`` (the python backend, a running sum per sequence in
its instance's memory, ``oldest`` strategy with a 2 ms queue delay). Each of ``--sequences``
threads sends one sequence's requests over ``tritonclient.http``, one at a time, each checked
(its running sum). ``rayton serve`` runs with its defaults (HAProxy in front of the model's
replicas); set ``RAY_SERVE_ENABLE_HA_PROXY=0`` to measure Serve's proxy instead. Prints
requests/s and the p50/p99 latency per replica count, as a Markdown table.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import tritonclient.http as httpclient

from tests.support.ports import free_port
from tests.support.processes import ServerProcess, rayton_serve_command, rayton_serve_env
from tests.support.sequences import MODEL, write_sequence_model

# Lets HAProxy take every replica in before the first request
SETTLE_S = 5.0


def measure(url: str, sequences: int, requests: int) -> tuple[float, list[float]]:
    """(requests/s, latencies) of ``sequences`` threads each running one sequence."""
    latencies: list[float] = []
    failures: list[str] = []

    def one(index: int) -> None:
        client = httpclient.InferenceServerClient(url)
        tensor = httpclient.InferInput("IN", [1, 1], "INT32")
        tensor.set_data_from_numpy(np.array([[1]], np.int32))
        for step in range(requests):
            sent = time.perf_counter()
            result = client.infer(
                MODEL,
                [tensor],
                sequence_id=5000 + index,
                sequence_start=step == 0,
                sequence_end=step == requests - 1,
            )
            latencies.append(time.perf_counter() - sent)
            if int(result.as_numpy("SUM")[0, 0]) != step + 1:
                failures.append(f"sequence {5000 + index} step {step}: wrong sum")
                return

    threads = [threading.Thread(target=one, args=(i,)) for i in range(sequences)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        raise RuntimeError("; ".join(failures))
    return len(latencies) / (time.perf_counter() - started), sorted(latencies)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicas", default="1,3")
    parser.add_argument("--sequences", type=int, default=8)
    parser.add_argument("--requests", type=int, default=300)
    args = parser.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="rayton-sequence-hops-"))
    lines = ["| replicas | requests/s | p50 ms | p99 ms |", "|---|---|---|---|"]
    for replicas in (int(r) for r in args.replicas.split(",")):
        repository = root / f"repository-{replicas}"
        write_sequence_model(repository, replicas=replicas)
        http_port, grpc_port = free_port(), free_port()
        env = rayton_serve_env(f"/tmp/rtsh{os.getpid()}-{replicas}")  # short: socket paths
        server = ServerProcess(
            rayton_serve_command(repository, http_port, grpc_port),
            root / f"serve-{replicas}.log",
            env,
        )
        try:
            server.wait_http(f"http://127.0.0.1:{http_port}/v2/health/ready")
            time.sleep(SETTLE_S)
            rate, latencies = measure(f"127.0.0.1:{http_port}", args.sequences, args.requests)
        finally:
            server.stop()
        p50 = latencies[len(latencies) // 2] * 1e3
        p99 = latencies[int(len(latencies) * 0.99)] * 1e3
        lines.append(f"| {replicas} | {rate:.0f} | {p50:.2f} | {p99:.2f} |")
        print(lines[-1], flush=True)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
