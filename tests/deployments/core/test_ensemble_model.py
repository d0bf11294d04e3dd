"""EnsembleModel's dataflow and statistics, with members as plain async functions (no Ray)."""

from __future__ import annotations

import numpy as np
import pytest

from deployments.core.ensemble_model import EnsembleModel
from deployments.core.response_cache import LocalResponseStore, ModelResponseCache
from repo_adapter.config import normalize_config, parse_config_text
from repo_adapter.errors import DecoupledModelError, InferenceServerError
from repo_adapter.inference_types import ComputeTimes, InferRequest, InferResponse, InferTensor
from repo_adapter.response_stream import StreamedResponse

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


def decoupled_pipeline(first_sends: list) -> EnsembleModel:
    """The pipeline with ``plus_one`` decoupled: it sends ``first_sends`` (outputs to add to
    X, an error, or None for the final flag alone) and the final flag."""
    config = parse_config_text(PIPELINE, "pipeline/config.pbtxt")
    normalize_config(config)
    config.model_transaction_policy.decoupled = True  # as the repository scan marks it

    async def stream(step: InferRequest):
        if step.model_name != "plus_one":
            yield StreamedResponse(await member(step), True)
            return
        x = step.input("X").data
        for sent in first_sends:
            if isinstance(sent, InferenceServerError) or sent is None:
                yield StreamedResponse(sent, False)
            else:
                yield StreamedResponse(
                    InferResponse("plus_one", "1", [InferTensor("Y", "FP32", x + sent)]), False
                )
        yield StreamedResponse(None, True)

    return EnsembleModel(config, [1], {}, member, stream)


async def test_a_decoupled_member_runs_the_steps_after_it_once_per_response():
    ensemble = decoupled_pipeline([1, 2, 3])
    items = [item async for item in ensemble.infer_stream(request())]
    assert [item.final for item in items] == [False, False, True]  # the last one is final
    outputs = [item.result.output("OUT").data.tolist() for item in items]
    assert outputs == [[4.0, 6.0], [6.0, 8.0], [8.0, 10.0]]  # (IN + k) * 2
    stats = ensemble.statistics()[0]["inference_stats"]
    assert stats["success"]["count"] == 1  # one request, as Triton counts it
    # its members' compute, summed: three runs of double (the decoupled member reports none)
    assert [stats[k]["ns"] for k in ("compute_input", "compute_infer", "compute_output")] == [
        3,
        6000,
        9,
    ]


async def test_a_decoupled_ensemble_with_no_response_sends_the_final_flag_alone():
    items = [item async for item in decoupled_pipeline([]).infer_stream(request())]
    assert [(item.result, item.final) for item in items] == [(None, True)]


async def test_a_decoupled_members_error_fails_the_ensemble_request_and_infer_is_refused():
    failing = decoupled_pipeline([InferenceServerError("negative count")])
    with pytest.raises(InferenceServerError, match="in ensemble 'pipeline', negative count"):
        _ = [item async for item in failing.infer_stream(request())]
    with pytest.raises(DecoupledModelError):
        await failing.infer(request())


async def test_a_cached_ensemble_answers_a_repeated_request_without_running_a_step():
    config = parse_config_text(PIPELINE, "pipeline/config.pbtxt")
    normalize_config(config)
    calls: list[str] = []

    async def counted(step: InferRequest) -> InferResponse:
        calls.append(step.model_name)
        return await member(step)

    store = LocalResponseStore(1 << 20)
    ensemble = EnsembleModel(
        config, [1], {}, counted, cache=ModelResponseCache(store, "pipeline\0g")
    )
    first = await ensemble.infer(request())
    again = await ensemble.infer(request())
    np.testing.assert_array_equal(again.output("OUT").data, first.output("OUT").data)
    assert calls == ["plus_one", "double"]  # the second request ran no step
    assert again.parameters == {}  # as Triton's cached response
    inference = ensemble.statistics()[0]["inference_stats"]
    assert (inference["cache_hit"]["count"], inference["cache_miss"]["count"]) == (1, 1)
    assert inference["success"]["count"] == 2 and inference["compute_infer"]["count"] == 1
