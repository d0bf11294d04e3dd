"""EnsembleModel's dataflow and statistics, with members as plain async functions (no Ray)."""

from __future__ import annotations

import numpy as np

from deployments.core.ensemble_model import EnsembleModel
from repo_adapter.config import normalize_config, parse_config_text
from repo_adapter.inference_types import ComputeTimes, InferRequest, InferResponse, InferTensor

PIPELINE = """
name: "pipeline"
platform: "ensemble"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ -1 ] } ]
ensemble_scheduling {
  step [
    { model_name: "plus_one" model_version: -1
      input_map { key: "X" value: "IN" } output_map { key: "Y" value: "mid" } },
    { model_name: "double" model_version: -1
      input_map { key: "X" value: "mid" } output_map { key: "Y" value: "OUT" } }
  ]
}
"""
# What each member's batcher would have attached to its response.
MEMBER_COMPUTE = {"plus_one": ComputeTimes(10, 200, 30), "double": ComputeTimes(1, 2000, 3)}


async def member(request: InferRequest) -> InferResponse:
    x = request.input("X").data
    y = x + 1 if request.model_name == "plus_one" else x * 2
    return InferResponse(
        request.model_name,
        "1",
        [InferTensor("Y", "FP32", y)],
        compute=MEMBER_COMPUTE[request.model_name],
    )


def pipeline() -> EnsembleModel:
    config = parse_config_text(PIPELINE, "pipeline/config.pbtxt")
    normalize_config(config)
    return EnsembleModel(config, [1], {}, member)


def request() -> InferRequest:
    data = np.array([1.0, 2.0], dtype=np.float32)
    return InferRequest("pipeline", [InferTensor("IN", "FP32", data)])


async def test_steps_run_in_dataflow_order():
    response = await pipeline().infer(request())
    np.testing.assert_array_equal(response.output("OUT").data, [4.0, 6.0])


async def test_statistics_report_the_members_compute_sums_like_triton():
    ensemble = pipeline()
    response = await ensemble.infer(request())
    assert response.compute == ComputeTimes(11, 2200, 33)  # nested ensembles sum this again
    stats = ensemble.statistics()[0]
    inference = stats["inference_stats"]
    assert stats["execution_count"] == 1 and inference["success"]["count"] == 1
    assert [inference[k]["ns"] for k in ("compute_input", "compute_infer", "compute_output")] == [
        11,
        2200,
        33,
    ]
    assert inference["queue"]["count"] == 1 and inference["queue"]["ns"] > 0  # its own
    assert inference["success"]["ns"] >= inference["queue"]["ns"]
    assert stats["batch_stats"][0]["compute_infer"] == {"count": 1, "ns": 2200}
