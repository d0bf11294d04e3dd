"""PythonBackend against model.py files written as Triton users write them."""

from __future__ import annotations

import asyncio
import json
import shutil
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
from tritonclient.grpc import model_config_pb2 as mc

from repo_adapter.backends import backend_class
from repo_adapter.backends.base import InstanceSpec, ModelVersion
from repo_adapter.backends.python import PythonBackend
from repo_adapter.config import config_to_json_text
from repo_adapter.errors import InferenceServerError, ModelConfigError, StatusCode
from repo_adapter.inference_types import InferRequest, InferResponse, InferTensor, RequestedOutput
from repo_adapter.python_backend import set_bls_dispatcher
from repo_adapter.python_backend.inference import from_infer_request
from repo_adapter.repository import scan_model, scan_repository
from repo_adapter.response_stream import ResponseStream

MODELS = Path(__file__).parent / "python_models"


def model_version(name: str, repo: Path = MODELS, version: int = 1) -> ModelVersion:
    scanned = scan_model(repo / name)
    assert scanned.available, scanned.error
    return scanned.model_version(version)


@pytest.fixture
def load():
    """Load a model of the test repository; everything loaded is unloaded afterwards."""
    loaded: list[PythonBackend] = []

    def _load(name: str, instance: InstanceSpec | None = None, repo: Path = MODELS):
        backend = PythonBackend(model_version(name, repo), instance or InstanceSpec.cpu(name))
        backend.load()
        loaded.append(backend)
        return backend

    yield _load
    for backend in loaded:
        backend.unload()


@pytest.fixture(autouse=True)
def no_dispatcher():
    set_bls_dispatcher(None)
    yield
    set_bls_dispatcher(None)


def fp32(name: str, rows) -> InferTensor:
    return InferTensor(name, "FP32", np.asarray(rows, dtype=np.float32))


def request(model: str, *inputs: InferTensor, id: str = "", **kwargs) -> InferRequest:
    return InferRequest(model_name=model, inputs=list(inputs), id=id, **kwargs)


def ok(result) -> InferResponse:
    assert isinstance(result, InferResponse), result
    return result


def test_backend_is_registered_under_python():
    assert backend_class("python") is PythonBackend
    assert PythonBackend.name == "python"


async def test_add_sub_batch_of_requests_with_different_row_counts(load):
    backend = load("add_sub")
    a = [np.arange(4 * rows, dtype=np.float32).reshape(rows, 4) for rows in (1, 2, 3)]
    b = [np.ones((rows, 4), np.float32) for rows in (1, 2, 3)]
    requests = [
        request("add_sub", fp32("INPUT0", x), fp32("INPUT1", y), id=f"r{i}")
        for i, (x, y) in enumerate(zip(a, b, strict=True))
    ]

    results = await backend.execute(requests)

    assert len(results) == 3
    for i, result in enumerate(results):
        response = ok(result)
        assert (response.model_name, response.model_version) == ("add_sub", "1")
        assert response.id == f"r{i}"
        assert [t.name for t in response.outputs] == ["OUTPUT0", "OUTPUT1"]
        assert all(t.datatype == "FP32" for t in response.outputs)
        np.testing.assert_array_equal(response.output("OUTPUT0").data, a[i] + b[i])
        np.testing.assert_array_equal(response.output("OUTPUT1").data, a[i] - b[i])


async def test_execute_gets_the_request_list_never_a_stacked_tensor(load):
    backend = load("batch_probe")
    inputs = [np.full((rows, 2), rows, np.int32) for rows in (1, 2, 3)]
    requests = [request("batch_probe", InferTensor("INPUT0", "INT32", x)) for x in inputs]

    results = await backend.execute(requests)

    for rows, x, result in zip((1, 2, 3), inputs, results, strict=True):
        response = ok(result)
        np.testing.assert_array_equal(response.output("BATCH_REQUESTS").data, [[3]] * rows)
        np.testing.assert_array_equal(response.output("ROWS").data, [[rows]] * rows)
        np.testing.assert_array_equal(response.output("ECHO").data, x)


def test_inputs_reach_the_model_without_a_copy():
    data = np.arange(4, dtype=np.float32)
    words = np.array([b"a", b"bc"], dtype=np.object_)
    infer = request("m", InferTensor("X", "FP32", data), InferTensor("S", "BYTES", words))

    pb_request = from_infer_request(infer, ["OUT"])

    assert pb_request.inputs()[0].as_numpy() is data
    assert pb_request.inputs()[1].as_numpy() is words
    assert pb_request.requested_output_names() == ["OUT"]


async def test_identity_bytes_round_trip(load):
    backend = load("identity_bytes")
    words = np.array([b"hello", b"", b"\x00\xffbin"], dtype=np.object_)

    (result,) = await backend.execute(
        [request("identity_bytes", InferTensor("INPUT0", "BYTES", words))]
    )

    output = ok(result).output("OUTPUT0")
    assert output.datatype == "BYTES"
    assert output.data.dtype == np.object_
    assert list(output.data) == list(words)


async def test_exception_in_execute_fails_every_request_with_internal(load):
    backend = load("execute_raises")
    requests = [request("execute_raises", fp32("INPUT0", [[1.0]])) for _ in range(3)]

    results = await backend.execute(requests)

    expected = (
        "Failed to process the request(s) for model 'execute_raises_0', "
        "message: ValueError: model exploded"
    )
    assert len(results) == 3
    for result in results:
        assert isinstance(result, InferenceServerError)
        assert result.code == StatusCode.INTERNAL
        assert result.message == expected


async def test_per_request_triton_error_keeps_its_code(load):
    backend = load("per_request_error")
    requests = [
        request("per_request_error", fp32("INPUT0", [[value]])) for value in (1.0, -1.0, 2.0)
    ]

    results = await backend.execute(requests)

    np.testing.assert_array_equal(ok(results[0]).output("OUTPUT0").data, [[2.0]])
    assert isinstance(results[1], InferenceServerError)
    assert (results[1].code, results[1].message) == (StatusCode.NOT_FOUND, "key not found")
    np.testing.assert_array_equal(ok(results[2]).output("OUTPUT0").data, [[4.0]])


async def test_async_execute_is_awaited_on_the_event_loop(load):
    backend = load("async_add")
    requests = [request("async_add", fp32("INPUT0", [[1.0, 2.0]])) for _ in range(2)]

    results = await backend.execute(requests)

    for result in results:
        np.testing.assert_array_equal(ok(result).output("OUTPUT0").data, [[2.0, 3.0]])
    assert backend._model.last_thread == threading.current_thread().name


async def test_compute_infer_is_the_models_execute_and_input_the_conversion(load):
    backend = load("async_add")
    requests = [request("async_add", fp32("INPUT0", [[1.0, 2.0]])) for _ in range(3)]
    calls = []
    execute = backend._model.execute

    async def slow_execute(batch):
        calls.append(len(batch))
        await asyncio.sleep(0.02)
        return await execute(batch)

    backend._model.execute = slow_execute
    results = await backend.execute(requests)
    compute = results.compute
    assert calls == [3]
    assert compute.infer_ns >= 20_000_000  # execute() itself
    assert 0 < compute.input_ns < compute.infer_ns  # building the pb_utils requests


async def test_sync_execute_runs_on_one_dedicated_thread(load):
    backend = load("add_sub")
    seen = set()
    original = backend._model.execute

    def spy(requests):
        seen.add(threading.current_thread().name)
        return original(requests)

    backend._model.execute = spy
    for _ in range(3):
        await backend.execute(
            [request("add_sub", fp32("INPUT0", np.ones((1, 4))), fp32("INPUT1", np.ones((1, 4))))]
        )

    assert len(seen) == 1
    assert seen.pop().startswith("add_sub_0-python")


def test_scan_runs_auto_complete_config_for_a_model_without_config_pbtxt():
    scanned = scan_repository(MODELS, names=["auto_complete"])["auto_complete"]

    assert scanned.available, scanned.error
    config = scanned.config
    assert config.backend == "python"
    assert config.default_model_filename == "model.py"
    assert config.max_batch_size == 4
    assert config.HasField("dynamic_batching")
    assert list(config.dynamic_batching.preferred_batch_size) == [4]
    assert [(i.name, i.data_type, list(i.dims)) for i in config.input] == [
        ("INPUT0", mc.TYPE_FP32, [4])
    ]
    assert [(o.name, o.data_type, list(o.dims)) for o in config.output] == [
        ("OUTPUT0", mc.TYPE_FP32, [4])
    ]
    assert not any(name.startswith("_rayton_python_model_auto_complete") for name in sys.modules)


async def test_auto_completed_model_serves(load):
    backend = load("auto_complete")

    (result,) = await backend.execute([request("auto_complete", fp32("INPUT0", np.ones((2, 4))))])

    np.testing.assert_array_equal(ok(result).output("OUTPUT0").data, np.ones((2, 4)))


def _write_model(root: Path, name: str, source: str, config: str | None = None) -> Path:
    model_dir = root / name
    (model_dir / "1").mkdir(parents=True)
    (model_dir / "1" / "model.py").write_text(source)
    if config is not None:
        (model_dir / "config.pbtxt").write_text(config)
    return model_dir


def test_auto_complete_errors_make_the_model_unavailable(tmp_path):
    conflicting = """
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    @staticmethod
    def auto_complete_config(config):
        config.add_input({"name": "INPUT0", "data_type": "TYPE_INT32", "dims": [4]})
        return config
"""
    no_return = """
class TritonPythonModel:
    @staticmethod
    def auto_complete_config(config):
        config.set_max_batch_size(2)
"""
    _write_model(
        tmp_path,
        "conflicting",
        conflicting,
        'backend: "python"\ninput [ { name: "INPUT0", data_type: TYPE_FP32, dims: [ 4 ] } ]\n',
    )
    _write_model(tmp_path, "no_return", no_return)

    models = scan_repository(tmp_path)

    conflict = models["conflicting"].error
    assert "configuration expects datatype TYPE_FP32 for input 'INPUT0'" in conflict
    assert "ValueError" in conflict
    assert "must return a valid pb.ModelConfig object" in models["no_return"].error


def test_auto_complete_of_a_model_with_a_syntax_error_raises_model_config_error(tmp_path):
    model_dir = _write_model(tmp_path, "broken", "def execute(:\n")
    config = mc.ModelConfig(name="broken", backend="python", default_model_filename="model.py")

    with pytest.raises(ModelConfigError, match="SyntaxError"):
        PythonBackend.auto_complete_config(config, model_dir)


def test_scan_keeps_good_models_next_to_one_with_a_syntax_error(tmp_path):
    shutil.copytree(MODELS / "add_sub", tmp_path / "add_sub")
    _write_model(
        tmp_path,
        "broken",
        "import triton_python_backend_utils as pb_utils\n\nclass TritonPythonModel:\n"
        "    def execute(self, requests)\n        return []\n",
        'backend: "python"\n',
    )

    models = scan_repository(tmp_path)

    assert models["add_sub"].available
    assert not models["broken"].available
    assert "SyntaxError" in models["broken"].error
    assert "model.py" in models["broken"].error


def test_load_of_a_model_with_a_syntax_error_is_unavailable(tmp_path):
    model_dir = _write_model(tmp_path, "broken", "class TritonPythonModel(:\n")
    config = mc.ModelConfig(name="broken", backend="python", default_model_filename="model.py")
    backend = PythonBackend(
        ModelVersion("broken", 1, config, model_dir), InstanceSpec.cpu("broken")
    )

    with pytest.raises(InferenceServerError) as info:
        backend.load()

    assert info.value.code == StatusCode.UNAVAILABLE
    assert "SyntaxError" in info.value.message
    assert str(model_dir / "1" / "model.py") in info.value.message


def test_load_of_a_file_without_triton_python_model_is_unavailable(tmp_path):
    model_dir = _write_model(tmp_path, "empty", "VALUE = 1\n")
    config = mc.ModelConfig(name="empty", backend="python", default_model_filename="model.py")
    backend = PythonBackend(ModelVersion("empty", 1, config, model_dir), InstanceSpec.cpu("empty"))

    with pytest.raises(InferenceServerError, match="does not define class 'TritonPythonModel'"):
        backend.load()


def test_initialize_failure_is_unavailable_with_the_reason():
    backend = PythonBackend(model_version("init_raises"), InstanceSpec.cpu("init_raises"))

    with pytest.raises(InferenceServerError) as info:
        backend.load()

    assert info.value.code == StatusCode.UNAVAILABLE
    assert "RuntimeError: cannot open weights.bin" in info.value.message
    assert "init_raises" in info.value.message


async def test_initialize_args_are_the_strings_triton_passes(load):
    instance = InstanceSpec(name="args_group_0", kind="CPU", device_id=0)
    backend = load("args_check", instance)
    infer = request(
        "args_check",
        fp32("INPUT0", [1.0]),
        id="req-7",
        parameters={
            "sequence_id": 7,
            "sequence_start": True,
            "timeout": 500,
            "priority": 1,
            "custom": "x",
        },
    )

    (result,) = await backend.execute([infer])

    payload = json.loads(ok(result).output("ARGS").data[0])
    args = payload["args"]
    assert set(payload["types"].values()) == {"str"}
    assert args == {
        "model_config": config_to_json_text(backend.config),
        "model_instance_kind": "CPU",
        "model_instance_name": "args_group_0",
        "model_instance_device_id": "0",
        "model_repository": str(MODELS / "args_check"),
        "model_version": "1",
        "model_name": "args_check",
    }
    config = json.loads(args["model_config"])
    assert config["parameters"] == {"greeting": {"string_value": "hello"}}
    assert config["instance_group"][0]["kind"] == "KIND_CPU"
    assert payload["model_dir"] == str(MODELS / "args_check" / "1")
    assert payload["weights"] == "w=42"
    assert payload["parameters"] == [{"custom": "x"}]
    assert payload["request_ids"] == ["req-7"]
    assert payload["correlation_ids"] == [7]
    assert payload["flags"] == [1]
    assert payload["timeouts"] == [500]
    assert payload["requested"] == [["ARGS"]]


async def test_only_requested_outputs_are_returned(load):
    backend = load("add_sub")
    infer = request(
        "add_sub",
        fp32("INPUT0", np.ones((1, 4))),
        fp32("INPUT1", np.ones((1, 4))),
        outputs=[RequestedOutput("OUTPUT1")],
    )

    (result,) = await backend.execute([infer])

    assert [t.name for t in ok(result).outputs] == ["OUTPUT1"]


async def test_bls_exec_goes_through_the_dispatcher(load):
    add_sub = load("add_sub")
    caller = load("bls_caller")
    seen: list[InferRequest] = []

    async def dispatcher(infer: InferRequest) -> InferResponse:
        seen.append(infer)
        if infer.model_name != "add_sub":
            raise InferenceServerError(
                f"Request for unknown model: '{infer.model_name}' is not found",
                StatusCode.NOT_FOUND,
            )
        (result,) = await add_sub.execute([infer])
        if isinstance(result, InferenceServerError):
            raise result
        return result

    set_bls_dispatcher(dispatcher)
    x = np.arange(4, dtype=np.float32)
    y = np.full(4, 10, dtype=np.float32)

    def call(target: str) -> InferRequest:
        name = InferTensor("MODEL_NAME", "BYTES", np.array([target.encode()], dtype=np.object_))
        return request("bls_caller", fp32("INPUT0", x), fp32("INPUT1", y), name)

    good, missing = await caller.execute([call("add_sub"), call("nope")])

    np.testing.assert_array_equal(ok(good).output("OUTPUT0").data, x + y)
    assert isinstance(missing, InferenceServerError)
    assert missing.code == StatusCode.NOT_FOUND
    assert "'nope' is not found" in missing.message
    bls_request = seen[0]
    assert bls_request.model_name == "add_sub"
    assert [(t.name, t.datatype, t.shape) for t in bls_request.inputs] == [
        ("INPUT0", "FP32", (1, 4)),
        ("INPUT1", "FP32", (1, 4)),
    ]
    assert [o.name for o in bls_request.outputs] == ["OUTPUT0"]


async def test_bls_without_a_dispatcher_answers_with_an_error(load):
    caller = load("bls_caller")
    name = InferTensor("MODEL_NAME", "BYTES", np.array([b"add_sub"], dtype=np.object_))

    (result,) = await caller.execute(
        [request("bls_caller", fp32("INPUT0", np.ones(4)), fp32("INPUT1", np.ones(4)), name)]
    )

    assert isinstance(result, InferenceServerError)
    assert result.code == StatusCode.UNAVAILABLE
    assert "BLS is not available" in result.message


async def test_async_bls_with_gather(load):
    add_sub = load("add_sub")
    caller = load("bls_async")

    async def dispatcher(infer: InferRequest) -> InferResponse:
        (result,) = await add_sub.execute([infer])
        return result

    set_bls_dispatcher(dispatcher)
    x = np.arange(4, dtype=np.float32)
    y = np.ones(4, dtype=np.float32)

    (result,) = await caller.execute([request("bls_async", fp32("INPUT0", x), fp32("INPUT1", y))])

    np.testing.assert_array_equal(ok(result).output("SUM").data, x + y)
    np.testing.assert_array_equal(ok(result).output("DIFF").data, x - y)


async def test_non_decoupled_model_may_answer_through_the_response_sender(load):
    backend = load("sender")

    results = await backend.execute([request("sender", fp32("INPUT0", [v])) for v in (1.0, 2.0)])

    assert [ok(r).output("OUTPUT0").data.tolist() for r in results] == [[10.0], [20.0]]


async def streamed(count: float, backend, executions: list | None = None) -> list:
    """Run one request for ``count`` responses of the decoupled test model; what it sent."""
    stream = ResponseStream()
    sent = request("decoupled", fp32("INPUT0", [count]), id="d", responses=stream)
    (result,) = await backend.execute([sent])
    if executions is not None:
        executions.append(result)
    if isinstance(result, InferenceServerError):
        return [result]
    return [item async for item in stream]


async def test_a_decoupled_model_sends_its_responses_after_execute_returned(load):
    backend = load("decoupled")

    items = await streamed(3, backend)

    assert [item.final for item in items] == [False, False, False, True]
    assert [ok(item.result).output("OUTPUT0").data.tolist() for item in items[:3]] == [
        [0.0],
        [1.0],
        [2.0],
    ]
    assert items[-1].result is None  # the final flag came alone
    zero = await streamed(0, backend)
    assert [(item.result, item.final) for item in zero] == [(None, True)]


async def test_a_decoupled_models_error_response_and_broken_returns(load):
    backend = load("decoupled")

    (error,) = await streamed(-1, backend)
    assert error.final and isinstance(error.result, InferenceServerError)
    assert (error.result.code, error.result.message) == (StatusCode.INVALID_ARG, "negative count")
    (raised,) = await streamed(999, backend)
    assert raised.code is StatusCode.INTERNAL and "ValueError: refused on purpose" in raised.message
    (listed,) = await streamed(998, backend)
    assert listed.message == (
        "Failed to process the request(s) for model 'decoupled_0', message: Python model "
        "'decoupled_0' is using the decoupled mode and the execute function must return None."
    )


async def test_a_reader_that_stops_tells_the_decoupled_model(load):
    backend = load("decoupled")
    stream = ResponseStream()
    sent = request("decoupled", fp32("INPUT0", [1000000]), responses=stream)
    await backend.execute([sent])
    async for _ in stream:
        break
    stream.cancel()
    deadline = asyncio.get_running_loop().time() + 10
    while backend._model.cancelled == 0:
        assert asyncio.get_running_loop().time() < deadline, "the model was never told"
        await asyncio.sleep(0.01)


async def test_a_decoupled_request_without_a_reader_runs_and_sends_nowhere(load):
    # Warmup runs requests no client reads: the responses are dropped.
    backend = load("decoupled")
    (result,) = await backend.execute([request("decoupled", fp32("INPUT0", [2]))])
    assert ok(result).outputs == []


async def test_model_can_import_sibling_modules(load):
    backend = load("sibling_import")

    (result,) = await backend.execute([request("sibling_import", fp32("INPUT0", [2.0]))])

    assert ok(result).output("OUTPUT0").data.tolist() == [6.0]
    assert str(MODELS / "sibling_import" / "1") not in sys.path


@pytest.mark.parametrize(
    ("mode", "detail"),
    [
        (0, "Expected a list in the execute return, found type '<class 'tuple'>'."),
        (
            1,
            "Number of InferenceResponse objects do not match the number of InferenceRequest "
            "objects. InferenceRequest(s) size is:2, and InferenceResponse(s) size is:1",
        ),
        (
            2,
            "Expected an 'InferenceResponse' object in the execute function return list, "
            "found type '<class 'str'>'.",
        ),
    ],
)
async def test_execute_return_is_checked_as_triton_does(load, mode, detail):
    backend = load("bad_return")
    requests = [request("bad_return", fp32("INPUT0", [float(mode)])) for _ in range(2)]

    results = await backend.execute(requests)

    for result in results:
        assert isinstance(result, InferenceServerError)
        assert result.code == StatusCode.INTERNAL
        assert result.message == (
            f"Failed to process the request(s) for model 'bad_return_0', message: {detail}"
        )


async def test_none_without_a_sent_response_fails_that_request(load):
    backend = load("bad_return")

    (result,) = await backend.execute([request("bad_return", fp32("INPUT0", [3.0]), id="x")])

    assert isinstance(result, InferenceServerError)
    assert result.code == StatusCode.INTERNAL
    assert "returned no response for request 'x'" in result.message


async def test_rescheduled_requests_run_again(load):
    backend = load("reschedule")
    requests = [request("reschedule", fp32("INPUT0", [0.0]), id=f"r{i}") for i in range(3)]

    results = await backend.execute(requests)

    assert [ok(r).output("OUTPUT0").data.tolist() for r in results] == [[2.0]] * 3


async def test_instances_import_model_py_separately(load):
    first = load("add_sub", InstanceSpec("add_sub_0", "CPU", 0))
    second = load("add_sub", InstanceSpec("add_sub_1", "CPU", 0))

    assert type(first._model) is not type(second._model)
    assert first._module_name != second._module_name
    for backend in (first, second):
        (result,) = await backend.execute(
            [request("add_sub", fp32("INPUT0", np.ones((1, 4))), fp32("INPUT1", np.ones((1, 4))))]
        )
        ok(result)


def test_unload_calls_finalize_and_forgets_the_module(caplog):
    backend = PythonBackend(model_version("add_sub"), InstanceSpec.cpu("add_sub"))
    backend.load()
    assert backend._module_name in sys.modules

    with caplog.at_level("INFO", logger="rayton.python_model"):
        backend.unload()

    assert "add_sub finalized" in caplog.text
    assert backend._module_name not in sys.modules


async def test_execute_before_load_is_unavailable():
    backend = PythonBackend(model_version("add_sub"), InstanceSpec.cpu("add_sub"))

    with pytest.raises(InferenceServerError) as info:
        await backend.execute([])

    assert info.value.code == StatusCode.UNAVAILABLE


async def test_outputs_take_the_config_datatype_and_unrequested_ones_are_pruned(load, tmp_path):
    source = """
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        outputs = [
            pb_utils.Tensor("OUT", np.array([1.5, 2.5])),  # float64 for a TYPE_FP32 output
            pb_utils.Tensor("EXTRA", np.array([7], dtype=np.int64)),  # not in the config
        ]
        return [pb_utils.InferenceResponse(outputs) for _ in requests]
"""
    config = """
backend: "python"
input [ { name: "IN", data_type: TYPE_FP32, dims: [ 1 ] } ]
output [ { name: "OUT", data_type: TYPE_FP32, dims: [ 2 ] } ]
"""
    _write_model(tmp_path, "dtypes", source, config)
    backend = load("dtypes", repo=tmp_path)

    default, explicit = await backend.execute(
        [
            request("dtypes", fp32("IN", [1.0])),
            request(
                "dtypes",
                fp32("IN", [1.0]),
                outputs=[RequestedOutput("OUT"), RequestedOutput("EXTRA")],
            ),
        ]
    )

    assert [(t.name, t.datatype, t.data.dtype) for t in ok(default).outputs] == [
        ("OUT", "FP32", np.float32)
    ]
    assert [(t.name, t.datatype) for t in ok(explicit).outputs] == [
        ("OUT", "FP32"),
        ("EXTRA", "INT64"),
    ]


async def test_cancelled_execute_is_visible_to_the_model(load, tmp_path):
    source = """
import threading
import time
import triton_python_backend_utils as pb_utils

started = threading.Event()
observed = threading.Event()

class TritonPythonModel:
    def execute(self, requests):
        started.set()
        deadline = time.monotonic() + 10
        while not requests[0].is_cancelled() and time.monotonic() < deadline:
            time.sleep(0.005)
        if requests[0].is_cancelled():
            observed.set()
        return [pb_utils.InferenceResponse([]) for _ in requests]
"""
    config = """
backend: "python"
input [ { name: "IN", data_type: TYPE_FP32, dims: [ 1 ] } ]
output [ { name: "OUT", data_type: TYPE_FP32, dims: [ 1 ] } ]
"""
    _write_model(tmp_path, "cancellable", source, config)
    backend = load("cancellable", repo=tmp_path)
    module = sys.modules[backend._module_name]

    task = asyncio.ensure_future(backend.execute([request("cancellable", fp32("IN", [1.0]))]))
    await asyncio.get_running_loop().run_in_executor(None, module.started.wait, 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task

    assert await asyncio.get_running_loop().run_in_executor(None, module.observed.wait, 5)


class _ListChain:
    """The batcher's side of run_batches: hands out queued batches, records what came back."""

    def __init__(self, *queued: list[InferRequest]) -> None:
        self.queued = list(queued)
        self.finished_with: list[tuple[list[InferRequest], object, int]] = []

    def next_batch(self) -> list[InferRequest]:
        return self.queued.pop(0) if self.queued else []

    def finished(self, requests, outcome) -> None:
        self.finished_with.append((list(requests), outcome, threading.get_ident()))


THREAD_RECORDING = """
import threading
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def initialize(self, args):
        self.threads = [threading.get_ident()]

    def execute(self, requests):
        self.threads.append(threading.get_ident())
        out = []
        for request in requests:
            data = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            if data[0] < 0:
                raise ValueError("negative")
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", data)]))
        return out
"""
THREAD_RECORDING_CONFIG = """
backend: "python"
input [ { name: "IN", data_type: TYPE_FP32, dims: [ 1 ] } ]
output [ { name: "OUT", data_type: TYPE_FP32, dims: [ 1 ] } ]
"""


async def test_queued_batches_run_back_to_back_on_the_initialize_thread(load, tmp_path):
    _write_model(tmp_path, "recording", THREAD_RECORDING, THREAD_RECORDING_CONFIG)
    backend = load("recording", repo=tmp_path)
    first = [request("recording", fp32("IN", [1.0]))]
    second = [request("recording", fp32("IN", [2.0])), request("recording", fp32("IN", [3.0]))]
    failing = [request("recording", fp32("IN", [-1.0]))]
    chain = _ListChain(second, failing)

    await backend.run_batches(first, chain)

    threads = backend._model.threads
    assert len(set(threads)) == 1 and len(threads) == 4  # initialize and three executes
    assert [requests for requests, _, _ in chain.finished_with] == [first, second, failing]
    assert all(thread == threads[0] for _, _, thread in chain.finished_with)
    outputs = [[ok(r).outputs[0].data.tolist() for r in o] for _, o, _ in chain.finished_with[:2]]
    assert outputs == [[[1.0]], [[2.0], [3.0]]]
    (error,) = chain.finished_with[2][1]
    assert isinstance(error, InferenceServerError) and error.code is StatusCode.INTERNAL
    assert "negative" in error.message


async def test_an_async_execute_runs_its_batch_on_the_loop_and_leaves_the_queue(load, tmp_path):
    source = THREAD_RECORDING.replace("def execute", "async def execute")
    _write_model(tmp_path, "recording_async", source, THREAD_RECORDING_CONFIG)
    backend = load("recording_async", repo=tmp_path)
    queued = [request("recording_async", fp32("IN", [2.0]))]
    chain = _ListChain(queued)

    await backend.run_batches([request("recording_async", fp32("IN", [1.0]))], chain)

    assert backend._model.threads[1:] == [threading.get_ident()]
    assert chain.queued == [queued]  # the batcher forms the next batch on the loop
    ((_, outcome, thread),) = chain.finished_with
    assert thread == threading.get_ident()
    assert ok(outcome[0]).outputs[0].data.tolist() == [1.0]


async def test_a_batch_for_an_unloaded_instance_is_reported_unavailable(load, tmp_path):
    _write_model(tmp_path, "gone", THREAD_RECORDING, THREAD_RECORDING_CONFIG)
    backend = load("gone", repo=tmp_path)
    backend.unload()
    chain = _ListChain()
    requests = [request("gone", fp32("IN", [1.0]))]

    await backend.run_batches(requests, chain)

    ((reported, outcome, _),) = chain.finished_with
    assert reported == requests
    assert isinstance(outcome, InferenceServerError) and outcome.code is StatusCode.UNAVAILABLE


async def test_bls_to_a_decoupled_model_iterates_its_responses_in_process(load):
    from deployments.core.single_model import SingleModel
    from repo_adapter.python_backend.runtime import set_bls_stream_dispatcher

    scanned = scan_model(MODELS / "decoupled")
    target = SingleModel(
        scanned.config, MODELS / "decoupled", scanned.versions, {}, InstanceSpec.cpu("decoupled")
    )
    set_bls_stream_dispatcher(target.infer_stream)
    try:
        backend = load("bls_decoupled")
        (three,) = await backend.execute([request("bls_decoupled", fp32("COUNT", [3.0]))])
    finally:
        set_bls_stream_dispatcher(None)
        await target.close()
    assert ok(three).output("VALUES").data.tolist() == [0.0, 1.0, 2.0]
    assert ok(three).output("RESPONSES").data.tolist() == [4]
