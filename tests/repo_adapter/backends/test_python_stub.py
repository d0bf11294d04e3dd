"""Python model instances in stub processes of their own (``InstanceSpec.own_process``)."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from repo_adapter.backends.base import InstanceSpec, ModelVersion
from repo_adapter.backends.python import PythonBackend
from repo_adapter.backends.python_stub import PythonStubBackend
from repo_adapter.errors import InferenceServerError, StatusCode
from repo_adapter.inference_types import InferRequest, InferResponse, InferTensor
from repo_adapter.python_backend import collect_metrics, set_bls_dispatcher
from repo_adapter.python_backend.runtime import set_bls_stream_dispatcher
from repo_adapter.repository import scan_model
from repo_adapter.response_stream import ResponseStream

MODELS = Path(__file__).parent / "python_models"
RESTART_S = 10.0  # the bound for a crashed model to serve again

PROBE = """
import os
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.family = pb_utils.MetricFamily(
            name="probe_requests", description="requests seen", kind=pb_utils.MetricFamily.COUNTER
        )
        self.counter = self.family.Metric(labels={"model": "probe"})
        pb_utils.Logger.log_info("probe initialized")

    def execute(self, requests):
        responses = []
        for request in requests:
            data = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            if np.any(data < 0):
                os._exit(3)  # the stub process goes, mid-batch
            if np.any(data == 7):
                raise ValueError("seven is refused")
            self.counter.increment(1)
            pid = np.full(data.shape[:1] + (1,), os.getpid(), np.int64)
            responses.append(
                pb_utils.InferenceResponse(
                    [pb_utils.Tensor("OUT", data), pb_utils.Tensor("PID", pid)]
                )
            )
        return responses

    def finalize(self):
        marker = os.environ.get("PROBE_FINALIZED")
        if marker:
            with open(marker, "w") as f:
                f.write("finalized")
"""
PROBE_CONFIG = """
backend: "python"
max_batch_size: 8
input [ { name: "IN" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [
  { name: "OUT" data_type: TYPE_FP32 dims: [ -1 ] },
  { name: "PID" data_type: TYPE_INT64 dims: [ 1 ] }
]
"""


def model_version(name: str, repo: Path = MODELS) -> ModelVersion:
    scanned = scan_model(repo / name)
    assert scanned.available, scanned.error
    return scanned.model_version(1)


def write_probe(root: Path) -> Path:
    (root / "probe" / "1").mkdir(parents=True)
    (root / "probe" / "config.pbtxt").write_text(PROBE_CONFIG)
    (root / "probe" / "1" / "model.py").write_text(PROBE)
    return root


@pytest.fixture(autouse=True)
def no_dispatcher():
    set_bls_dispatcher(None)
    yield
    set_bls_dispatcher(None)


def fp32(name: str, values) -> InferTensor:
    return InferTensor(name, "FP32", np.asarray(values, dtype=np.float32))


def probe_request(*values: float) -> InferRequest:
    return InferRequest("probe", [fp32("IN", [list(values)])])


def ok(result) -> InferResponse:
    assert isinstance(result, InferResponse), result
    return result


class _ListChain:
    """The batcher's side of run_batches: hands out queued batches, records what came back."""

    def __init__(self, *queued: list[InferRequest]) -> None:
        self.queued = list(queued)
        self.finished_with: list[tuple[list[InferRequest], object]] = []

    def next_batch(self) -> list[InferRequest]:
        return self.queued.pop(0) if self.queued else []

    def finished(self, requests, outcome) -> None:
        self.finished_with.append((list(requests), outcome))


async def test_add_sub_runs_in_another_process_with_the_same_results(load):
    in_process = PythonBackend(model_version("add_sub"), InstanceSpec.cpu("add_sub"))
    in_process.load()
    stub = load("add_sub")
    a = np.arange(8, dtype=np.float32).reshape(2, 4)
    requests = [InferRequest("add_sub", [fp32("INPUT0", a), fp32("INPUT1", np.ones((2, 4)))])]
    try:
        (expected,) = await in_process.execute(requests)
        (result,) = await stub.execute(requests)
    finally:
        in_process.unload()

    assert [(t.name, t.datatype) for t in ok(result).outputs] == [
        (t.name, t.datatype) for t in ok(expected).outputs
    ]
    for got, want in zip(result.outputs, expected.outputs, strict=True):
        np.testing.assert_array_equal(got.data, want.data)
    assert stub._stub is not None and stub._stub.process.pid != os.getpid()


async def test_large_and_bytes_tensors_cross_both_ways(load):
    backend = load("identity_bytes")
    strings = np.array([[b"a" * 100_000, b"\x00binary"]], dtype=np.object_)

    (result,) = await backend.execute(
        [InferRequest("identity_bytes", [InferTensor("INPUT0", "BYTES", strings)])]
    )

    np.testing.assert_array_equal(ok(result).outputs[0].data, strings)


async def test_a_large_batch_goes_through_shared_memory_and_back(load, tmp_path):
    backend = load("probe", write_probe(tmp_path))
    images = [np.random.default_rng(i).random((1, 300_000), np.float32) for i in range(3)]
    requests = [InferRequest("probe", [InferTensor("IN", "FP32", image)]) for image in images]

    results = await backend.execute(requests)

    for image, result in zip(images, results, strict=True):
        np.testing.assert_array_equal(ok(result).output("OUT").data, image)


async def test_a_failing_execute_fails_its_batch_and_the_instance_keeps_serving(load, tmp_path):
    backend = load("probe", write_probe(tmp_path))

    failed = await backend.execute([probe_request(7.0), probe_request(1.0)])
    (after,) = await backend.execute([probe_request(2.0)])

    for result in failed:
        assert isinstance(result, InferenceServerError) and result.code is StatusCode.INTERNAL
        assert "ValueError: seven is refused" in result.message
    assert ok(after).output("OUT").data.tolist() == [[2.0]]


async def test_a_crashing_model_fails_its_batch_and_is_started_again(load, tmp_path):
    backend = load("probe", write_probe(tmp_path))
    (before,) = await backend.execute([probe_request(1.0)])
    first_pid = int(ok(before).output("PID").data[0, 0])

    with pytest.raises(InferenceServerError) as crashed:  # the whole batch fails
        await backend.execute([probe_request(-1.0), probe_request(2.0)])

    assert crashed.value.code is StatusCode.INTERNAL
    assert "stopped while running this request" in crashed.value.message
    assert "exited with code 3" in crashed.value.message
    deadline = time.monotonic() + RESTART_S
    while True:
        try:
            (result,) = await backend.execute([probe_request(3.0)])
            break
        except InferenceServerError as err:
            assert err.code is StatusCode.UNAVAILABLE and "restarting" in err.message
        assert time.monotonic() < deadline, "the crashed instance did not serve again"
        await asyncio.sleep(0.1)
    assert result.output("OUT").data.tolist() == [[3.0]]
    assert int(result.output("PID").data[0, 0]) != first_pid


async def test_batches_queued_behind_a_crash_fail_fast_while_it_restarts(load, tmp_path):
    backend = load("probe", write_probe(tmp_path))
    crash = [probe_request(-1.0)]
    queued = [probe_request(5.0)]
    chain = _ListChain(queued)

    await backend.run_batches(crash, chain)
    retry = _ListChain()
    await backend.run_batches(queued, retry)  # as the batcher goes on with its queue

    ((crashed, outcome),) = chain.finished_with
    assert crashed == crash and isinstance(outcome, InferenceServerError)
    assert outcome.code is StatusCode.INTERNAL
    assert chain.queued == [queued]  # never handed to the dying stub
    ((retried, unavailable),) = retry.finished_with
    assert retried == queued and isinstance(unavailable, InferenceServerError)
    assert unavailable.code is StatusCode.UNAVAILABLE and "restarting" in unavailable.message


async def test_chained_batches_run_one_after_another_in_the_stub(load, tmp_path):
    backend = load("probe", write_probe(tmp_path))
    first = [probe_request(1.0)]
    second = [probe_request(2.0), probe_request(3.0)]
    failing = [probe_request(7.0)]
    chain = _ListChain(second, failing)

    await backend.run_batches(first, chain)

    assert [requests for requests, _ in chain.finished_with] == [first, second, failing]
    values = [[ok(r).output("OUT").data.tolist() for r in o] for _, o in chain.finished_with[:2]]
    assert values == [[[[1.0]]], [[[2.0]], [[3.0]]]]
    (error,) = chain.finished_with[2][1]
    assert isinstance(error, InferenceServerError) and "seven" in error.message


def test_a_failing_initialize_makes_the_load_unavailable_with_the_reason():
    instance = InstanceSpec("init_raises_0", own_process=True)
    backend = PythonBackend.for_instance(model_version("init_raises"), instance)

    with pytest.raises(InferenceServerError) as raised:
        backend.load()

    assert raised.value.code is StatusCode.UNAVAILABLE
    assert "failed to initialize" in raised.value.message


async def test_bls_calls_from_the_stub_run_on_the_hosts_dispatcher(load):
    add_sub = PythonBackend(model_version("add_sub"), InstanceSpec.cpu("add_sub"))
    add_sub.load()
    caller = load("bls_caller")
    seen: list[tuple[str, int]] = []

    async def dispatcher(infer: InferRequest) -> InferResponse:
        seen.append((infer.model_name, threading.get_ident()))
        if infer.model_name != "add_sub":
            raise InferenceServerError(
                f"Request for unknown model: '{infer.model_name}' is not found",
                StatusCode.NOT_FOUND,
            )
        (result,) = await add_sub.execute([infer])
        return result

    set_bls_dispatcher(dispatcher)
    x, y = np.arange(4, dtype=np.float32), np.full(4, 10, dtype=np.float32)

    def call(target: str) -> InferRequest:
        name = InferTensor("MODEL_NAME", "BYTES", np.array([target.encode()], dtype=np.object_))
        return InferRequest("bls_caller", [fp32("INPUT0", x), fp32("INPUT1", y), name])

    try:
        good, missing = await caller.execute([call("add_sub"), call("nope")])
    finally:
        add_sub.unload()

    np.testing.assert_array_equal(ok(good).output("OUTPUT0").data, x + y)
    assert isinstance(missing, InferenceServerError) and missing.code is StatusCode.NOT_FOUND
    assert [name for name, _ in seen] == ["add_sub", "nope"]
    assert {thread for _, thread in seen} == {threading.get_ident()}  # the host's loop


async def test_async_bls_with_gather_from_the_stub(load):
    add_sub = PythonBackend(model_version("add_sub"), InstanceSpec.cpu("add_sub"))
    add_sub.load()
    caller = load("bls_async")

    async def dispatcher(infer: InferRequest) -> InferResponse:
        (result,) = await add_sub.execute([infer])
        return result

    set_bls_dispatcher(dispatcher)
    x, y = np.arange(4, dtype=np.float32), np.ones(4, dtype=np.float32)
    try:
        (result,) = await caller.execute(
            [InferRequest("bls_async", [fp32("INPUT0", x), fp32("INPUT1", y)])]
        )
    finally:
        add_sub.unload()

    np.testing.assert_array_equal(ok(result).output("SUM").data, x + y)
    np.testing.assert_array_equal(ok(result).output("DIFF").data, x - y)


async def test_bls_without_a_dispatcher_in_the_host_is_unavailable(load):
    caller = load("bls_caller")
    name = InferTensor("MODEL_NAME", "BYTES", np.array([b"add_sub"], dtype=np.object_))

    (result,) = await caller.execute(
        [InferRequest("bls_caller", [fp32("INPUT0", np.ones(4)), fp32("INPUT1", np.ones(4)), name])]
    )

    assert isinstance(result, InferenceServerError) and result.code is StatusCode.UNAVAILABLE
    assert "BLS is not available" in result.message


async def test_log_lines_and_metrics_of_the_stub_reach_the_host(load, tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="rayton.python_model")
    backend = load("probe", write_probe(tmp_path))
    await backend.execute([probe_request(1.0), probe_request(2.0)])

    families = {family["name"]: family for family in collect_metrics()}

    assert "probe initialized" in caplog.messages
    (sample,) = families["probe_requests"]["samples"]
    assert sample["labels"] == {"model": "probe"} and sample["value"] == 2.0
    backend.unload()
    assert "probe_requests" not in {family["name"] for family in collect_metrics()}


async def test_unload_calls_finalize_and_ends_the_process(tmp_path, monkeypatch):
    marker = tmp_path / "finalized.txt"
    monkeypatch.setenv("PROBE_FINALIZED", str(marker))
    instance = InstanceSpec("probe_0", own_process=True)
    backend = PythonBackend.for_instance(model_version("probe", write_probe(tmp_path)), instance)
    backend.load()
    assert isinstance(backend, PythonStubBackend) and backend._stub is not None
    process = backend._stub.process

    backend.unload()

    assert marker.read_text() == "finalized"
    assert process.poll() is not None
    with pytest.raises(InferenceServerError) as unloaded:
        await backend.execute([probe_request(1.0)])
    assert unloaded.value.code is StatusCode.UNAVAILABLE
    assert "is not loaded" in unloaded.value.message


HOST_SCRIPT = """
import sys, time
from repo_adapter.backends.base import InstanceSpec
from repo_adapter.backends.python import PythonBackend
from repo_adapter.repository import scan_model
from repo_adapter.response_stream import ResponseStream

model = scan_model(__import__("pathlib").Path(sys.argv[1])).model_version(1)
backend = PythonBackend.for_instance(model, InstanceSpec("add_sub_0", own_process=True))
backend.load()
print(backend._stub.process.pid, flush=True)
time.sleep(600)
"""


def test_a_stub_never_outlives_its_host(tmp_path):
    script = tmp_path / "host.py"
    script.write_text(HOST_SCRIPT)
    host = subprocess.Popen(
        [sys.executable, str(script), str(MODELS / "add_sub")],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    try:
        stub_pid = int(host.stdout.readline())
        assert Path(f"/proc/{stub_pid}").exists()
        host.send_signal(signal.SIGKILL)
        host.wait(10)
        deadline = time.monotonic() + 10
        while _alive(stub_pid):
            assert time.monotonic() < deadline, "the stub outlived its host"
            time.sleep(0.05)
    finally:
        host.kill()
        host.wait()


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


BLS_FORWARD = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            data = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            call = pb_utils.InferenceRequest(
                model_name="probe",
                requested_output_names=["OUT"],
                inputs=[pb_utils.Tensor("IN", data)],
            )
            result = call.exec()
            if result.has_error():
                raise pb_utils.TritonModelException(result.error().message())
            out = pb_utils.get_output_tensor_by_name(result, "OUT").as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", out * 2)]))
        return responses
"""
BLS_FORWARD_CONFIG = """
backend: "python"
max_batch_size: 8
input [ { name: "IN" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ -1 ] } ]
"""


async def test_large_tensors_of_a_blocking_bls_call_cross_beside_the_batch(load, tmp_path):
    repo = write_probe(tmp_path)
    (repo / "forward" / "1").mkdir(parents=True)
    (repo / "forward" / "config.pbtxt").write_text(BLS_FORWARD_CONFIG)
    (repo / "forward" / "1" / "model.py").write_text(BLS_FORWARD)
    probe = PythonBackend(model_version("probe", repo), InstanceSpec.cpu("probe"))
    probe.load()
    forward = load("forward", repo)

    async def dispatcher(infer: InferRequest) -> InferResponse:
        (result,) = await probe.execute([infer])
        return result

    set_bls_dispatcher(dispatcher)
    images = [np.random.default_rng(i).random((1, 200_000), np.float32) for i in range(2)]
    try:
        results = await forward.execute(
            [InferRequest("forward", [InferTensor("IN", "FP32", image)]) for image in images]
        )
    finally:
        probe.unload()

    for image, result in zip(images, results, strict=True):
        np.testing.assert_array_equal(ok(result).output("OUT").data, image * 2)


async def test_unload_while_the_crashed_stub_restarts(tmp_path):
    instance = InstanceSpec("probe_0", own_process=True)
    backend = PythonBackend.for_instance(model_version("probe", write_probe(tmp_path)), instance)
    backend.load()
    assert isinstance(backend, PythonStubBackend) and backend._stub is not None
    crashed = backend._stub.process

    with pytest.raises(InferenceServerError):
        await backend.execute([probe_request(-1.0)])
    backend.unload()  # the restart may be under way

    assert crashed.poll() == 3
    deadline = time.monotonic() + RESTART_S
    while backend._restarting.locked():  # a restart under way gives up, ending its stub
        assert time.monotonic() < deadline
        await asyncio.sleep(0.05)
    assert backend._stub is None


async def read_all(stream: ResponseStream) -> list:
    return [item async for item in stream]


async def test_a_decoupled_models_responses_cross_from_its_process_as_sent(load):
    backend = load("decoupled")
    streams = [ResponseStream() for _ in range(3)]
    counts = [5.0, 0.0, -1.0]
    requests = [
        InferRequest("decoupled", [fp32("INPUT0", [count])], responses=stream)
        for count, stream in zip(counts, streams, strict=True)
    ]

    results = await backend.execute(requests)

    assert [ok(result).outputs for result in results] == [[], [], []]
    many, none, failed = [await read_all(stream) for stream in streams]
    assert [ok(i.result).output("OUTPUT0").data.tolist() for i in many[:-1]] == [
        [0.0],
        [1.0],
        [2.0],
        [3.0],
        [4.0],
    ]
    assert (many[-1].result, many[-1].final) == (None, True)
    assert [(i.result, i.final) for i in none] == [(None, True)]
    assert failed[0].final and failed[0].result.message == "negative count"


async def test_a_decoupled_reader_that_stops_tells_the_model_in_its_process(load, caplog):
    backend = load("decoupled")
    stream = ResponseStream()
    await backend.execute(
        [InferRequest("decoupled", [fp32("INPUT0", [1000000])], responses=stream)]
    )
    async for _ in stream:
        break
    stream.cancel()
    deadline = time.monotonic() + 10
    while "the client stopped reading" not in caplog.text:
        assert time.monotonic() < deadline, "the model was never told"
        await asyncio.sleep(0.05)


@pytest.mark.parametrize("caller", ["bls_decoupled", "bls_decoupled_async"])
async def test_bls_to_a_decoupled_model_iterates_its_responses_from_the_stub(load, caller):
    from deployments.core.single_model import SingleModel

    scanned = scan_model(MODELS / "decoupled")
    target = SingleModel(
        scanned.config, MODELS / "decoupled", scanned.versions, {}, InstanceSpec.cpu("decoupled")
    )
    set_bls_stream_dispatcher(target.infer_stream)
    try:
        backend = load(caller)
        three, zero, failed = await backend.execute(
            [InferRequest(caller, [fp32("COUNT", [n])]) for n in (3.0, 0.0, -1.0)]
        )
    finally:
        set_bls_stream_dispatcher(None)
        await target.close()
    assert ok(three).output("VALUES").data.tolist() == [0.0, 1.0, 2.0]
    assert ok(three).output("RESPONSES").data.tolist() == [4]  # the empty final one too
    assert ok(zero).output("RESPONSES").data.tolist() == [1]
    assert isinstance(failed, InferenceServerError) and failed.message == "negative count"
