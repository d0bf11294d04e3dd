"""The benchmark model set, written as a rayton repository and as a reference-Triton repository.

Both serve the same ONNX files with the same batching config. The reference Triton bundled
in ``nvidia-pytriton`` has only the python backend, so there each model is a ``model.py``
that runs ONNX Runtime, as the measured starting point in the issue did.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from examples.builders import save_onnx_cnn, save_onnx_mlp

MAX_BATCH_SIZE = 32
QUEUE_DELAY_US = 2000


@dataclass(frozen=True)
class BenchModel:
    name: str
    input_dims: tuple[int, ...]
    output_dims: tuple[int, ...]

    def save_onnx(self, path: Path) -> Path:
        if self.name == "mlp":
            return save_onnx_mlp(path, (512, 2048, 2048, 1000))
        return save_onnx_cnn(path, self.input_dims, self.output_dims[0])


MODELS = (
    BenchModel("mlp", (512,), (1000,)),
    BenchModel("cnn", (3, 64, 64), (10,)),
)


def _config(model: BenchModel, backend: str) -> str:
    dims = lambda d: ", ".join(str(x) for x in d)  # noqa: E731
    return f"""name: "{model.name}"
backend: "{backend}"
max_batch_size: {MAX_BATCH_SIZE}
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ {dims(model.input_dims)} ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ {dims(model.output_dims)} ] }} ]
dynamic_batching {{ max_queue_delay_microseconds: {QUEUE_DELAY_US} }}
instance_group [ {{ kind: KIND_CPU count: 1 }} ]
parameters {{ key: "intra_op_thread_count" value: {{ string_value: "1" }} }}
"""


_REFERENCE_MODEL_PY = '''"""ONNX Runtime inside Triton's python backend."""

import os

import numpy as np
import onnxruntime as ort
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        path = os.path.join(args["model_repository"], args["model_version"], "model.onnx")
        self.session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])

    def execute(self, requests):
        inputs = [pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy() for r in requests]
        rows = [x.shape[0] for x in inputs]
        outputs = self.session.run(["OUTPUT0"], {"INPUT0": np.concatenate(inputs)})[0]
        responses, start = [], 0
        for n in rows:
            tensor = pb_utils.Tensor("OUTPUT0", outputs[start : start + n])
            responses.append(pb_utils.InferenceResponse(output_tensors=[tensor]))
            start += n
        return responses
'''


def write_repositories(root: Path) -> tuple[Path, Path]:
    """Write ``root/rayton`` and ``root/reference``; returns both repository paths."""
    rayton, reference = root / "rayton", root / "reference"
    for model in MODELS:
        onnx_path = model.save_onnx(rayton / model.name / "1" / "model.onnx")
        (rayton / model.name / "config.pbtxt").write_text(_config(model, "onnxruntime"))
        version = reference / model.name / "1"
        version.mkdir(parents=True, exist_ok=True)
        (version / "model.onnx").write_bytes(onnx_path.read_bytes())
        (version / "model.py").write_text(_REFERENCE_MODEL_PY)
        (reference / model.name / "config.pbtxt").write_text(_config(model, "python"))
    return rayton, reference
