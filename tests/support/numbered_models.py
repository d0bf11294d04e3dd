"""A zoo of small models, each adding its own number to its input, so every answer says which
model gave it: what the on-demand loading tests and benchmark serve (python and ONNX mixed).

``IN`` FP32 ``[1]`` -> ``OUT`` FP32 ``[1]`` = ``IN + number``. The python models sleep
``slow_s`` on a negative input (a request kept in flight on purpose)."""

from __future__ import annotations

from pathlib import Path

PYTHON_MODEL = """
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            data = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            if (data < 0).any():
                time.sleep({SLOW_S})
            out = (data + {NUMBER}).astype(np.float32)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", out)]))
        return responses
"""

CONFIG = """
name: "{NAME}"
{RUNTIME}
max_batch_size: 8
dynamic_batching {{ }}
input [ {{ name: "IN" data_type: TYPE_FP32 dims: [ 1 ] }} ]
output [ {{ name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] }} ]
instance_group [ {{ kind: {KIND} count: 1 }} ]
{PARAMETERS}
"""


def write_numbered_model(
    root: Path,
    name: str,
    number: int,
    kind: str = "python",
    footprint: str | None = None,
    slow_s: float = 0.0,
    gpu_footprint: str | None = None,
) -> Path:
    """``root/name`` (version 1): a ``kind`` ("python" or "onnx") model answering
    ``IN + number``; ``footprint`` its declared MEMORY_FOOTPRINT (None: measured);
    ``gpu_footprint`` makes it a GPU model (one KIND_GPU instance) declaring that
    GPU_MEMORY_FOOTPRINT."""
    model_dir = root / name
    (model_dir / "1").mkdir(parents=True)
    declared = {"MEMORY_FOOTPRINT": footprint, "GPU_MEMORY_FOOTPRINT": gpu_footprint}
    parameters = "\n".join(
        f'parameters {{ key: "{key}" value: {{ string_value: "{value}" }} }}'
        for key, value in declared.items()
        if value
    )
    runtime = 'backend: "python"' if kind == "python" else 'platform: "onnxruntime_onnx"'
    group = "KIND_GPU" if gpu_footprint else "KIND_CPU"
    (model_dir / "config.pbtxt").write_text(
        CONFIG.format(NAME=name, RUNTIME=runtime, PARAMETERS=parameters, KIND=group)
    )
    if kind == "python":
        source = PYTHON_MODEL.replace("{SLOW_S}", repr(slow_s)).replace("{NUMBER}", str(number))
        (model_dir / "1" / "model.py").write_text(source)
    else:
        _save_onnx_add(model_dir / "1" / "model.onnx", float(number))
    return model_dir


def _save_onnx_add(path: Path, number: float) -> None:
    import numpy as np
    import onnx
    from onnx import helper, numpy_helper

    graph = helper.make_graph(
        [helper.make_node("Add", ["IN", "number"], ["OUT"])],
        "add_number",
        [helper.make_tensor_value_info("IN", onnx.TensorProto.FLOAT, ["batch", 1])],
        [helper.make_tensor_value_info("OUT", onnx.TensorProto.FLOAT, ["batch", 1])],
        [numpy_helper.from_array(np.array([number], np.float32), "number")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
