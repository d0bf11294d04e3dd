"""The baseline users write today: a minimal Ray Serve app with ``@serve.batch`` counting rows.

It speaks just enough of the KServe v2 protocol (metadata, config, binary infer) for the
same load generator to drive it. One application per model, like rayton, so routing costs
the same. The python models are what a user would hand-write for the same job: the same
``preprocess`` function on each request of the batch, and for ``pipeline`` the classifier's
ONNX Runtime session in the same replica on the stacked batch (one execution, where the BLS
pipeline makes one ``cnn`` call per request), so this is Serve's floor for those models too.
"""

from __future__ import annotations

import json

import numpy as np
import onnxruntime as ort
from ray import serve
from starlette.requests import Request
from starlette.responses import Response

from benchmarks.models import preprocess_function

_NUMPY_TYPES = {"FP32": np.float32, "UINT8": np.uint8}


@serve.deployment(max_ongoing_requests=128, ray_actor_options={"num_cpus": 0})
class HandwrittenModel:
    def __init__(
        self,
        name: str,
        onnx_path: str | None,
        input_dims: list[int],
        output_dims: list[int],
        max_batch_size: int = 32,
        input_type: str = "FP32",
        preprocess: bool = False,
    ):
        """``onnx_path``: the model to run (None for pre-processing only); ``preprocess``:
        run the python models' pre-processing on each request first."""
        self.session = None
        if onnx_path is not None:
            options = ort.SessionOptions()
            options.intra_op_num_threads = 1
            options.inter_op_num_threads = 1
            self.session = ort.InferenceSession(
                onnx_path, options, providers=["CPUExecutionProvider"]
            )
        self.preprocess = preprocess_function() if preprocess else None
        self.name = name
        self.input_type = _NUMPY_TYPES[input_type]
        self.metadata = {
            "name": name,
            "versions": ["1"],
            "platform": "onnxruntime_onnx" if self.preprocess is None else "python",
            "inputs": [{"name": "INPUT0", "datatype": input_type, "shape": [-1, *input_dims]}],
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
        if self.preprocess is not None:
            # per request, as the python model does: stacking 900 KB images first would copy
            batch = [self.preprocess(x) for x in batch]
            if self.session is None:
                return batch
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
        data = np.frombuffer(body[header_length:], self.input_type).reshape(spec["shape"])
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
