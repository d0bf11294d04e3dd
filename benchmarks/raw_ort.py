"""The in-process limit: ONNX Runtime on one intra-op thread, no server."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import onnxruntime as ort

BATCH_SIZES = (1, 8, 32)


def measure(
    onnx_path: Path,
    input_dims: tuple[int, ...],
    seconds: float = 2.0,
    max_batch_size: int = max(BATCH_SIZES),
) -> dict:
    """Rows/s and per-call latency for each batch size up to ``max_batch_size`` (after a
    short warm-up)."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(str(onnx_path), options, providers=["CPUExecutionProvider"])
    results = {}
    for batch in (b for b in BATCH_SIZES if b <= max_batch_size):
        data = np.random.default_rng(0).random((batch, *input_dims), dtype=np.float32)
        for _ in range(5):
            session.run(None, {"INPUT0": data})
        latencies = []
        start = time.perf_counter()
        while time.perf_counter() - start < seconds:
            t0 = time.perf_counter_ns()
            session.run(None, {"INPUT0": data})
            latencies.append(time.perf_counter_ns() - t0)
        elapsed = time.perf_counter() - start
        results[batch] = {
            "rows_per_s": batch * len(latencies) / elapsed,
            "p50_us": float(np.percentile(latencies, 50)) / 1000,
        }
    return results
