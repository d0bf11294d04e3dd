"""The baseline users write today: a minimal Ray Serve app with ``@serve.batch`` counting rows.

It speaks just enough of the KServe v2 protocol (metadata, config, binary infer) for the
same load generator to drive it. One application per model, like rayton, so routing costs
the same.
"""

from __future__ import annotations

import json

import numpy as np
import onnxruntime as ort
from ray import serve
from starlette.requests import Request
from starlette.responses import Response


@serve.deployment(max_ongoing_requests=128, ray_actor_options={"num_cpus": 0})
class HandwrittenModel:
    def __init__(
        self,
        name: str,
        onnx_path: str,
        input_dims: list[int],
        output_dims: list[int],
        max_batch_size: int = 32,
    ):
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        self.session = ort.InferenceSession(onnx_path, options, providers=["CPUExecutionProvider"])
        self.name = name
        self.metadata = {
            "name": name,
            "versions": ["1"],
            "platform": "onnxruntime_onnx",
            "inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [-1, *input_dims]}],
            "outputs": [{"name": "OUTPUT0", "datatype": "FP32", "shape": [-1, *output_dims]}],
        }
        self.config = {"name": name, "max_batch_size": max_batch_size, "dynamic_batching": {}}
        self.run.set_max_batch_size(max_batch_size)

    @serve.batch(
        max_batch_size=32,
        batch_wait_timeout_s=0.002,
        batch_size_fn=lambda xs: sum(x.shape[0] for x in xs),
    )
    async def run(self, batch: list[np.ndarray]) -> list[np.ndarray]:
        outputs = self.session.run(["OUTPUT0"], {"INPUT0": np.concatenate(batch)})[0]
        splits = np.cumsum([x.shape[0] for x in batch])[:-1]
        return np.split(outputs, splits)

    async def __call__(self, request: Request) -> Response:
        path = request.url.path
        if path.endswith("/config"):
            return Response(json.dumps(self.config), media_type="application/json")
        if not path.endswith("/infer"):
            return Response(json.dumps(self.metadata), media_type="application/json")
        body = await request.body()
        header_length = int(request.headers.get("inference-header-content-length", len(body)))
        header = json.loads(body[:header_length])
        spec = header["inputs"][0]
        data = np.frombuffer(body[header_length:], np.float32).reshape(spec["shape"])
        output = await self.run(data)
        payload = np.ascontiguousarray(output).tobytes()
        response_header = json.dumps(
            {
                "model_name": self.name,
                "model_version": "1",
                "outputs": [
                    {
                        "name": "OUTPUT0",
                        "datatype": "FP32",
                        "shape": list(output.shape),
                        "parameters": {"binary_data_size": len(payload)},
                    }
                ],
            }
        ).encode()
        return Response(
            response_header + payload,
            media_type="application/octet-stream",
            headers={"Inference-Header-Content-Length": str(len(response_header))},
        )


@serve.deployment(ray_actor_options={"num_cpus": 0})
class HandwrittenServer:
    """``GET /v2`` for the load generator (no statistics extension)."""

    async def __call__(self, request: Request) -> Response:
        body = {"name": "handwritten", "version": "0", "extensions": []}
        return Response(json.dumps(body), media_type="application/json")
