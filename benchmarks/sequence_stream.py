"""The article's video-stream shape on a stateful model: per-frame latency, rayton against
Triton.

``python -m benchmarks.sequence_stream [--systems rayton,triton] [--frames 300] [--runs 3]``

One ``tritonclient.grpc`` stream (``start_stream`` / ``async_stream_infer``) sends the frames
of one sequence to ``sequence_sum`` (``tests/deployments/model_repository``: a python model
keeping each sequence's running sum, the sequence batcher's control inputs added), one frame
after the previous result came back, as a client following a video does; every result is
checked (its running sum, in order). Prints the p50 and p90 latency per frame of each run, as
a Markdown table. Each system is started as :mod:`benchmarks.run` starts it, one at a time.
"""

from __future__ import annotations

import argparse
import queue
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import tritonclient.grpc as grpcclient

from benchmarks.run import start_system

MODEL = "sequence_sum"
SOURCE = Path(__file__).parents[1] / "tests" / "deployments" / "model_repository" / MODEL


def one_stream(url: str, frames: int, sequence_id: int) -> list[float]:
    """Latency of each frame (seconds), the results checked."""
    results: queue.Queue = queue.Queue()
    latencies = []
    frame = grpcclient.InferInput("IN", [1, 1], "INT32")
    with grpcclient.InferenceServerClient(url) as client:
        client.start_stream(callback=lambda result, error: results.put((result, error)))
        try:
            for index in range(frames):
                frame.set_data_from_numpy(np.array([[index]], np.int32))
                sent = time.perf_counter()
                client.async_stream_infer(
                    MODEL,
                    [frame],
                    sequence_id=sequence_id,
                    sequence_start=index == 0,
                    sequence_end=index == frames - 1,
                )
                result, error = results.get(timeout=60)
                latencies.append(time.perf_counter() - sent)
                if error is not None:
                    raise RuntimeError(f"frame {index}: {error}")
                total = int(result.as_numpy("SUM")[0, 0])
                if total != index * (index + 1) // 2:
                    raise RuntimeError(f"frame {index}: running sum {total}")
        finally:
            client.stop_stream()
    return latencies


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--systems", default="rayton,triton")
    parser.add_argument("--frames", type=int, default=300)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="rayton-sequence-bench-"))
    shutil.copytree(SOURCE, root / "repository" / MODEL)
    repository = root / "repository"
    (root / "logs").mkdir()
    lines = [
        f"{args.frames} frames per stream, one frame in flight",
        "",
        "| system | run | p50 ms per frame | p90 ms per frame |",
        "|---|---|---|---|",
    ]
    for name in args.systems.split(","):
        system = start_system(name, {"rayton": repository, "reference": repository}, root / "logs")
        try:
            url = system.grpc_url.removeprefix("grpc://")
            one_stream(url, 50, sequence_id=1)  # warm-up
            for run in range(1, args.runs + 1):
                latencies = sorted(one_stream(url, args.frames, sequence_id=100 + run))
                p50 = statistics.median(latencies) * 1000
                p90 = latencies[int(0.9 * len(latencies))] * 1000
                lines.append(f"| {name} | {run} | {p50:.2f} | {p90:.2f} |")
                print(lines[-1], flush=True)
        finally:
            system.stop()
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
