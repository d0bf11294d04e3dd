"""The openvino backend on real OpenVINO IR and ONNX files (converted by OpenVINO itself)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from examples.builders import save_onnx_mlp
from repo_adapter.backends import InstanceSpec, backend_class
from repo_adapter.backends.openvino import OpenVinoBackend, compile_properties
from repo_adapter.config import parse_config_text
from repo_adapter.errors import InferenceServerError, ModelConfigError, StatusCode
from repo_adapter.inference_types import InferRequest, InferTensor
from repo_adapter.repository import scan_repository
from tests.support.requirements import missing

try:
    import openvino as ov
except ImportError:  # CI installs it; elsewhere each test skips with the reason
    ov = None


@pytest.fixture(autouse=True)
def _needs_openvino():
    if ov is None:
        missing("OpenVINO runtime not installed (pip install 'rayton[openvino]')")


SIZES = (8, 16, 4)


def save_ir(path: Path, batch: int | str = "batch") -> Path:
    """An MLP as OpenVINO IR (``model.xml`` + ``model.bin``), converted from ONNX by OpenVINO."""
    onnx_path = save_onnx_mlp(path.parent / "source.onnx", layer_sizes=SIZES, batch_dim=batch)
    ov.save_model(ov.convert_model(str(onnx_path)), str(path))
    onnx_path.unlink()
    return path


def scanned_model(repo: Path, name: str, config: str = "", build=save_ir, filename="model.xml"):
    build(repo / name / "1" / filename)
    (repo / name / "config.pbtxt").write_text('backend: "openvino"\n' + config)
    model = scan_repository(repo, names=[name])[name]
    assert model.available, model.error
    return model


def loaded(model) -> OpenVinoBackend:
    backend = OpenVinoBackend(model.model_version(model.versions[-1]), InstanceSpec.cpu(model.name))
    backend.load()
    return backend


def in_process(xml: Path, rows: np.ndarray) -> np.ndarray:
    """OpenVINO's own answer for the same file."""
    compiled = ov.Core().compile_model(str(xml), "CPU")
    return np.asarray(compiled(rows)[compiled.output(0)])


def request(rows: np.ndarray) -> InferRequest:
    return InferRequest(model_name="mlp", inputs=[InferTensor("INPUT0", "FP32", rows)])


def test_the_backend_is_registered():
    assert backend_class("openvino") is OpenVinoBackend


def test_auto_complete_fills_inputs_outputs_and_batching(tmp_path):
    model = scanned_model(tmp_path, "mlp")
    config = model.config
    assert config.default_model_filename == "model.xml"
    assert config.max_batch_size == 4 and config.HasField("dynamic_batching")
    assert [(t.name, list(t.dims)) for t in config.input] == [("INPUT0", [8])]
    assert [(t.name, list(t.dims)) for t in config.output] == [("OUTPUT0", [4])]


async def test_a_batch_equals_openvinos_own_result(tmp_path):
    model = scanned_model(tmp_path, "mlp")
    backend = loaded(model)
    rng = np.random.default_rng(0)
    parts = [rng.standard_normal((rows, 8)).astype(np.float32) for rows in (1, 3)]
    responses = await backend.execute([request(p) for p in parts])
    xml = model.path / "1" / "model.xml"
    for part, response in zip(parts, responses, strict=True):
        np.testing.assert_allclose(
            response.output("OUTPUT0").data, in_process(xml, part), rtol=1e-5, atol=1e-6
        )


async def test_a_fixed_batch_ir_gets_a_dynamic_batch_dimension(tmp_path):
    config = (
        "max_batch_size: 8\n"
        'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 8 ] } ]\n'
        'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
    )
    model = scanned_model(tmp_path, "fixed", config, build=lambda p: save_ir(p, batch=1))
    backend = loaded(model)
    rows = np.ones((5, 8), np.float32)
    [response] = await backend.execute([request(rows)])
    assert response.output("OUTPUT0").data.shape == (5, 4)


async def test_batch_padding_serves_a_model_that_keeps_its_fixed_batch(tmp_path):
    config = (
        "max_batch_size: 4\n"
        'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 8 ] } ]\n'
        'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
        'parameters { key: "SKIP_OV_DYNAMIC_BATCHSIZE" value: { string_value: "YES" } }\n'
        'parameters { key: "ENABLE_BATCH_PADDING" value: { string_value: "YES" } }\n'
    )
    model = scanned_model(tmp_path, "padded", config, build=lambda p: save_ir(p, batch=4))
    backend = loaded(model)
    rows = np.random.default_rng(1).standard_normal((3, 8)).astype(np.float32)
    [response] = await backend.execute([request(rows)])
    expected = in_process(model.path / "1" / "model.xml", np.vstack([rows, np.zeros((1, 8))]))
    np.testing.assert_allclose(response.output("OUTPUT0").data, expected[:3], rtol=1e-5)


async def test_onnx_files_run_through_openvino_too(tmp_path):
    config = 'default_model_filename: "model.onnx"\n'
    build = lambda p: save_onnx_mlp(p, layer_sizes=SIZES)  # noqa: E731
    model = scanned_model(tmp_path, "onnx_mlp", config, build=build, filename="model.onnx")
    assert model.config.backend == "openvino" and model.config.max_batch_size == 4
    backend = loaded(model)
    rows = np.ones((2, 8), np.float32)
    [response] = await backend.execute([request(rows)])
    assert response.output("OUTPUT0").data.shape == (2, 4)


def test_parameters_become_openvino_properties():
    config = parse_config_text(
        'name: "m" backend: "openvino"\n'
        'parameters { key: "NUM_STREAMS" value: { string_value: "2" } }\n'
        'parameters { key: "INFERENCE_NUM_THREADS" value: { string_value: "3" } }\n'
        'parameters { key: "PERFORMANCE_HINT" value: { string_value: "latency" } }\n',
        "test",
    )
    assert compile_properties(config) == {
        "NUM_STREAMS": "2",
        "INFERENCE_NUM_THREADS": "3",
        "PERFORMANCE_HINT": "LATENCY",
    }
    legacy = parse_config_text(
        'name: "m" parameters { key: "CPU_THROUGHPUT_STREAMS" value: { string_value: "auto" } }'
        ' parameters { key: "CPU_THREADS_NUM" value: { string_value: "1" } }',
        "test",
    )
    assert compile_properties(legacy) == {"NUM_STREAMS": "AUTO", "INFERENCE_NUM_THREADS": "1"}
    precise = parse_config_text(
        'name: "m" parameters { key: "INFERENCE_PRECISION_HINT" value: { string_value: "F32" } }',
        "test",
    )
    assert compile_properties(precise) == {"INFERENCE_PRECISION_HINT": "f32"}


def test_a_bad_parameter_value_is_a_clear_error():
    config = parse_config_text(
        'name: "m" parameters { key: "PERFORMANCE_HINT" value: { string_value: "FAST" } }', "t"
    )
    with pytest.raises(ModelConfigError, match="'PERFORMANCE_HINT' must be one of"):
        compile_properties(config)


def test_a_missing_or_corrupt_model_is_unavailable_with_the_reason(tmp_path):
    model = scanned_model(tmp_path, "mlp")
    (model.path / "1" / "model.bin").unlink()
    with pytest.raises(InferenceServerError, match="OpenVINO cannot read") as raised:
        loaded(model)
    assert raised.value.code == StatusCode.UNAVAILABLE
    (model.path / "1" / "model.xml").write_text("<not-an-ir/>")
    with pytest.raises(InferenceServerError, match="OpenVINO cannot read"):
        loaded(model)
    (model.path / "1" / "model.xml").unlink()
    with pytest.raises(InferenceServerError, match="unable to find"):
        loaded(model)


def test_a_gpu_instance_without_an_openvino_gpu_is_unavailable(tmp_path):
    model = scanned_model(tmp_path, "mlp")
    if "GPU" in ov.Core().available_devices:
        pytest.skip("this machine has an OpenVINO GPU device")
    gpu = InstanceSpec(name="mlp_0", kind="GPU", device_id=0)
    backend = OpenVinoBackend(model.model_version(1), gpu)
    with pytest.raises(InferenceServerError, match="OpenVINO sees no GPU device"):
        backend.load()
