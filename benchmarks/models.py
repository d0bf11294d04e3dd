"""The benchmark model set, written as a rayton repository and as a reference-Triton repository.

Both serve the same ONNX files with the same batching config. The reference Triton bundled
in ``nvidia-pytriton`` has only the python backend, so there each model is a ``model.py``
that runs ONNX Runtime, as the measured starting point in the issue did.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from examples.builders import save_onnx_cnn, save_onnx_convnet, save_onnx_mlp

MAX_BATCH_SIZE = 32
QUEUE_DELAY_US = 2000
IMAGE_SHAPE = (480, 640, 3)  # what the python pipeline models take: a VGA RGB image, UINT8


@dataclass(frozen=True)
class BenchModel:
    """One benchmark model. ``kind``: ``onnx`` (rayton's ONNX Runtime backend; the reference
    Triton runs the same file in a python model), ``python`` (the same ``model.py`` on both
    servers) or ``native`` (the same C backend, ``benchmarks/native/<name>.c``, on both).
    ``classifier``: the ONNX model a python pipeline calls through BLS."""

    name: str
    input_dims: tuple[int, ...]
    output_dims: tuple[int, ...]
    max_batch_size: int = MAX_BATCH_SIZE
    kind: str = "onnx"
    input_type: str = "FP32"
    classifier: str | None = None

    def save_onnx(self, path: Path) -> Path:
        if self.name == "mlp":
            return save_onnx_mlp(path, (512, 2048, 2048, 1000))
        if self.name == "convnet":
            return save_onnx_convnet(path)
        if self.name == "copy_onnx":
            return save_onnx_identity(path, self.input_dims)
        return save_onnx_cnn(path, self.input_dims, self.output_dims[0])


MODELS = (
    BenchModel("mlp", (512,), (1000,)),
    # compute-bound: ~4 ms per row on one ONNX Runtime thread, where batching decides
    BenchModel("convnet", (3, 160, 160), (1000,), max_batch_size=8),
    # the small CNN the BLS pipeline calls
    BenchModel("cnn", (3, 64, 64), (10,)),
    BenchModel("preprocess", IMAGE_SHAPE, (3, 64, 64), 8, "python", "UINT8"),
    BenchModel("pipeline", IMAGE_SHAPE, (10,), 8, "python", "UINT8", classifier="cnn"),
    BenchModel("pipeline_async", IMAGE_SHAPE, (10,), 8, "python", "UINT8", classifier="cnn"),
    # a trivial python model, 4 floats in and out, no batching: the per-request path alone
    BenchModel("trivial", (4,), (4,), 0, "python"),
)
ONNX_MODELS = tuple(m for m in MODELS if m.kind == "onnx")
# The C-backend overhead pair, written only where asked for (``write_repositories``): a C
# backend that copies its input, and the same copy as an ONNX model (an Identity node).
OVERHEAD_MODELS = (
    BenchModel("copy_native", (512,), (512,), kind="native"),
    BenchModel("copy_onnx", (512,), (512,)),
)
NATIVE_SOURCES = Path(__file__).parent / "native"


def save_onnx_identity(path: Path, dims: tuple[int, ...]) -> Path:
    """OUTPUT0 = INPUT0, FP32 ``[batch, *dims]``."""
    import onnx
    from onnx import helper

    shape = ["batch", *dims]
    graph = helper.make_graph(
        [helper.make_node("Identity", ["INPUT0"], ["OUTPUT0"])],
        "identity",
        [helper.make_tensor_value_info("INPUT0", onnx.TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("OUTPUT0", onnx.TensorProto.FLOAT, shape)],
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def _config(model: BenchModel, backend: str) -> str:
    dims = lambda d: ", ".join(str(x) for x in d)  # noqa: E731
    output_type = "FP32"
    threads = ""
    if backend == "onnxruntime":
        threads = 'parameters { key: "intra_op_thread_count" value: { string_value: "1" } }\n'
    batching = (
        f"dynamic_batching {{ max_queue_delay_microseconds: {QUEUE_DELAY_US} }}\n"
        if model.max_batch_size
        else ""
    )
    return f"""name: "{model.name}"
backend: "{backend}"
max_batch_size: {model.max_batch_size}
input [ {{ name: "INPUT0" data_type: TYPE_{model.input_type} dims: [ {dims(model.input_dims)} ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_{output_type} dims: [ {dims(model.output_dims)} ] }} ]
{batching}instance_group [ {{ kind: KIND_CPU count: 1 }} ]
{threads}"""


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


# The python pipeline models, the same file on both servers. Pre-processing as an image
# classifier's: centre crop, downsample, scale to [0, 1], normalise, HWC -> CHW.
_PREPROCESS = """
_MEAN = np.array([0.485, 0.456, 0.406], np.float32).reshape(3, 1, 1)
_STD = np.array([0.229, 0.224, 0.225], np.float32).reshape(3, 1, 1)


def preprocess(images):
    \"\"\"[n, 480, 640, 3] UINT8 -> [n, 3, 64, 64] FP32.\"\"\"
    crop = images[:, 16:464, 96:544, :]  # the centre 448 x 448
    small = crop[:, ::7, ::7, :].astype(np.float32) / 255.0
    return (small.transpose(0, 3, 1, 2) - _MEAN) / _STD
"""


def preprocess_function():
    """The python models' ``preprocess`` as a function, from the very source their
    ``model.py`` runs (the hand-written baseline app calls it)."""
    import numpy as np

    namespace = {"np": np}
    exec(_PREPROCESS, namespace)
    return namespace["preprocess"]


def _python_model(docstring: str, handle_request: str) -> str:
    """A benchmark ``model.py``: ``handle_request`` turns ``images`` into ``response``."""
    body = "".join(f"            {line}\n" for line in handle_request.strip().splitlines())
    return (
        f'"""{docstring}"""\n\nimport numpy as np\nimport triton_python_backend_utils as pb_utils\n'
        + _PREPROCESS
        + "\n\nclass TritonPythonModel:\n"
        "    def execute(self, requests):\n"
        "        responses = []\n"
        "        for request in requests:\n"
        '            images = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()\n'
        + body
        + "            responses.append(response)\n"
        "        return responses\n"
    )


PREPROCESS_MODEL_PY = _python_model(
    "Image pre-processing in Triton's python backend (benchmark model).",
    """
tensor = pb_utils.Tensor("OUTPUT0", preprocess(images))
response = pb_utils.InferenceResponse(output_tensors=[tensor])
""",
)
PIPELINE_MODEL_PY = _python_model(
    "A BLS pipeline in Triton's python backend (benchmark model): pre-process the image,\n"
    "then classify it with the ONNX model `cnn` through a BLS call.",
    """
call = pb_utils.InferenceRequest(
    model_name="cnn",
    requested_output_names=["OUTPUT0"],
    inputs=[pb_utils.Tensor("INPUT0", preprocess(images))],
)
result = call.exec()
if result.has_error():
    raise pb_utils.TritonModelException(result.error().message())
scores = pb_utils.get_output_tensor_by_name(result, "OUTPUT0")
response = pb_utils.InferenceResponse(output_tensors=[scores])
""",
)
# The same pipeline written as Triton's docs suggest for throughput: ``async def execute``
# issues every request's BLS call with ``async_exec()`` before awaiting any, so the `cnn`
# batches an execution's calls together instead of one window per request.
PIPELINE_ASYNC_MODEL_PY = f'''"""An asynchronous BLS pipeline (benchmark model) in Triton's python
backend: pre-process each image, then classify them all with the ONNX `cnn` in concurrent
BLS calls."""

import asyncio

import numpy as np
import triton_python_backend_utils as pb_utils
{_PREPROCESS}

class TritonPythonModel:
    async def execute(self, requests):
        calls = []
        for request in requests:
            images = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            call = pb_utils.InferenceRequest(
                model_name="cnn",
                requested_output_names=["OUTPUT0"],
                inputs=[pb_utils.Tensor("INPUT0", preprocess(images))],
            )
            calls.append(call.async_exec())
        responses = []
        for result in await asyncio.gather(*calls):
            if result.has_error():
                raise pb_utils.TritonModelException(result.error().message())
            scores = pb_utils.get_output_tensor_by_name(result, "OUTPUT0")
            responses.append(pb_utils.InferenceResponse(output_tensors=[scores]))
        return responses
'''
TRIVIAL_MODEL_PY = '''"""A trivial python model (benchmark model): its input back, unbatched."""

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            values = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            tensor = pb_utils.Tensor("OUTPUT0", values)
            responses.append(pb_utils.InferenceResponse(output_tensors=[tensor]))
        return responses
'''
_PYTHON_MODELS = {
    "preprocess": PREPROCESS_MODEL_PY,
    "pipeline": PIPELINE_MODEL_PY,
    "pipeline_async": PIPELINE_ASYNC_MODEL_PY,
    "trivial": TRIVIAL_MODEL_PY,
}


def write_repositories(root: Path, models: tuple[BenchModel, ...] = MODELS) -> tuple[Path, Path]:
    """Write ``root/rayton`` and ``root/reference``; returns both repository paths."""
    rayton, reference = root / "rayton", root / "reference"
    for model in models:
        for repository in (rayton, reference):
            (repository / model.name / "1").mkdir(parents=True, exist_ok=True)
        if model.kind == "native":
            from repo_adapter.backends.native.build import build_backend, build_host

            build_host()
            library = build_backend(
                [NATIVE_SOURCES / "copy.c"], "copy", root / "native-build" / model.name
            )
            for repository in (rayton, reference):
                (repository / model.name / library.name).write_bytes(library.read_bytes())
                (repository / model.name / "config.pbtxt").write_text(_config(model, "copy"))
            continue
        if model.kind == "python":
            for repository in (rayton, reference):
                (repository / model.name / "1" / "model.py").write_text(_PYTHON_MODELS[model.name])
                (repository / model.name / "config.pbtxt").write_text(_config(model, "python"))
            continue
        onnx_path = model.save_onnx(rayton / model.name / "1" / "model.onnx")
        (rayton / model.name / "config.pbtxt").write_text(_config(model, "onnxruntime"))
        version = reference / model.name / "1"
        (version / "model.onnx").write_bytes(onnx_path.read_bytes())
        (version / "model.py").write_text(_REFERENCE_MODEL_PY)
        (reference / model.name / "config.pbtxt").write_text(_config(model, "python"))
    return rayton, reference
