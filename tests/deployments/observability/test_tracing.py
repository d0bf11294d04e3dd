"""Request tracing in a process: sampling by rate and count, children of traced requests,
the stamps of a real model's request path, and the trace file Triton's layout gives."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import numpy as np
import pytest

from deployments.core.ensemble_model import EnsembleModel
from deployments.core.single_model import SingleModel
from deployments.observability.trace_file import TraceFileWriter
from deployments.observability.trace_settings import TraceSettings, TraceSettingsTable
from deployments.observability.tracing import TRACER, Tracer
from repo_adapter.backends import InstanceSpec
from repo_adapter.config import normalize_config, parse_config_text
from repo_adapter.inference_types import InferRequest, InferTensor
from repo_adapter.repository import scan_model

REPOSITORY = Path(__file__).parents[1] / "model_repository"


def configured(tracer: Tracer, **settings) -> Tracer:
    table = TraceSettingsTable(TraceSettings(file="/unused", **settings))
    tracer.configure(table.plan())
    return tracer


def test_off_traces_nothing():
    assert configured(Tracer()).start("m") is None


def test_every_rate_th_request_is_traced_until_the_count_runs_out():
    tracer = configured(Tracer(), level=("TIMESTAMPS",), rate=3, count=2)
    traced = [tracer.start("m") is not None for _ in range(12)]
    assert traced == [False, False, True, False, False, True] + [False] * 6


def test_a_model_with_its_own_settings_samples_on_its_own():
    tracer = Tracer()
    table = TraceSettingsTable(TraceSettings(level=("TIMESTAMPS",), rate=2, file="/t"))
    table.update({"trace_rate": "1", "trace_level": ["TENSORS"]}, "own")
    tracer.configure(table.plan())
    own = tracer.start("own")
    assert own is not None and own.levels == {"TENSORS"}
    assert [tracer.start("other") is not None for _ in range(4)] == [False, True, False, True]


def test_a_child_of_a_traced_request_is_traced_even_where_tracing_is_off():
    tracer = configured(Tracer())
    child = tracer.start("member", parent="p-1")
    assert child is not None and child.parent_key == "p-1" and "TIMESTAMPS" in child.levels


async def test_finished_traces_are_shipped_in_one_batch():
    tracer = configured(Tracer(), level=("TIMESTAMPS",), rate=1)
    shipped: list[list[dict]] = []

    async def sink(records):
        shipped.append(records)

    tracer.set_sink(sink)
    for _ in range(3):
        tracer.finish(tracer.start("m"))
    await tracer.flush()
    assert [len(batch) for batch in shipped] == [3]
    assert len({record["key"] for record in shipped[0]}) == 3


def load(name: str) -> SingleModel:
    scanned = scan_model(REPOSITORY / name)
    assert scanned.available, scanned.error
    return SingleModel(
        scanned.config, REPOSITORY / name, scanned.versions, scanned.labels, InstanceSpec.cpu(name)
    )


@pytest.fixture
def recorder():
    model = load("batch_recorder")
    yield model
    asyncio.run(model.close())


async def test_a_traced_request_gets_tritons_stamps_and_tensors(recorder):
    tracer = configured(Tracer(), level=("TIMESTAMPS", "TENSORS"), rate=1)
    data = np.array([[1.0, 2.5]], np.float32)
    request = InferRequest("batch_recorder", [InferTensor("IN", "FP32", data)], id="r1")
    request.trace = tracer.start("batch_recorder", request.id)
    await recorder.infer(request)
    trace = request.trace
    names = [name for name, _ in trace.stamps]
    assert names == [
        "REQUEST_START",
        "QUEUE_START",
        "COMPUTE_START",
        "COMPUTE_INPUT_END",
        "COMPUTE_OUTPUT_START",
        "INFER_RESPONSE_COMPLETE",
        "COMPUTE_END",
        "REQUEST_END",
    ]
    stamps = dict(trace.stamps)
    assert stamps["REQUEST_START"] <= stamps["QUEUE_START"] <= stamps["COMPUTE_START"]
    assert stamps["COMPUTE_START"] <= stamps["COMPUTE_END"] <= stamps["REQUEST_END"]
    assert trace.model_version == 1
    queued, *outputs = trace.tensors
    assert queued == {
        "activity": "TENSOR_QUEUE_INPUT",
        "tensor": {"name": "IN", "data": "1,2.5", "shape": "1,2", "dtype": "FP32"},
    }
    assert {o["tensor"]["name"] for o in outputs} == {"OUT", "BATCH_ROWS", "BATCH_REQUESTS"}
    assert all(o["activity"] == "TENSOR_BACKEND_OUTPUT" for o in outputs)


FORWARD = """
name: "forward"
platform: "ensemble"
max_batch_size: 8
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 2 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 2 ] } ]
ensemble_scheduling {
  step [
    { model_name: "batch_recorder" model_version: -1
      input_map { key: "IN" value: "IN" } output_map { key: "OUT" value: "OUT" } }
  ]
}
"""


async def test_an_ensembles_steps_are_traced_as_its_children(recorder):
    config = parse_config_text(FORWARD, "forward/config.pbtxt")
    normalize_config(config)
    shipped: list[dict] = []

    async def sink(records):
        shipped.extend(records)

    TRACER.configure(TraceSettingsTable(TraceSettings(file="/unused")).plan())  # tracing off
    TRACER.set_sink(sink)
    try:
        ensemble = EnsembleModel(config, [1], {}, recorder.infer)
        data = np.zeros((1, 2), np.float32)
        request = InferRequest("forward", [InferTensor("IN", "FP32", data)])
        request.trace = TRACER.start("forward", parent="outer")  # as if traced
        await ensemble.infer(request)
        await TRACER.flush()
    finally:
        TRACER.set_sink(None)
    assert [r["model_name"] for r in shipped] == ["batch_recorder"]
    assert shipped[0]["parent_key"] == request.trace.key
    assert [name for name, _ in request.trace.stamps] == ["REQUEST_START", "REQUEST_END"]


def records(count: int, parent: str = "") -> list[dict]:
    return [
        {
            "key": f"k{i}",
            "parent_key": parent,
            "model_name": "m",
            "model_version": 1,
            "request_id": "",
            "stamps": [("REQUEST_START", 10 + i)],
            "tensors": [],
        }
        for i in range(count)
    ]


def test_log_frequency_writes_numbered_parts(tmp_path):
    writer = TraceFileWriter(str(tmp_path / "trace.json"))
    writer.write(records(3), log_frequency=2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["trace.json.0"]
    part = json.loads((tmp_path / "trace.json.0").read_text())
    assert part == [
        {"id": 1, "model_name": "m", "model_version": 1},
        {"id": 1, "timestamps": [{"name": "REQUEST_START", "ns": 10}]},
        {"id": 2, "model_name": "m", "model_version": 1},
        {"id": 2, "timestamps": [{"name": "REQUEST_START", "ns": 11}]},
    ]
    writer.flush()  # the unfinished part, as Triton writes it at exit
    assert json.loads((tmp_path / "trace.json.1").read_text())[0]["id"] == 3


def test_log_frequency_zero_keeps_one_valid_json_file(tmp_path):
    path = tmp_path / "trace.json"
    writer = TraceFileWriter(str(path))
    writer.write(records(1), log_frequency=0)
    assert [e["id"] for e in json.loads(path.read_text())] == [1, 1]
    child = records(1, parent="k0")
    child[0]["key"] = "child"
    writer.write(child, log_frequency=0)
    events = json.loads(path.read_text())
    assert [e["id"] for e in events] == [1, 1, 2, 2]
    assert events[2]["parent_id"] == 1
