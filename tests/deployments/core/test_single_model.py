"""SingleModel without Ray: versions, validation, batching, reshapes, outputs, statistics.

Real backends on real model files (the python backend on the test repository), the real
Ray-free batcher; only the ``@serve.batch`` admission stage is absent (it needs a replica).
"""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import numpy as np
import pytest

from deployments.core.single_model import SingleModel
from repo_adapter.backends import InstanceSpec
from repo_adapter.errors import InferenceServerError, StatusCode
from repo_adapter.inference_types import InferRequest, InferTensor, RequestedOutput
from repo_adapter.model_state import ModelState, VersionState
from repo_adapter.repository import scan_model
from tests.support.live_models import write_warm_model

REPOSITORY = Path(__file__).parents[1] / "model_repository"
PYTHON_MODELS = Path(__file__).parents[2] / "repo_adapter" / "backends" / "python_models"


def load(model_dir: Path, versions: list[int] | None = None) -> SingleModel:
    scanned = scan_model(model_dir)
    assert scanned.available, scanned.error
    return SingleModel(
        scanned.config,
        model_dir,
        versions or scanned.versions,
        scanned.labels,
        InstanceSpec.cpu(scanned.name),
    )


@pytest.fixture
def recorder():
    model = load(REPOSITORY / "batch_recorder")
    yield model
    asyncio.run(model.close())


def rows_request(rows: int, value: float = 1.0, outputs: list[str] | None = None) -> InferRequest:
    data = np.full((rows, 2), value, np.float32)
    return InferRequest(
        "batch_recorder",
        [InferTensor("IN", "FP32", data)],
        outputs=[RequestedOutput(name) for name in outputs or []],
    )


async def test_concurrent_requests_share_executions_up_to_max_batch_size(recorder):
    responses = await asyncio.gather(*(recorder.infer(rows_request(3, i)) for i in range(4)))
    for i, response in enumerate(responses):
        np.testing.assert_array_equal(response.output("OUT").data, np.full((3, 2), i))
        assert response.model_name == "batch_recorder" and response.model_version == "1"
    # 4 requests of 3 rows, max_batch_size 8: never more than 2 requests (6 rows) per execution.
    rows = [int(r.output("BATCH_ROWS").data[0, 0]) for r in responses]
    assert max(rows) <= 8 and max(rows) > 3  # batched, within the row budget
    stats = recorder.statistics()[0]
    assert stats["inference_count"] == 12 and stats["inference_stats"]["success"]["count"] == 4
    assert stats["execution_count"] < 4


async def test_requested_outputs_only_in_request_order(recorder):
    response = await recorder.infer(rows_request(1, outputs=["BATCH_REQUESTS", "OUT"]))
    assert [t.name for t in response.outputs] == ["BATCH_REQUESTS", "OUT"]


async def test_invalid_requests_fail_before_the_queue(recorder):
    bad_shape = InferRequest("batch_recorder", [InferTensor("IN", "FP32", np.zeros((1, 3)))])
    with pytest.raises(InferenceServerError) as err:
        await recorder.infer(bad_shape)
    assert err.value.code == StatusCode.INVALID_ARG
    with pytest.raises(InferenceServerError, match="batch-size must be <= 8"):
        await recorder.infer(rows_request(9))
    assert recorder.statistics()[0]["execution_count"] == 0


async def test_unknown_version_is_not_found(recorder):
    request = rows_request(1)
    request.model_version = "7"
    with pytest.raises(InferenceServerError) as err:
        await recorder.infer(request)
    assert err.value.code == StatusCode.NOT_FOUND
    assert not recorder.is_ready("7") and recorder.is_ready("1") and recorder.is_ready()


def test_metadata_config_and_state(recorder):
    metadata = recorder.metadata()
    assert metadata["versions"] == ["1"]
    assert metadata["inputs"] == [{"name": "IN", "datatype": "FP32", "shape": [-1, 2]}]
    assert recorder.model_config()["max_batch_size"] == 8
    assert recorder.state() == {"1": VersionState(ModelState.READY)}


async def test_a_version_that_fails_to_load_is_unavailable_with_its_reason(tmp_path):
    model_dir = tmp_path / "init_raises"
    shutil.copytree(PYTHON_MODELS / "init_raises", model_dir)
    model = load(model_dir)
    try:
        assert not model.is_ready()
        state = model.state()["1"]
        assert state.state is ModelState.UNAVAILABLE and state.reason
        with pytest.raises(InferenceServerError) as err:
            await model.infer(InferRequest("init_raises", []))
        assert err.value.code == StatusCode.UNAVAILABLE
        with pytest.raises(InferenceServerError, match="is not available"):
            model.statistics()
    finally:
        await model.close()


async def test_close_unloads_every_version(recorder):
    await recorder.close()
    assert not recorder.is_ready()


async def test_a_version_is_ready_only_after_its_warmup_and_fails_with_it(tmp_path):
    good = scan_model(write_warm_model(tmp_path / "good"))
    model = SingleModel(good.config, good.path, good.versions, {}, InstanceSpec.cpu("warm"))
    assert model.ready_versions == [1]
    assert len((good.path / "calls.jsonl").read_text().splitlines()) == 3  # warmed before ready
    await model.close()

    bad = scan_model(write_warm_model(tmp_path / "bad", fail_on_zeros=True))
    failed = SingleModel(bad.config, bad.path, bad.versions, {}, InstanceSpec.cpu("warm"))
    assert failed.ready_versions == []
    (state,) = failed.state().values()
    assert state.state is ModelState.UNAVAILABLE and "warmup 'zeros'" in state.reason


async def test_reshapes_with_variable_dimensions_follow_cores_rule(tmp_path):
    """Input reshape applied once (the backend sees it), wildcards carried over in order, and
    outputs reported in their dims: two variable dims, which no second reshape could infer."""
    from examples.builders import save_onnx_identity

    model_dir = tmp_path / "reshaped"
    (model_dir / "1").mkdir(parents=True)
    save_onnx_identity(model_dir / "1" / "model.onnx", shape=("batch", "a", "b", 1))
    (model_dir / "config.pbtxt").write_text(
        'backend: "onnxruntime" max_batch_size: 4\n'
        'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1, -1 ]'
        " reshape: { shape: [ -1, -1, 1 ] } } ]\n"
        'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1, -1 ]'
        " reshape: { shape: [ -1, -1, 1 ] } } ]\n"
    )
    model = load(model_dir)
    try:
        data = np.arange(2 * 3 * 5, dtype=np.float32).reshape(2, 3, 5)
        response = await model.infer(
            InferRequest("reshaped", [InferTensor("INPUT0", "FP32", data)])
        )
        np.testing.assert_array_equal(response.output("OUTPUT0").data, data)
    finally:
        await model.close()


def count_request(count: float, request_id: str = "") -> InferRequest:
    return InferRequest(
        "decoupled", [InferTensor("INPUT0", "FP32", np.array([count], np.float32))], id=request_id
    )


async def test_a_decoupled_models_responses_stream_through_the_batcher():
    model = load(PYTHON_MODELS / "decoupled")
    try:
        items = [item async for item in model.infer_stream(count_request(2, "r"))]
        with pytest.raises(InferenceServerError) as refused:
            await model.infer(count_request(1))
        failed = [item async for item in model.infer_stream(count_request(999))]
        statistics = model.statistics()[0]["inference_stats"]
    finally:
        await model.close()
    responses = [item.result for item in items[:2]]
    assert [r.output("OUTPUT0").data.tolist() for r in responses] == [[0.0], [1.0]]
    assert {(r.model_name, r.model_version, r.id) for r in responses} == {("decoupled", "1", "r")}
    assert [(item.result, item.final) for item in items[2:]] == [(None, True)]
    assert refused.value.code is StatusCode.UNSUPPORTED  # a stream reads it, not infer
    assert len(failed) == 1 and failed[0].final
    assert "ValueError: refused on purpose" in failed[0].result.message
    assert (statistics["success"]["count"], statistics["fail"]["count"]) == (1, 1)


async def test_a_decoupled_reader_that_stops_cancels_its_request():
    model = load(PYTHON_MODELS / "decoupled")
    try:
        stream = model.infer_stream(count_request(1000000))
        first = await anext(stream)
        await stream.aclose()  # the client went away
        assert first.result.output("OUTPUT0").data.tolist() == [0.0]
        backend = model.runners[1].backends[0]
        for _ in range(200):
            if backend._model.cancelled:
                break
            await asyncio.sleep(0.05)
        assert backend._model.cancelled == 1
    finally:
        await model.close()


def step(sequence, value: int, start: bool = False, end: bool = False) -> InferRequest:
    parameters = {"sequence_start": start, "sequence_end": end}
    if sequence is not None:
        parameters["sequence_id"] = sequence
    return InferRequest(
        "sequence_sum",
        [InferTensor("IN", "INT32", np.array([[value]], np.int32))],
        parameters=parameters,
    )


def summed(response) -> tuple[int, dict]:
    import json

    seen = json.loads(response.output("SEEN").data[0, 0])
    return int(response.output("SUM").data[0, 0]), seen


async def test_a_sequence_model_gets_its_control_inputs_and_keeps_each_sequences_state():
    model = load(REPOSITORY / "sequence_sum")
    try:
        first = summed(await model.infer(step(7, 5, start=True)))
        middle = summed(await model.infer(step(7, 3)))
        last = summed(await model.infer(step(7, 2, end=True)))
    finally:
        await model.close()
    assert [first[0], middle[0], last[0]] == [5, 8, 10]
    assert first[1]["START"] == ["<i4", [1, 1], [[1]]]
    assert first[1]["END"] == ["<f4", [1, 1], [[0.0]]]
    assert first[1]["READY"] == ["|b1", [1, 1], [[True]]]
    assert first[1]["CORRID"] == ["<u8", [1, 1], [[7]]]
    assert (first[1]["flags"], middle[1]["flags"], last[1]["flags"]) == (1, 0, 2)
    assert last[1]["START"][2] == [[0]] and last[1]["END"][2] == [[1.0]]


async def test_sequences_run_in_order_and_batch_together():
    model = load(REPOSITORY / "sequence_sum")

    async def sequence(index: int) -> list:
        return [
            summed(await model.infer(step(100 + index, 1, start=k == 0, end=k == 4)))
            for k in range(5)
        ]

    try:
        results = await asyncio.gather(*(sequence(i) for i in range(4)))
        # A sequence's requests sent at once still run one after another, in order.
        burst = await asyncio.gather(
            model.infer(step(9, 1, start=True)), *(model.infer(step(9, k)) for k in range(2, 6))
        )
    finally:
        await model.close()
    assert [[total for total, _ in runs] for runs in results] == [[1, 2, 3, 4, 5]] * 4
    assert max(seen["batch"] for runs in results for _, seen in runs) > 1
    assert [summed(r)[0] for r in burst] == [1, 3, 6, 10, 15]


async def test_requests_outside_a_started_sequence_get_tritons_errors():
    model = load(REPOSITORY / "sequence_sum")
    try:
        with pytest.raises(InferenceServerError) as no_id:
            await model.infer(step(None, 1))
        with pytest.raises(InferenceServerError) as not_started:
            await model.infer(step(77, 1))
        await model.infer(step(1, 1, start=True, end=True))
        with pytest.raises(InferenceServerError) as ended:
            await model.infer(step(1, 1))
        await model.infer(step(2, 1, start=True))
        await asyncio.sleep(0.6)  # max_sequence_idle_microseconds: 500000
        with pytest.raises(InferenceServerError) as idle:
            await model.infer(step(2, 1))
        with pytest.raises(InferenceServerError) as string_corrid:
            await model.infer(step("s", 1, start=True))
        statistics = model.statistics()[0]["inference_stats"]
    finally:
        await model.close()
    assert no_id.value.message == (
        "inference request to model 'sequence_sum' must specify a non-zero or non-empty "
        "correlation ID"
    )
    for error, sequence in ((not_started, 77), (ended, 1), (idle, 2)):
        assert error.value.code is StatusCode.INVALID_ARG
        assert error.value.message == (
            f"inference request for sequence {sequence} to model 'sequence_sum' must specify "
            "the START flag on the first request of the sequence"
        )
    assert "declare it TYPE_STRING" in string_corrid.value.message
    assert (statistics["success"]["count"], statistics["fail"]["count"]) == (2, 0)


def state_step(sequence, value: int, start: bool = False, outputs=()) -> InferRequest:
    return InferRequest(
        "sequence_state",
        [InferTensor("IN", "INT32", np.array([[value]], np.int32))],
        parameters={"sequence_id": sequence, "sequence_start": start},
        outputs=[RequestedOutput(name) for name in outputs],
    )


async def test_implicit_state_carries_each_sequences_outputs_to_its_next_request():
    model = load(REPOSITORY / "sequence_state")
    try:
        first = await model.infer(state_step(1, 1, start=True))
        other = await model.infer(state_step(2, 50, start=True))
        second = await model.infer(state_step(1, 2))
        third = await model.infer(state_step(1, 3, outputs=["STEPS"]))
        fourth = await model.infer(state_step(1, 4))
        again = await model.infer(state_step(1, 4, start=True))
    finally:
        await model.close()

    def seen(response) -> dict[str, int]:
        return {o.name: int(o.data[0, 0]) for o in response.outputs}

    # SUM starts from initial_state/hundred; STEPS_OUT (not a config output) never shows
    assert seen(first) == {"SUM_OUT": 101, "STEPS": 1}
    assert seen(other) == {"SUM_OUT": 150, "STEPS": 1}
    assert seen(second) == {"SUM_OUT": 103, "STEPS": 2}
    assert seen(third) == {"STEPS": 3}  # a state output the request did not ask for is kept
    assert seen(fourth) == {"SUM_OUT": 110, "STEPS": 4}
    assert seen(again) == {"SUM_OUT": 104, "STEPS": 1}  # a START starts from the initial state


def test_an_initial_state_file_of_the_wrong_size_fails_the_load(tmp_path):
    shutil.copytree(REPOSITORY / "sequence_state", tmp_path / "sequence_state")
    (tmp_path / "sequence_state" / "initial_state" / "hundred").write_bytes(b"\0" * 3)
    model = load(tmp_path / "sequence_state")
    assert "state 'SUM_IN'" in model.errors[1] and "hundred" in model.errors[1]


ACCUMULATOR_CONFIG = """
name: "accumulate"
platform: "onnxruntime_onnx"
max_batch_size: 8
sequence_batching {
  oldest { max_candidate_sequences: 8 max_queue_delay_microseconds: 20000 }
  control_input [
    { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] }
  ]
  state [
    { input_name: "INPUT_STATE" output_name: "OUTPUT_STATE" data_type: TYPE_INT32 dims: [ 1 ] }
  ]
}
input [ { name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
instance_group [ { kind: KIND_CPU count: 1 } ]
"""


async def test_an_onnx_model_with_implicit_state_accumulates_each_sequence_in_batches(tmp_path):
    from examples.builders import save_onnx_accumulator

    model_dir = tmp_path / "accumulate"
    save_onnx_accumulator(model_dir / "1" / "model.onnx")
    (model_dir / "config.pbtxt").write_text(ACCUMULATOR_CONFIG)
    model = load(model_dir)

    async def sequence(index: int) -> list[int]:
        sums = []
        for step_index in range(5):
            request = InferRequest(
                "accumulate",
                [InferTensor("INPUT", "INT32", np.array([[index + 1]], np.int32))],
                parameters={"sequence_id": 100 + index, "sequence_start": step_index == 0},
            )
            response = await model.infer(request)
            assert [o.name for o in response.outputs] == ["OUTPUT"]
            sums.append(int(response.output("OUTPUT").data[0, 0]))
        return sums

    try:
        results = await asyncio.gather(*(sequence(i) for i in range(6)))
        batches = model.statistics()[0]["batch_stats"]
    finally:
        await model.close()
    assert results == [[(i + 1) * n for n in range(1, 6)] for i in range(6)]
    assert any(int(batch["batch_size"]) > 1 for batch in batches)  # states gathered in batches
