"""The in-process cost of rayton's batching path, without Ray: a DynamicBatcher over a real
ONNX Runtime ``mlp`` instance, driven by concurrent 1-row submitters on one event loop.

``python -m benchmarks.batcher_path [--seconds 8] [--clients 16]`` prints requests per second
and the process's CPU time per request: what the batcher, the scheduler and the backend cost
per request, apart from HTTP, gRPC and Serve (BENCHMARKS.md, "The structure change").
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

import numpy as np

from deployments.core.batching import BatchPolicy, DynamicBatcher
from deployments.observability.statistics import VersionStatistics
from tests.repo_adapter.backends.test_onnxruntime import loaded, make_model, mlp, request


async def measure(seconds: float, clients: int) -> tuple[float, float]:
    """(requests per second, CPU microseconds per request)."""
    backend = loaded(make_model(Path(tempfile.mkdtemp(prefix="rayton-batcher-")), "mlp", mlp))
    policy = BatchPolicy.from_config(backend.config)
    batcher = DynamicBatcher("mlp_1", policy, [backend], VersionStatistics("mlp", "1"))
    answered = 0
    stop = time.monotonic() + seconds

    async def client() -> None:
        nonlocal answered
        while time.monotonic() < stop:
            await batcher.submit(request(INPUT0=("FP32", np.ones((1, 8), np.float32))), 1)
            answered += 1

    cpu_start, wall_start = time.process_time(), time.monotonic()
    await asyncio.gather(*(client() for _ in range(clients)))
    cpu, wall = time.process_time() - cpu_start, time.monotonic() - wall_start
    await batcher.close()
    backend.unload()
    return answered / wall, cpu / answered * 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--clients", type=int, default=16)
    args = parser.parse_args(argv)
    rate, cpu_us = asyncio.run(measure(args.seconds, args.clients))
    print(f"{rate:.0f} requests/s, {cpu_us:.1f} µs CPU per request ({args.clients} clients)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
