"""Unit tests of the triton_python_backend_utils implementation."""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import logging

import numpy as np
import pytest
import torch
from tritonclient.grpc import model_config_pb2 as mc

import repo_adapter.python_backend as python_backend
from repo_adapter import datatypes
from repo_adapter.errors import InferenceServerError, StatusCode
from repo_adapter.inference_types import InferRequest, InferResponse, InferTensor
from repo_adapter.python_backend import pb_utils, runtime
from repo_adapter.python_backend.inference import from_infer_request, to_infer_request
from repo_adapter.request_trace import RequestTrace


@pytest.fixture(autouse=True)
def clean_hooks():
    yield
    python_backend.set_bls_dispatcher(None)
    python_backend.set_model_repository_hook(None)
    python_backend.bind_event_loop(None)
    python_backend.clear_metrics()


def test_module_is_importable_under_tritons_name():
    import triton_python_backend_utils

    assert triton_python_backend_utils is pb_utils


# ---------------------------------------------------------------------------------------------
# data types


def test_type_enums_use_tritonserver_numbering():
    for name in mc.DataType.keys():  # noqa: SIM118 - protobuf enum wrapper, not a dict
        assert int(getattr(pb_utils, name)) == mc.DataType.Value(name)
    assert (pb_utils.TYPE_BOOL, pb_utils.TYPE_FP32, pb_utils.TYPE_STRING) == (1, 11, 13)
    assert pb_utils.TYPE_BYTES == pb_utils.TYPE_STRING
    assert pb_utils.TYPE_BF16 == 14


@pytest.mark.parametrize(
    ("config_type", "numpy_type", "enum"),
    [
        ("TYPE_BOOL", np.bool_, 1),
        ("TYPE_UINT8", np.uint8, 2),
        ("TYPE_UINT64", np.uint64, 5),
        ("TYPE_INT8", np.int8, 6),
        ("TYPE_INT32", np.int32, 8),
        ("TYPE_INT64", np.int64, 9),
        ("TYPE_FP16", np.float16, 10),
        ("TYPE_FP32", np.float32, 11),
        ("TYPE_FP64", np.float64, 12),
        ("TYPE_STRING", np.object_, 13),
    ],
)
def test_dtype_mappings(config_type, numpy_type, enum):
    assert pb_utils.triton_string_to_numpy(config_type) is numpy_type
    assert pb_utils.triton_to_numpy_type(enum) is numpy_type
    assert pb_utils.numpy_to_triton_type(numpy_type) == enum
    assert pb_utils.numpy_to_triton_type(np.dtype(numpy_type)) == enum


def test_dtype_mapping_edge_cases():
    assert pb_utils.numpy_to_triton_type(np.bytes_) == 13
    assert pb_utils.numpy_to_triton_type(np.str_) is None
    assert pb_utils.numpy_to_triton_type(np.complex64) is None
    assert pb_utils.triton_to_numpy_type(0) is None
    assert pb_utils.triton_to_numpy_type(14) is datatypes.BF16_DTYPE.type
    with pytest.raises(KeyError):
        pb_utils.triton_string_to_numpy("FP32")


def test_serialize_and_deserialize_bytes():
    array = np.array([[b"ab", "ç"], [b"", 7]], dtype=np.object_)

    encoded = pb_utils.serialize_byte_tensor(array)

    assert encoded == b"\x02\x00\x00\x00ab\x02\x00\x00\x00\xc3\xa7\x00\x00\x00\x00\x01\x00\x00\x007"
    decoded = pb_utils.deserialize_bytes_tensor(encoded)
    assert decoded.dtype == np.object_
    assert list(decoded) == [b"ab", "ç".encode(), b"", b"7"]
    assert list(pb_utils.deserialize_bytes_tensor(np.frombuffer(encoded, np.uint8))) == list(
        decoded
    )


def test_serialize_edge_cases():
    assert pb_utils.serialize_byte_tensor(np.array([], dtype=np.object_)) == b""
    assert pb_utils.serialize_byte_tensor(np.array([1.0])) is None
    assert pb_utils.serialize_byte_tensor(np.array([b"xy"])) == b"\x02\x00\x00\x00xy"
    with pytest.raises(pb_utils.TritonModelException, match="unexpected end"):
        pb_utils.deserialize_bytes_tensor(b"\x05\x00\x00\x00ab")


# ---------------------------------------------------------------------------------------------
# Tensor and DLPack


def test_tensor_basics():
    data = np.arange(6, dtype=np.int64).reshape(2, 3)
    tensor = pb_utils.Tensor("X", data)

    assert tensor.name() == "X"
    assert tensor.as_numpy() is data
    assert tensor.triton_dtype() == pb_utils.TYPE_INT64
    assert tensor.shape() == [2, 3]
    assert tensor.is_cpu()
    assert pb_utils.Tensor("S", np.array([b"a"], dtype=np.object_)).triton_dtype() == 13


def test_tensor_rejects_unicode_arrays():
    with pytest.raises(pb_utils.TritonModelException, match=r"np\.object_"):
        pb_utils.Tensor("S", np.array(["text"]))


def test_dlpack_round_trip_with_numpy():
    data = np.arange(4, dtype=np.float32)
    tensor = pb_utils.Tensor("X", data)

    back = np.from_dlpack(tensor)

    assert np.shares_memory(back, data)
    again = pb_utils.Tensor.from_dlpack("Y", data)
    assert again.as_numpy().ctypes.data == data.ctypes.data
    assert again.triton_dtype() == pb_utils.TYPE_FP32


def test_dlpack_round_trip_with_torch():
    data = np.arange(6, dtype=np.float32).reshape(2, 3)
    tensor = pb_utils.Tensor("X", data)

    as_torch = torch.from_dlpack(tensor)
    as_torch[0, 0] = -1.0
    from_capsule = torch.utils.dlpack.from_dlpack(tensor.to_dlpack())

    assert data[0, 0] == -1.0
    assert from_capsule.shape == (2, 3)

    source = torch.arange(4, dtype=torch.int32)
    imported = pb_utils.Tensor.from_dlpack("T", source)
    source[1] = 100
    assert imported.triton_dtype() == pb_utils.TYPE_INT32
    assert imported.as_numpy().tolist() == [0, 100, 2, 3]
    capsule = torch.utils.dlpack.to_dlpack(torch.ones(3, dtype=torch.float64))
    assert pb_utils.Tensor.from_dlpack("C", capsule).as_numpy().tolist() == [1.0, 1.0, 1.0]


def test_dlpack_of_a_read_only_input_exports_a_copy():
    data = np.frombuffer(np.arange(3, dtype=np.float32).tobytes(), dtype=np.float32)
    assert not data.flags.writeable

    exported = torch.from_dlpack(pb_utils.Tensor("X", data))

    assert exported.tolist() == [0.0, 1.0, 2.0]


def test_dlpack_bf16_goes_through_torch():
    source = torch.tensor([1.5, -2.0], dtype=torch.bfloat16)

    tensor = pb_utils.Tensor.from_dlpack("B", source)

    assert tensor.triton_dtype() == pb_utils.TYPE_BF16
    assert tensor.as_numpy().astype(np.float32).tolist() == [1.5, -2.0]
    assert torch.from_dlpack(tensor).tolist() == [1.5, -2.0]


def test_dlpack_rejects_non_contiguous_tensors():
    with pytest.raises(pb_utils.TritonModelException, match="not contiguous"):
        pb_utils.Tensor.from_dlpack("T", torch.arange(6).reshape(2, 3).t())


def test_dlpack_of_bytes_tensors_is_refused():
    with pytest.raises(pb_utils.TritonModelException, match="BYTES"):
        pb_utils.Tensor("S", np.array([b"a"], dtype=np.object_)).to_dlpack()


# ---------------------------------------------------------------------------------------------
# errors, requests, responses


def test_triton_error_codes():
    error = pb_utils.TritonError("boom")
    assert (error.message(), error.code()) == ("boom", pb_utils.TritonError.INTERNAL)
    codes = ["UNKNOWN", "INTERNAL", "NOT_FOUND", "INVALID_ARG", "UNAVAILABLE", "UNSUPPORTED"]
    codes += ["ALREADY_EXISTS", "CANCELLED"]
    assert [int(getattr(pb_utils.TritonError, c)) for c in codes] == list(range(8))
    assert pb_utils.TritonError("x", pb_utils.TritonError.CANCELLED).code().name == "CANCELLED"
    with pytest.raises(ValueError, match="invalid TritonError code"):
        pb_utils.TritonError("x", 99)


def test_inference_response():
    out = pb_utils.Tensor("OUT", np.zeros(2, np.float32))
    response = pb_utils.InferenceResponse([out], parameters={"a": 1, "b": "x", "c": True})

    assert response.output_tensors() == [out]
    assert not response.has_error()
    assert response.error() is None
    assert json.loads(response.parameters()) == {"a": 1, "b": "x", "c": True}
    assert pb_utils.get_output_tensor_by_name(response, "OUT") is out
    assert pb_utils.get_output_tensor_by_name(response, "NOPE") is None
    failed = pb_utils.InferenceResponse(error=pb_utils.TritonError("bad"))
    assert failed.has_error() and failed.output_tensors() == []
    with pytest.raises(pb_utils.TritonModelException, match="bool/int/str"):
        pb_utils.InferenceResponse([], parameters={"x": 1.5})
    with pytest.raises(pb_utils.TritonModelException, match="must be a list"):
        pb_utils.InferenceResponse(out)


def test_bls_request_construction():
    tensor = pb_utils.Tensor("IN", np.ones(2, np.float32))
    request = pb_utils.InferenceRequest(
        model_name="m",
        requested_output_names=["OUT"],
        inputs=[tensor],
        request_id="id-1",
        correlation_id="seq-a",
        flags=pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_START,
        timeout=100,
        preferred_memory=pb_utils.PreferredMemory(pb_utils.TRITONSERVER_MEMORY_CPU, 0),
        parameters={"k": "v"},
    )

    assert request.inputs() == [tensor]
    assert pb_utils.get_input_tensor_by_name(request, "IN") is tensor
    assert (request.request_id(), request.correlation_id(), request.flags()) == ("id-1", "seq-a", 1)
    assert request.timeout() == 100
    assert json.loads(request.parameters()) == {"k": "v"}
    assert request.requested_output_names() == ["OUT"]
    assert not request.is_cancelled()
    with pytest.raises(pb_utils.TritonModelException, match="execute"):
        request.get_response_sender()

    infer = to_infer_request(request)
    assert infer.model_name == "m" and infer.model_version == "" and infer.id == "id-1"
    assert infer.parameters == {
        "k": "v",
        "sequence_id": "seq-a",
        "sequence_start": True,
        "timeout": 100,
    }
    assert [o.name for o in infer.outputs] == ["OUT"]
    assert infer.inputs[0].datatype == "FP32"


def test_a_bls_call_made_with_the_requests_trace_is_its_child():
    served = InferRequest("m", [InferTensor("IN", "FP32", np.ones((1, 2), np.float32))])
    assert from_infer_request(served, ["OUT"]).trace().get_context() is None  # not traced
    served.trace = RequestTrace(key="k-1", model_name="m", levels=frozenset({"TIMESTAMPS"}))
    context = from_infer_request(served, ["OUT"]).trace()
    assert context.get_context() == "k-1"
    bls = pb_utils.InferenceRequest(
        model_name="other",
        requested_output_names=["OUT"],
        inputs=[pb_utils.Tensor("IN", np.ones(2, np.float32))],
        trace=context,
    )
    assert to_infer_request(bls).parent_trace == "k-1"
    untraced = pb_utils.InferenceRequest(model_name="other", requested_output_names=[], inputs=[])
    assert to_infer_request(untraced).parent_trace == ""


def test_bls_request_validation():
    with pytest.raises(pb_utils.TritonModelException, match="Correlation ID"):
        pb_utils.InferenceRequest("m", [], [], correlation_id=1.5)
    with pytest.raises(pb_utils.TritonModelException, match="bool/int/str"):
        pb_utils.InferenceRequest("m", [], [], parameters={"x": [1]})
    with pytest.raises(TypeError):
        pb_utils.InferenceRequest("m", [], [np.ones(2)])


def test_bls_bytes_inputs_become_bytes_object_arrays():
    request = pb_utils.InferenceRequest(
        "m", [], [pb_utils.Tensor("S", np.array(["é", b"b"], dtype=np.object_))]
    )

    (tensor,) = to_infer_request(request).inputs

    assert tensor.datatype == "BYTES"
    assert list(tensor.data) == ["é".encode(), b"b"]


def _execute_request() -> pb_utils.InferenceRequest:
    infer = InferRequest("m", [InferTensor("X", "FP32", np.ones(1, np.float32))])
    return from_infer_request(infer, ["OUT"])


def test_response_sender_follows_tritons_non_decoupled_rules():
    response = pb_utils.InferenceResponse([])

    request = _execute_request()
    sender = request.get_response_sender()
    assert request.get_response_sender() is sender
    with pytest.raises(pb_utils.TritonModelException, match="complete final before"):
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
    sender.send(response)
    with pytest.raises(pb_utils.TritonModelException, match="more than one response"):
        sender.send(response)
    sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
    with pytest.raises(pb_utils.TritonModelException, match="has been closed"):
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
    assert not sender.is_cancelled()


def test_exec_without_dispatcher_or_loop_answers_with_an_error():
    request = pb_utils.InferenceRequest("m", ["OUT"], [])

    response = request.exec()

    assert response.has_error()
    assert response.error().code() == pb_utils.TritonError.UNAVAILABLE
    assert "BLS is not available" in response.error().message()
    (only,) = list(request.exec(decoupled=True))
    assert only.has_error()


def test_exec_is_refused_in_initialize():
    with runtime.model_call("initialize", "m", None, None):
        response = pb_utils.InferenceRequest("m", ["OUT"], []).exec()

    assert response.error().code() == pb_utils.TritonError.UNSUPPORTED
    assert "not allowed in initialize()" in response.error().message()


async def test_blocking_exec_on_the_loop_thread_is_refused_not_deadlocked():
    async def dispatcher(request):  # pragma: no cover - must not be reached
        raise AssertionError

    python_backend.set_bls_dispatcher(dispatcher)
    python_backend.bind_event_loop(asyncio.get_running_loop())

    response = pb_utils.InferenceRequest("m", ["OUT"], []).exec()

    assert response.has_error()
    assert "async_exec" in response.error().message()


async def test_exec_from_a_worker_thread_runs_on_the_bound_loop():
    loop = asyncio.get_running_loop()
    calls = []

    async def dispatcher(request: InferRequest) -> InferResponse:
        calls.append(asyncio.get_running_loop())
        if request.model_name == "fail":
            raise InferenceServerError("nope", StatusCode.INVALID_ARG)
        data = request.inputs[0].data * 2
        return InferResponse("m", "1", [InferTensor("OUT", "FP32", data)], parameters={"p": 1})

    python_backend.set_bls_dispatcher(dispatcher)
    python_backend.bind_event_loop(loop)
    tensor = pb_utils.Tensor("IN", np.array([1.0, 2.0], np.float32))

    def work():
        ok = pb_utils.InferenceRequest("m", ["OUT"], [tensor]).exec()
        failed = pb_utils.InferenceRequest("fail", ["OUT"], [tensor]).exec()
        return ok, failed

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        ok, failed = await loop.run_in_executor(pool, work)

    assert calls == [loop, loop]
    assert pb_utils.get_output_tensor_by_name(ok, "OUT").as_numpy().tolist() == [2.0, 4.0]
    assert json.loads(ok.parameters()) == {"p": 1}
    assert (failed.error().message(), failed.error().code()) == (
        "nope",
        pb_utils.TritonError.INVALID_ARG,
    )
    awaited = await pb_utils.InferenceRequest("m", ["OUT"], [tensor]).async_exec()
    assert pb_utils.get_output_tensor_by_name(awaited, "OUT").as_numpy().tolist() == [2.0, 4.0]


# ---------------------------------------------------------------------------------------------
# ModelConfig (auto-complete)


def _config(**fields) -> pb_utils.ModelConfig:
    base = {"name": "m", "max_batch_size": 0, "input": [], "output": []}
    base.update(fields)
    return pb_utils.ModelConfig(json.dumps(base))


def test_model_config_set_max_batch_size():
    config = _config(max_batch_size=8)
    config.set_max_batch_size(16)
    assert config.as_dict()["max_batch_size"] == 16
    with pytest.raises(ValueError, match="configuration specified max_batch_size 16"):
        config.set_max_batch_size(4)
    zero = _config()
    zero.set_max_batch_size(4)
    assert zero.as_dict()["max_batch_size"] == 4


def test_model_config_set_dynamic_batching():
    config = _config()
    config.set_dynamic_batching()
    config.set_dynamic_batching()
    assert config.as_dict()["dynamic_batching"] == {}
    with pytest.raises(ValueError, match="scheduling_choice as 'sequence_batching'"):
        _config(sequence_batching={}).set_dynamic_batching()


def test_model_config_add_input_completes_and_refuses_conflicts():
    config = _config(input=[{"name": "A", "data_type": "TYPE_FP32", "dims": []}])
    config.add_input({"name": "A", "data_type": "TYPE_FP32", "dims": [3], "optional": True})
    config.add_input({"name": "B", "data_type": "TYPE_INT32", "dims": [1]})
    assert config.as_dict()["input"] == [
        {"name": "A", "data_type": "TYPE_FP32", "dims": [3], "optional": True},
        {"name": "B", "data_type": "TYPE_INT32", "dims": [1]},
    ]
    with pytest.raises(ValueError, match="configuration expects datatype TYPE_FP32"):
        config.add_input({"name": "A", "data_type": "TYPE_INT8", "dims": [3]})
    with pytest.raises(ValueError, match=r"expects dims \[4\] but the model configuration"):
        config.add_input({"name": "A", "data_type": "TYPE_FP32", "dims": [4]})
    with pytest.raises(ValueError, match="expects optional False"):
        config.add_input({"name": "A", "data_type": "TYPE_FP32", "dims": [3], "optional": False})
    with pytest.raises(ValueError, match="contains property other than"):
        config.add_input({"name": "C", "data_type": "TYPE_FP32", "dims": [1], "format": "x"})
    with pytest.raises(ValueError, match="missing 'name'"):
        config.add_input({"data_type": "TYPE_FP32", "dims": [1]})
    with pytest.raises(ValueError, match="missing 'dims'"):
        config.add_input({"name": "C", "data_type": "TYPE_FP32"})


def test_model_config_add_output():
    config = _config()
    config.add_output({"name": "OUT", "data_type": "TYPE_FP32", "dims": [2]})
    config.add_output({"name": "OUT", "data_type": "TYPE_FP32", "dims": [2]})
    assert config.as_dict()["output"] == [{"name": "OUT", "data_type": "TYPE_FP32", "dims": [2]}]
    with pytest.raises(ValueError, match="contains property other than 'name', 'data_type' and"):
        config.add_output({"name": "X", "data_type": "TYPE_FP32", "dims": [1], "optional": True})
    with pytest.raises(ValueError, match="missing 'data_type'"):
        config.add_output({"name": "X", "dims": [1]})
    with pytest.raises(ValueError, match="model provides TYPE_FP64"):
        config.add_output({"name": "OUT", "data_type": "TYPE_FP64", "dims": [2]})


def test_model_config_transaction_policy():
    config = _config()
    config.set_model_transaction_policy({"decoupled": False})
    assert config.as_dict()["model_transaction_policy"] == {"decoupled": False}
    assert not pb_utils.using_decoupled_model_transaction_policy(config.as_dict())
    with pytest.raises(ValueError, match="trying to change decoupled property"):
        config.set_model_transaction_policy({"decoupled": True})
    with pytest.raises(ValueError, match="other than 'decoupled'"):
        config.set_model_transaction_policy({"streaming": True})
    decoupled = {"model_transaction_policy": {"decoupled": True}}
    assert pb_utils.using_decoupled_model_transaction_policy(decoupled)


def test_model_config_from_dict_is_a_copy():
    source = {"name": "m", "max_batch_size": 0, "input": [], "output": []}
    config = pb_utils.ModelConfig(source)
    config.set_max_batch_size(2)
    assert source["max_batch_size"] == 0


def test_config_lookup_helpers():
    config = {"input": [{"name": "I", "data_type": "TYPE_FP32"}], "output": [{"name": "O"}]}
    assert pb_utils.get_input_config_by_name(config, "I")["data_type"] == "TYPE_FP32"
    assert pb_utils.get_input_config_by_name(config, "O") is None
    assert pb_utils.get_output_config_by_name(config, "O") == {"name": "O"}
    assert pb_utils.get_output_config_by_name({}, "O") is None


# ---------------------------------------------------------------------------------------------
# logging, metrics, model control, model dir


def test_logger_goes_to_python_logging(caplog):
    with caplog.at_level(logging.DEBUG, logger="rayton.python_model"):
        pb_utils.Logger.log_info("info line")
        pb_utils.Logger.log_warn("warn line")
        pb_utils.Logger.log_error("error line")
        pb_utils.Logger.log_verbose("verbose line")
        pb_utils.Logger.log("explicit", pb_utils.Logger.ERROR)
        pb_utils.Logger.log("level enum", pb_utils.LogLevel.WARNING)

    levels = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert levels == [
        ("INFO", "info line"),
        ("WARNING", "warn line"),
        ("ERROR", "error line"),
        ("DEBUG", "verbose line"),
        ("ERROR", "explicit"),
        ("WARNING", "level enum"),
    ]
    assert {r.filename for r in caplog.records} == {"test_pb_utils.py"}


def test_counter_and_gauge_metrics():
    family = pb_utils.MetricFamily("requests_total", "Requests", pb_utils.MetricFamily.COUNTER)
    metric = family.Metric(labels={"model": "m"})
    metric.increment(2)
    family.Metric(labels={"model": "m"}).increment(1)
    assert metric.value() == 3.0
    with pytest.raises(pb_utils.TritonModelException, match="decremented"):
        metric.increment(-1)
    with pytest.raises(pb_utils.TritonModelException, match="gauge"):
        metric.set(1)

    gauge = pb_utils.MetricFamily("temperature", "T", pb_utils.MetricFamily.GAUGE).Metric()
    gauge.set(5)
    gauge.increment(-2)
    assert gauge.value() == 3.0
    with pytest.raises(pb_utils.TritonModelException, match="already exists as a counter"):
        pb_utils.MetricFamily("requests_total", "x", pb_utils.MetricFamily.GAUGE)


def test_histogram_metrics():
    family = pb_utils.MetricFamily("latency", "L", pb_utils.MetricFamily.HISTOGRAM)
    with pytest.raises(pb_utils.TritonModelException, match="buckets"):
        family.Metric()
    metric = family.Metric(labels={"a": "b"}, buckets=[1.0, 5.0])
    for value in (0.5, 1.0, 3.0, 10.0):
        metric.observe(value)
    with pytest.raises(pb_utils.TritonModelException):
        metric.value()

    (snapshot,) = [f for f in python_backend.collect_metrics() if f["name"] == "latency"]
    (sample,) = snapshot["samples"]
    assert snapshot["kind"] == "histogram"
    assert sample["labels"] == {"a": "b"}
    assert sample["buckets"] == {1.0: 2, 5.0: 3, float("inf"): 4}
    assert (sample["sum"], sample["count"]) == (14.5, 4)


def test_model_control_without_a_hook_is_not_supported():
    for call in (
        lambda: pb_utils.load_model("m"),
        lambda: pb_utils.unload_model("m"),
        lambda: pb_utils.is_model_ready("m"),
    ):
        with pytest.raises(pb_utils.TritonModelException, match="not supported in this mode"):
            call()


def test_model_control_through_a_hook():
    calls = []

    class Hook:
        def load_model(self, model_name, config, files):
            calls.append(("load", model_name, config, files))
            if model_name == "bad":
                raise InferenceServerError("failed to load 'bad'", StatusCode.UNAVAILABLE)

        def unload_model(self, model_name, unload_dependents):
            calls.append(("unload", model_name, unload_dependents))

        def is_model_ready(self, model_name, model_version):
            return model_name == "m"

    python_backend.set_model_repository_hook(Hook())

    pb_utils.load_model("m", config='{"max_batch_size": 2}')
    pb_utils.unload_model("m", unload_dependents=True)
    assert pb_utils.is_model_ready("m") is True
    assert pb_utils.is_model_ready("other", "1") is False
    with pytest.raises(pb_utils.TritonModelException, match="failed to load 'bad'"):
        pb_utils.load_model("bad")
    with pytest.raises(pb_utils.TritonModelException, match="requires 'config'"):
        pb_utils.load_model("m", files={"file:1/model.py": b""})
    assert calls == [
        ("load", "m", '{"max_batch_size": 2}', None),
        ("unload", "m", True),
        ("load", "bad", "", None),
    ]


async def test_async_model_control_hook_runs_on_the_bound_loop():
    loop = asyncio.get_running_loop()

    class Hook:
        async def is_model_ready(self, model_name, model_version):
            return asyncio.get_running_loop() is loop

    python_backend.set_model_repository_hook(Hook())
    python_backend.bind_event_loop(loop)

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        ready = await loop.run_in_executor(pool, pb_utils.is_model_ready, "m")

    assert ready is True


def test_get_model_dir(tmp_path):
    with pytest.raises(pb_utils.TritonModelException):
        pb_utils.get_model_dir()
    with runtime.model_call("execute", "m", tmp_path, None):
        assert pb_utils.get_model_dir() == str(tmp_path)
