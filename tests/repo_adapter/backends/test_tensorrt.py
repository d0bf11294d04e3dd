"""TensorRT backend: UNAVAILABLE without runtime/GPU everywhere; real engines on GPU machines."""

from __future__ import annotations

import importlib.util
import sys
from types import SimpleNamespace

import numpy as np
import onnxruntime as ort
import pytest

from examples.builders import save_onnx_mlp
from repo_adapter.backends import backend_class
from repo_adapter.backends.base import InstanceSpec
from repo_adapter.backends.tensorrt import TensorRTBackend
from repo_adapter.errors import InferenceServerError, StatusCode
from repo_adapter.inference_types import InferRequest, InferTensor
from repo_adapter.repository import scan_repository

MLP_SIZES = (8, 16, 4)
CONFIG = """backend: "tensorrt"
max_batch_size: 8
input [{ name: "INPUT0" data_type: TYPE_FP32 dims: [8] }]
output [{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [4] }]
"""


def _no_trt_gpu_reason() -> str | None:
    if importlib.util.find_spec("tensorrt") is None:
        return "TensorRT runtime not installed"
    import torch

    return None if torch.cuda.is_available() else "no CUDA GPU available"


NO_TRT_GPU = _no_trt_gpu_reason()


def needs_trt_gpu(test):
    """Mark ``test`` as a GPU test and skip it, saying why, without TensorRT or a GPU."""
    skip = pytest.mark.skipif(NO_TRT_GPU is not None, reason=f"needs TensorRT + GPU: {NO_TRT_GPU}")
    return pytest.mark.gpu(skip(test))


def write_model(repo, plan: bytes, config_text: str | None = CONFIG, name="trt"):
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "1" / "model.plan").write_bytes(plan)
    if config_text is not None:
        (repo / name / "config.pbtxt").write_text(config_text)
    scanned = scan_repository(repo, gpu_ids=[0], names=[name])[name]
    assert scanned.available, scanned.error
    return scanned


def backend_for(scanned, kind="GPU") -> TensorRTBackend:
    model = scanned.model_version(scanned.versions[-1])
    return TensorRTBackend(model, InstanceSpec(f"{scanned.name}_0", kind, 0))


def test_registry_resolves_tensorrt():
    assert backend_class("tensorrt") is TensorRTBackend


def test_load_is_unavailable_with_a_clear_reason(tmp_path):
    """Runs everywhere: no runtime/GPU here, or (on GPU machines) a file that is no plan."""
    backend = backend_for(write_model(tmp_path, b"not a serialized engine"))
    with pytest.raises(InferenceServerError) as info:
        backend.load()
    assert info.value.code == StatusCode.UNAVAILABLE
    if NO_TRT_GPU == "TensorRT runtime not installed":
        assert "TensorRT runtime not installed" in info.value.message
    elif NO_TRT_GPU is not None:
        assert "no CUDA GPU available for TensorRT model 'trt'" in info.value.message
    else:
        assert "unable to deserialize TensorRT engine" in info.value.message


def test_auto_complete_without_runtime_leaves_config_unchanged(tmp_path):
    if NO_TRT_GPU is None:
        pytest.skip("TensorRT and a GPU are present: auto-complete reads the engine")
    scanned = write_model(tmp_path, b"plan", config_text=None)
    assert scanned.config.backend == "tensorrt"
    assert scanned.config.max_batch_size == 0
    assert not scanned.config.input and not scanned.config.output
    assert not scanned.config.HasField("dynamic_batching")


def build_plan(onnx_path, max_batch: int = 8) -> bytes:
    import tensorrt as trt

    logger = trt.Logger(trt.Logger.WARNING)
    builder = trt.Builder(logger)
    network = builder.create_network(0)
    parser = trt.OnnxParser(network, logger)
    assert parser.parse(onnx_path.read_bytes()), parser.get_error(0)
    config = builder.create_builder_config()
    profile = builder.create_optimization_profile()
    width = MLP_SIZES[0]
    profile.set_shape("INPUT0", (1, width), (max_batch // 2, width), (max_batch, width))
    config.add_optimization_profile(profile)
    return bytes(builder.build_serialized_network(network, config))


@pytest.fixture
def mlp_onnx(tmp_path):
    return save_onnx_mlp(tmp_path / "mlp.onnx", MLP_SIZES)


@needs_trt_gpu
def test_auto_complete_from_engine(tmp_path, mlp_onnx):
    scanned = write_model(tmp_path / "repo", build_plan(mlp_onnx), config_text=None)
    config = scanned.config
    assert config.max_batch_size == 8
    assert list(config.dynamic_batching.preferred_batch_size) == [8]
    assert [(t.name, list(t.dims)) for t in config.input] == [("INPUT0", [8])]
    assert [(t.name, list(t.dims)) for t in config.output] == [("OUTPUT0", [4])]


@needs_trt_gpu
async def test_batch_matches_onnxruntime_and_is_split_back(tmp_path, mlp_onnx):
    backend = backend_for(write_model(tmp_path / "repo", build_plan(mlp_onnx)))
    backend.load()
    session = ort.InferenceSession(str(mlp_onnx))
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal((rows, 8)).astype(np.float32) for rows in (1, 3, 2)]
    requests = [
        InferRequest(model_name="trt", inputs=[InferTensor("INPUT0", "FP32", a)], id=f"r{i}")
        for i, a in enumerate(arrays)
    ]
    responses = await backend.execute(requests)
    assert [r.id for r in responses] == ["r0", "r1", "r2"]
    for array, response in zip(arrays, responses, strict=True):
        output = response.output("OUTPUT0")
        assert output.shape == (array.shape[0], 4) and output.data.dtype == np.float32
        expected = session.run(["OUTPUT0"], {"INPUT0": array})[0]
        np.testing.assert_allclose(output.data, expected, rtol=1e-2, atol=1e-2)  # TF32 kernels
    backend.unload()


@needs_trt_gpu
def test_cpu_instance_is_rejected(tmp_path, mlp_onnx):
    backend = backend_for(write_model(tmp_path / "repo", build_plan(mlp_onnx)), kind="CPU")
    with pytest.raises(InferenceServerError, match="needs KIND_GPU instances") as info:
        backend.load()
    assert info.value.code == StatusCode.UNAVAILABLE


class FakeEngine:
    """The slice of ``tensorrt.ICudaEngine`` auto-complete reads: INPUT0 [-1, 8] -> OUTPUT0."""

    num_optimization_profiles = 1
    tensors = {  # name -> (mode, dtype, shape)
        "INPUT0": ("INPUT", "FLOAT", [-1, 8]),
        "OUTPUT0": ("OUTPUT", "FLOAT", [-1, 4]),
    }
    num_io_tensors = len(tensors)

    def get_tensor_name(self, index):
        return list(self.tensors)[index]

    def get_tensor_mode(self, name):
        return self.tensors[name][0]

    def get_tensor_dtype(self, name):
        return SimpleNamespace(name=self.tensors[name][1])

    def get_tensor_shape(self, name):
        return self.tensors[name][2]

    def is_shape_inference_io(self, name):
        return False

    def get_tensor_profile_shape(self, name, profile):
        return [[1, 8], [4, 8], [16, 8]]


@pytest.fixture
def fake_tensorrt(monkeypatch):
    """A stand-in ``tensorrt`` module and a 'visible' GPU, to exercise auto-complete anywhere."""
    import torch

    class Logger:
        WARNING = 2

        def __init__(self, severity):
            self.severity = severity

    fake = SimpleNamespace(
        Logger=Logger,
        init_libnvinfer_plugins=lambda logger, namespace: True,
        Runtime=lambda logger: SimpleNamespace(deserialize_cuda_engine=lambda data: FakeEngine()),
        TensorIOMode=SimpleNamespace(INPUT="INPUT"),
    )
    monkeypatch.setitem(sys.modules, "tensorrt", fake)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    return fake


@pytest.mark.usefixtures("fake_tensorrt")
def test_auto_complete_reads_io_and_max_batch_from_the_engine(tmp_path):
    scanned = write_model(tmp_path, b"plan", config_text=None)
    config = scanned.config
    assert config.max_batch_size == 16  # the profile's largest batch
    assert list(config.dynamic_batching.preferred_batch_size) == [16]
    assert [(t.name, list(t.dims)) for t in config.input] == [("INPUT0", [8])]
    assert [(t.name, list(t.dims)) for t in config.output] == [("OUTPUT0", [4])]


@pytest.mark.usefixtures("fake_tensorrt")
def test_auto_complete_rejects_a_larger_max_batch_size(tmp_path):
    (tmp_path / "trt" / "1").mkdir(parents=True)
    (tmp_path / "trt" / "1" / "model.plan").write_bytes(b"plan")
    (tmp_path / "trt" / "config.pbtxt").write_text('backend: "tensorrt"\nmax_batch_size: 32')
    scanned = scan_repository(tmp_path)["trt"]
    assert "configuration specified max-batch 32 but TensorRT engine only supports" in scanned.error
