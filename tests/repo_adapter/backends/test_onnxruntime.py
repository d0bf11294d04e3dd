"""ONNX Runtime backend: auto-complete, load checks and batched execution on real ONNX files."""

from __future__ import annotations

from functools import partial

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from tritonclient.grpc import model_config_pb2 as mc

from examples.builders import save_onnx_identity, save_onnx_mlp, save_onnx_typed_ops
from repo_adapter.backends import backend_class
from repo_adapter.backends.base import InstanceSpec, ModelVersion
from repo_adapter.backends.onnxruntime import OnnxRuntimeBackend
from repo_adapter.errors import InferenceServerError, ModelConfigError, StatusCode
from repo_adapter.inference_types import InferRequest, InferTensor
from repo_adapter.repository import scan_repository
from repo_adapter.request_validation import RequestValidator

MLP_SIZES = (8, 16, 4)
mlp = partial(save_onnx_mlp, layer_sizes=MLP_SIZES)


def make_model(repo, name, build, config_text=None, filename="model.onnx"):
    """Write ``<repo>/<name>/1/<filename>`` (and config.pbtxt), scan it, return the model."""
    model_dir = repo / name
    build(model_dir / "1" / filename)
    if config_text is not None:
        (model_dir / "config.pbtxt").write_text(config_text)
    scanned = scan_repository(repo, names=[name])[name]
    assert scanned.available, scanned.error
    return scanned


def version(scanned) -> ModelVersion:
    return scanned.model_version(scanned.versions[-1])


def loaded(scanned) -> OnnxRuntimeBackend:
    backend = OnnxRuntimeBackend(version(scanned), InstanceSpec.cpu(scanned.name))
    backend.load()
    return backend


def request(request_id="", **tensors):
    """``request(INPUT0=("FP32", array), ...)``."""
    inputs = [InferTensor(name, dt, data) for name, (dt, data) in tensors.items()]
    return InferRequest(model_name="m", inputs=inputs, id=request_id)


def write_garbage(path):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"this is not an ONNX model")
    return path


def bytes_array(items, shape):
    array = np.empty(len(items), dtype=np.object_)
    array[:] = items
    return array.reshape(shape)


def test_registry_resolves_onnxruntime():
    assert backend_class("onnxruntime") is OnnxRuntimeBackend


async def test_single_request_matches_onnxruntime(tmp_path):
    scanned = make_model(tmp_path, "mlp", mlp)
    backend = loaded(scanned)
    x = np.random.default_rng(1).standard_normal((2, 8)).astype(np.float32)
    [response] = await backend.execute([request("r1", INPUT0=("FP32", x))])
    session = ort.InferenceSession(str(version(scanned).model_path))
    expected = session.run(["OUTPUT0"], {"INPUT0": x})[0]
    output = response.output("OUTPUT0")
    assert (response.id, response.model_name, response.model_version) == ("r1", "mlp", "1")
    assert output.datatype == "FP32" and output.shape == (2, 4)
    np.testing.assert_allclose(output.data, expected, rtol=1e-5, atol=1e-6)
    backend.unload()


async def test_batch_is_split_back_per_request(tmp_path):
    backend = loaded(make_model(tmp_path, "mlp", mlp))
    rng = np.random.default_rng(2)
    arrays = [rng.standard_normal((rows, 8)).astype(np.float32) for rows in (1, 3, 2)]
    requests = [request(f"r{i}", INPUT0=("FP32", a)) for i, a in enumerate(arrays)]
    batched = await backend.execute(requests)
    assert [r.id for r in batched] == ["r0", "r1", "r2"]
    for array, response in zip(arrays, batched, strict=True):
        [alone] = await backend.execute([request(INPUT0=("FP32", array))])
        assert response.output("OUTPUT0").shape == (array.shape[0], 4)
        np.testing.assert_allclose(
            response.output("OUTPUT0").data, alone.output("OUTPUT0").data, rtol=1e-5, atol=1e-6
        )


async def test_the_execution_reports_gathering_inputs_and_inference_apart(tmp_path):
    """Triton's compute_input is the gather (concatenating the batch), compute_infer the run."""
    backend = loaded(make_model(tmp_path, "mlp", mlp))
    arrays = [np.ones((64, 8), np.float32) for _ in range(32)]
    responses = await backend.execute([request(INPUT0=("FP32", a)) for a in arrays])
    assert len(responses) == 32
    compute = responses.compute  # one report for the execution
    assert compute.input_ns > 0 and compute.infer_ns > 0
    assert compute.output_ns == 0  # the batcher counts the rest of the execution as output


async def test_dtype_round_trip_fp32_int64_bool_fp16_bytes(tmp_path):
    scanned = make_model(tmp_path, "typed", save_onnx_typed_ops)  # auto-completed config
    types = {t.name: mc.DataType.Name(t.data_type) for t in scanned.config.output}
    assert types == {
        "OUT_FP32": "TYPE_FP32",
        "OUT_INT64": "TYPE_INT64",
        "OUT_BOOL": "TYPE_BOOL",
        "OUT_FP16": "TYPE_FP16",
        "OUT_STRING": "TYPE_STRING",
    }
    backend = loaded(scanned)

    def make(rows, offset):
        return request(
            IN_FP32=("FP32", np.full((rows, 3), 1.5 + offset, np.float32)),
            IN_INT64=("INT64", np.full((rows, 2), 2**40 + offset, np.int64)),
            IN_BOOL=("BOOL", np.array([[True, False]] * rows)),
            IN_FP16=("FP16", np.full((rows, 2), 0.25, np.float16)),
            IN_STRING=("BYTES", bytes_array(["héllo".encode(), b"x"][:rows], (rows, 1))),
        )

    first, second = await backend.execute([make(2, 0), make(1, 1)])
    assert first.output("OUT_FP32").data.dtype == np.float32
    np.testing.assert_array_equal(first.output("OUT_FP32").data, np.full((2, 3), 3.0))
    np.testing.assert_array_equal(second.output("OUT_FP32").data, np.full((1, 3), 5.0))
    assert first.output("OUT_INT64").data.dtype == np.int64
    assert first.output("OUT_INT64").data[0, 0] == 2**40 + 1
    assert second.output("OUT_INT64").data[0, 0] == 2**40 + 2
    np.testing.assert_array_equal(first.output("OUT_BOOL").data, [[False, True]] * 2)
    assert first.output("OUT_FP16").data.dtype == np.float16
    np.testing.assert_array_equal(first.output("OUT_FP16").data, np.full((2, 2), 0.5))
    text = first.output("OUT_STRING")
    assert text.datatype == "BYTES" and text.data.dtype == np.object_
    assert text.data.tolist() == [["héllo".encode()], [b"x"]]
    assert second.output("OUT_STRING").data.tolist() == [["héllo".encode()]]


async def test_bytes_that_are_not_utf8_are_rejected(tmp_path):
    build = partial(save_onnx_identity, shape=("batch", 1), elem_type=onnx.TensorProto.STRING)
    backend = loaded(make_model(tmp_path, "text", build))
    with pytest.raises(InferenceServerError, match="valid UTF-8") as info:
        await backend.execute([request(INPUT0=("BYTES", bytes_array([b"\xff"], (1, 1))))])
    assert info.value.code == StatusCode.INVALID_ARG


async def test_reshape_on_input_and_output(tmp_path):
    config = """
max_batch_size: 8
input [{ name: "INPUT0" data_type: TYPE_FP32 dims: [4] reshape: { shape: [2, 2] } }]
output [{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [4] reshape: { shape: [2, 2] } }]
"""
    build = partial(save_onnx_identity, shape=("batch", 2, 2))
    backend = loaded(make_model(tmp_path, "reshaped", build, config))
    validator = RequestValidator(backend.config)
    arrays = [np.arange(rows * 4, dtype=np.float32).reshape(rows, 4) for rows in (1, 3)]
    requests = [request(INPUT0=("FP32", a)) for a in arrays]
    for each in requests:  # what the model layer does first: core's reshape, once
        validator.normalize(each)
    assert requests[1].input("INPUT0").data.shape == (3, 2, 2)
    responses = await backend.execute(requests)
    # The backend answers in the reshape shape; the model layer reports the config's dims.
    for array, response in zip(arrays, responses, strict=True):
        np.testing.assert_array_equal(
            response.output("OUTPUT0").data, array.reshape(array.shape[0], 2, 2)
        )


async def test_max_batch_size_zero_model(tmp_path):
    build = partial(save_onnx_identity, shape=(2, 3), elem_type=onnx.TensorProto.INT64)
    scanned = make_model(tmp_path, "fixed", build)
    assert scanned.config.max_batch_size == 0
    assert not scanned.config.HasField("dynamic_batching")
    assert list(scanned.config.input[0].dims) == [2, 3]
    backend = loaded(scanned)
    x = np.arange(6, dtype=np.int64).reshape(2, 3)
    [response] = await backend.execute([request(INPUT0=("INT64", x))])
    np.testing.assert_array_equal(response.output("OUTPUT0").data, x)


async def test_scalar_model_uses_dims_of_one(tmp_path):
    scanned = make_model(tmp_path, "scalar", partial(save_onnx_identity, shape=()))
    assert scanned.config.max_batch_size == 0
    assert list(scanned.config.input[0].dims) == [1]
    assert not scanned.config.input[0].HasField("reshape")
    [response] = await loaded(scanned).execute([request(INPUT0=("FP32", np.array([7.0], "f4")))])
    assert response.output("OUTPUT0").shape == (1,)
    assert response.output("OUTPUT0").data[0] == 7.0


def test_auto_complete_without_config(tmp_path):
    scanned = make_model(tmp_path, "mlp", mlp)
    config = scanned.config
    assert (config.backend, config.platform) == ("onnxruntime", "onnxruntime_onnx")
    assert config.max_batch_size == 4
    assert config.HasField("dynamic_batching")
    assert list(config.dynamic_batching.preferred_batch_size) == [4]
    [tensor_in], [tensor_out] = config.input, config.output
    assert (tensor_in.name, tensor_in.data_type, list(tensor_in.dims)) == (
        "INPUT0",
        mc.TYPE_FP32,
        [8],
    )
    assert (tensor_out.name, tensor_out.data_type, list(tensor_out.dims)) == (
        "OUTPUT0",
        mc.TYPE_FP32,
        [4],
    )
    [group] = config.instance_group
    assert (group.kind, group.count) == (mc.ModelInstanceGroup.KIND_CPU, 2)


def test_auto_complete_fixed_first_dim_is_not_batchable(tmp_path):
    scanned = make_model(tmp_path, "mlp", partial(mlp, batch_dim=1))
    assert scanned.config.max_batch_size == 0
    assert not scanned.config.HasField("dynamic_batching")
    assert list(scanned.config.input[0].dims) == [1, 8]


def test_auto_complete_rejects_max_batch_size_for_unbatchable_model(tmp_path):
    (tmp_path / "mlp" / "1").mkdir(parents=True)
    save_onnx_mlp(tmp_path / "mlp" / "1" / "model.onnx", MLP_SIZES, batch_dim=1)
    (tmp_path / "mlp" / "config.pbtxt").write_text("max_batch_size: 8")
    scanned = scan_repository(tmp_path)["mlp"]
    assert "model does not support batching while non-zero max_batch_size" in scanned.error


def test_auto_complete_keeps_a_set_scheduler_and_max_batch_size(tmp_path):
    config = 'max_batch_size: 16\nsequence_batching { }\nbackend: "onnxruntime"'
    scanned = make_model(tmp_path, "mlp", mlp, config)
    assert scanned.config.max_batch_size == 16
    assert not scanned.config.HasField("dynamic_batching")


def test_auto_complete_fills_only_the_missing_side(tmp_path):
    config = 'input [{ name: "INPUT0" data_type: TYPE_FP32 dims: [8] }]'
    scanned = make_model(tmp_path, "mlp", mlp, config)
    assert list(scanned.config.input[0].dims) == [8]
    assert [t.name for t in scanned.config.output] == ["OUTPUT0"]
    assert scanned.config.max_batch_size == 4


def test_auto_complete_reports_a_declared_tensor_that_does_not_match(tmp_path):
    (tmp_path / "mlp" / "1").mkdir(parents=True)
    save_onnx_mlp(tmp_path / "mlp" / "1" / "model.onnx", MLP_SIZES)
    config = 'input [{ name: "INPUT0" data_type: TYPE_INT32 dims: [8] }]'
    (tmp_path / "mlp" / "config.pbtxt").write_text(config)
    scanned = scan_repository(tmp_path)["mlp"]
    assert "configuration expects datatype TYPE_INT32 for input 'INPUT0'" in scanned.error
    assert "model provides TYPE_FP32" in scanned.error


@pytest.mark.parametrize(
    ("tensors", "message"),
    [
        (
            'input [{ name: "X" data_type: TYPE_FP32 dims: [8] }]',
            "unexpected inference input 'X', allowed inputs are: INPUT0",
        ),
        (
            'input [{ name: "INPUT0" data_type: TYPE_FP32 dims: [9] }]',
            "the model expects 2 dimensions (shape [-1, 8])",
        ),
    ],
)
def test_load_rejects_config_that_does_not_match_the_model(tmp_path, tensors, message):
    config = f"""max_batch_size: 4
{tensors}
output [{{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [4] }}]"""
    scanned = make_model(tmp_path, "mlp", mlp, config)
    backend = OnnxRuntimeBackend(version(scanned), InstanceSpec.cpu("mlp"))
    with pytest.raises(ModelConfigError) as info:
        backend.load()
    assert message in info.value.message


def test_broken_model_file_is_unavailable(tmp_path):
    config = """max_batch_size: 4
input [{ name: "INPUT0" data_type: TYPE_FP32 dims: [8] }]
output [{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [4] }]"""
    scanned = make_model(tmp_path, "broken", write_garbage, config)
    backend = OnnxRuntimeBackend(version(scanned), InstanceSpec.cpu("broken"))
    with pytest.raises(InferenceServerError) as info:
        backend.load()
    assert info.value.code == StatusCode.UNAVAILABLE
    assert "model 'broken'" in info.value.message
    assert str(version(scanned).model_path) in info.value.message


def test_broken_model_file_without_config_fails_the_scan(tmp_path):
    path = write_garbage(tmp_path / "broken" / "1" / "model.onnx")
    scanned = scan_repository(tmp_path)["broken"]
    assert not scanned.available
    assert "unable to load ONNX file" in scanned.error and str(path) in scanned.error


async def test_model_directory_with_external_data(tmp_path):
    def build(path):
        source = save_onnx_mlp(tmp_path / "source.onnx", MLP_SIZES)
        path.mkdir(parents=True)
        onnx.save(
            onnx.load(str(source)),
            str(path / "model.onnx"),
            save_as_external_data=True,
            location="weights.bin",
            size_threshold=0,
        )

    scanned = make_model(tmp_path / "repo", "ext", build)
    assert (version(scanned).model_path / "weights.bin").exists()
    assert scanned.config.max_batch_size == 4
    x = np.ones((3, 8), np.float32)
    [response] = await loaded(scanned).execute([request(INPUT0=("FP32", x))])
    expected = ort.InferenceSession(str(tmp_path / "source.onnx")).run(None, {"INPUT0": x})[0]
    np.testing.assert_allclose(response.output("OUTPUT0").data, expected, rtol=1e-5, atol=1e-6)


def test_thread_parameters_and_env(tmp_path, monkeypatch):
    from repo_adapter.backends import onnxruntime as backend_module

    config = mc.ModelConfig(name="m")
    options = backend_module._session_options(ort, config)
    assert options.intra_op_num_threads == 0  # ORT decides, as in Triton
    monkeypatch.setenv("RAYTON_ORT_INTRA_OP_THREADS", "3")
    assert backend_module._session_options(ort, config).intra_op_num_threads == 3
    for key, value in (("intra_op_thread_count", "2"), ("inter_op_thread_count", "5")):
        config.parameters[key].string_value = value
    config.parameters["execution_mode"].string_value = "1"
    config.parameters["enable_mem_pattern"].string_value = "false"
    options = backend_module._session_options(ort, config)
    assert (options.intra_op_num_threads, options.inter_op_num_threads) == (2, 5)
    assert options.execution_mode == ort.ExecutionMode.ORT_PARALLEL
    assert options.enable_mem_pattern is False
    config.parameters["execution_mode"].string_value = "7"
    with pytest.raises(ModelConfigError, match="execution_mode are 0 or 1"):
        backend_module._session_options(ort, config)


def test_gpu_instance_without_cuda_provider_runs_on_cpu(tmp_path):
    scanned = make_model(tmp_path, "mlp", mlp)
    if "CUDAExecutionProvider" in ort.get_available_providers():
        pytest.skip("this machine has the CUDA execution provider")
    backend = OnnxRuntimeBackend(version(scanned), InstanceSpec("mlp_0", "GPU", 0))
    backend.load()
    assert backend._session.get_providers() == ["CPUExecutionProvider"]


def test_gpu_execution_providers_follow_the_config():
    from types import SimpleNamespace

    from google.protobuf import text_format

    from repo_adapter.backends import onnxruntime as backend_module

    config = text_format.Parse(
        """name: "m"
parameters { key: "cudnn_conv_algo_search" value { string_value: "1" } }
parameters { key: "gpu_mem_limit" value { string_value: "1024" } }
optimization { execution_accelerators { gpu_execution_accelerator [
  { name: "tensorrt" parameters { key: "precision_mode" value: "FP16" }
                     parameters { key: "max_workspace_size_bytes" value: "4096" } },
  { name: "cuda" parameters { key: "use_ep_level_unified_stream" value: "1" } }
] } }""",
        mc.ModelConfig(),
    )
    every = ["TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider"]
    fake_ort = SimpleNamespace(get_available_providers=lambda: every)
    providers = backend_module._providers(fake_ort, config, InstanceSpec("m_0", "GPU", 1))
    assert providers == [
        (
            "TensorrtExecutionProvider",
            {"device_id": "1", "trt_fp16_enable": "1", "trt_max_workspace_size": "4096"},
        ),
        (
            "CUDAExecutionProvider",
            {
                "device_id": "1",
                "arena_extend_strategy": "kSameAsRequested",
                "cudnn_conv_algo_search": "HEURISTIC",
                "gpu_mem_limit": "1024",
                "use_ep_level_unified_stream": "1",
            },
        ),
        "CPUExecutionProvider",
    ]
    # CPU instances never get GPU providers; without the TensorRT EP only CUDA is added.
    assert backend_module._providers(fake_ort, config, InstanceSpec.cpu("m")) == [every[2]]
    fake_ort.get_available_providers = lambda: every[1:]
    gpu = backend_module._providers(fake_ort, config, InstanceSpec("m_0", "GPU", 0))
    assert [p[0] for p in gpu[:-1]] == ["CUDAExecutionProvider"]
    config.optimization.execution_accelerators.gpu_execution_accelerator.add(name="warp")
    with pytest.raises(ModelConfigError, match="unknown Execution Accelerator 'warp'"):
        backend_module._providers(fake_ort, config, InstanceSpec("m_0", "GPU", 0))


def test_non_tensor_outputs_are_reported_as_unsupported(tmp_path):
    def build(path):
        helper, proto = onnx.helper, onnx.TensorProto
        graph = helper.make_graph(
            [helper.make_node("SplitToSequence", ["INPUT0"], ["OUTPUT0"], axis=0)],
            "sequence",
            [helper.make_tensor_value_info("INPUT0", proto.FLOAT, ["batch", 4])],
            [helper.make_tensor_sequence_value_info("OUTPUT0", proto.FLOAT, None)],
        )
        path.parent.mkdir(parents=True)
        onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)

    build(tmp_path / "seq" / "1" / "model.onnx")
    scanned = scan_repository(tmp_path)["seq"]
    assert "unsupported ONNX type 'seq(tensor(float))' for I/O 'OUTPUT0'" in scanned.error
