"""What EXECUTION_ENV_PATH costs per request: the same python model with and without a packed
environment, at the backend layer (no Ray), interleaved rounds.

    python -m benchmarks.execution_env_cost [--requests 3000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
from pathlib import Path

import numpy as np

from repo_adapter.backends import InstanceSpec
from repo_adapter.backends.python import PythonBackend
from repo_adapter.inference_types import InferRequest, InferTensor
from repo_adapter.python_backend import execution_env
from repo_adapter.repository import scan_model
from tests.support.packed_env import PACKAGE, packed_venv

CONFIG = """\
backend: "python"
max_batch_size: 4
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] } ]
"""
PACKED = (
    'parameters { key: "EXECUTION_ENV_PATH" value: '
    '{ string_value: "$$TRITON_MODEL_DIRECTORY/env.tar.gz" } }\n'
)
MODEL = """\
import triton_python_backend_utils as pb_utils
{imports}

class TritonPythonModel:
    def execute(self, requests):
        return [
            pb_utils.InferenceResponse([pb_utils.Tensor(
                "OUT", {triple}(pb_utils.get_input_tensor_by_name(r, "IN").as_numpy())
            )])
            for r in requests
        ]
"""


def _backend(root: Path, name: str, packed: bool) -> PythonBackend:
    model = root / name
    (model / "1").mkdir(parents=True)
    (model / "config.pbtxt").write_text(CONFIG + (PACKED if packed else ""))
    imports, triple = (f"import {PACKAGE}", f"{PACKAGE}.triple") if packed else ("", "3 *")
    (model / "1" / "model.py").write_text(MODEL.format(imports=imports, triple=triple))
    if packed:
        packed_venv(model)
    scanned = scan_model(model)
    backend = PythonBackend(scanned.model_version(1), InstanceSpec.cpu(name))
    backend.load()
    return backend


async def _per_request_us(backend: PythonBackend, requests: int) -> float:
    request = InferRequest("m", [InferTensor("IN", "FP32", np.array([[2.0]], np.float32))])
    for _ in range(200):
        await backend.execute([request])
    start = time.perf_counter()
    for _ in range(requests):
        await backend.execute([request])
    return (time.perf_counter() - start) / requests * 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="rayton-env-cost-"))
    os.environ[execution_env.CACHE_ENV] = str(root / "cache")
    plain, packed = _backend(root, "plain", False), _backend(root, "packed", True)
    for index in range(args.rounds):
        a = asyncio.run(_per_request_us(plain, args.requests))
        b = asyncio.run(_per_request_us(packed, args.requests))
        print(f"round {index}: without {a:.1f} us/request, with a packed environment {b:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
