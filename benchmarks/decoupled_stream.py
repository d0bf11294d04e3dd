"""A decoupled model's response throughput over gRPC streams, rayton against Triton.

``python -m benchmarks.decoupled_stream [--systems rayton,triton] [--responses 1000]
[--concurrency 8] [--seconds 10] [--windows 3]``

The model (``token_stream``, the python backend on both servers) answers a request for n
responses with n one-element responses sent from ``execute`` through the response sender, as
a token generator does, the last one with the final flag. Each of ``--concurrency`` workers
holds one ``ModelStreamInfer`` stream (``tritonclient.grpc.aio``) and sends one request at a
time, the next when the previous one's final response arrived; every response is checked to
come in order (its value is its index). Prints responses/s and requests/s per window and
their medians, as a Markdown table. Each system is started as :mod:`benchmarks.run` starts
it, one at a time.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import tritonclient.grpc.aio as grpc_aio
from tritonclient.grpc import InferInput

from benchmarks.run import start_system

MODEL = "token_stream"
CONFIG = f"""\
name: "{MODEL}"
backend: "python"
max_batch_size: 0
model_transaction_policy {{ decoupled: true }}
input [ {{ name: "COUNT" data_type: TYPE_INT32 dims: [ 1 ] }} ]
output [ {{ name: "TOKEN" data_type: TYPE_INT32 dims: [ 1 ] }} ]
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
"""
MODEL_PY = """\
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            count = int(pb_utils.get_input_tensor_by_name(request, "COUNT").as_numpy()[0])
            sender = request.get_response_sender()
            for index in range(count):
                token = pb_utils.Tensor("TOKEN", np.array([index], dtype=np.int32))
                last = index == count - 1
                flags = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL if last else 0
                sender.send(pb_utils.InferenceResponse([token]), flags=flags)
        return None
"""


def write_repository(root: Path) -> Path:
    (root / MODEL / "1").mkdir(parents=True)
    (root / MODEL / "config.pbtxt").write_text(CONFIG)
    (root / MODEL / "1" / "model.py").write_text(MODEL_PY)
    return root


class Counts:
    def __init__(self) -> None:
        self.responses = 0
        self.requests = 0


async def worker(url: str, responses: int, stop: asyncio.Event, counts: Counts) -> None:
    """One stream: a request at a time until ``stop``; every response checked in order."""
    count = InferInput("COUNT", [1], "INT32")
    count.set_data_from_numpy(np.array([responses], np.int32))
    answered = asyncio.Event()

    async def requests():
        while not stop.is_set():
            answered.clear()
            yield {"model_name": MODEL, "inputs": [count]}
            await answered.wait()

    expected = 0
    async with grpc_aio.InferenceServerClient(url) as client:
        async for result, error in client.stream_infer(requests()):
            if error is not None:
                raise RuntimeError(f"stream error: {error}")
            value = int(result.as_numpy("TOKEN")[0])
            if value != expected:
                raise RuntimeError(f"response {value} arrived where {expected} was due")
            expected += 1
            counts.responses += 1
            if result.get_response().parameters["triton_final_response"].bool_param:
                if expected != responses:
                    raise RuntimeError(f"{expected} responses, expected {responses}")
                counts.requests += 1
                expected = 0
                answered.set()


async def measure(url: str, responses: int, concurrency: int, seconds: float, windows: int):
    """Responses/s and requests/s in each window, after a warm-up window."""
    counts, stop = Counts(), asyncio.Event()
    workers = [
        asyncio.ensure_future(worker(url, responses, stop, counts)) for _ in range(concurrency)
    ]
    rates = []
    try:
        await asyncio.sleep(seconds / 2)  # warm-up
        for _ in range(windows):
            start, before = time.monotonic(), (counts.responses, counts.requests)
            await asyncio.sleep(seconds)
            elapsed = time.monotonic() - start
            rates.append(
                (
                    (counts.responses - before[0]) / elapsed,
                    (counts.requests - before[1]) / elapsed,
                )
            )
            for task in workers:
                if task.done():
                    task.result()  # a worker's failure ends the run
    finally:
        stop.set()
        await asyncio.wait(workers, timeout=30)
    return rates


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--systems", default="rayton,triton")
    parser.add_argument("--responses", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--windows", type=int, default=3)
    args = parser.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="rayton-decoupled-bench-"))
    repository = write_repository(root / "repository")
    logs = root / "logs"
    logs.mkdir()
    lines = [
        f"{args.responses} responses per request, {args.concurrency} streams",
        "",
        "| system | responses/s (windows) | median responses/s | median requests/s |",
        "|---|---|---|---|",
    ]
    for name in args.systems.split(","):
        system = start_system(name, {"rayton": repository, "reference": repository}, logs)
        try:
            rates = asyncio.run(
                measure(
                    system.grpc_url.removeprefix("grpc://"),
                    args.responses,
                    args.concurrency,
                    args.seconds,
                    args.windows,
                )
            )
        finally:
            system.stop()
        per_window = ", ".join(f"{r:,.0f}" for r, _ in rates)
        median = statistics.median(r for r, _ in rates)
        median_requests = statistics.median(q for _, q in rates)
        lines.append(f"| {name} | {per_window} | {median:,.0f} | {median_requests:,.1f} |")
        print(lines[-1], flush=True)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
