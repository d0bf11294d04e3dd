"""The router of a model with several replica groups: shortest queue, and the groups' states."""

from __future__ import annotations

import asyncio

import pytest

from deployments.core.routed_model import GroupRoute, RoutedModel
from repo_adapter.config import normalize_config, parse_config_text
from repo_adapter.errors import InferenceServerError, StatusCode
from repo_adapter.inference_types import InferRequest, InferResponse
from repo_adapter.model_state import ModelState, VersionState

CONFIG = """
name: "m" backend: "python" max_batch_size: 8
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] } ]
"""
READY = VersionState(ModelState.READY)


def _config():
    config = parse_config_text(CONFIG, "test")
    normalize_config(config)
    return config


class _Group:
    """A replica group that holds each request until released (to count what is in flight)."""

    def __init__(self) -> None:
        self.seen = 0
        self.release = asyncio.Event()

    async def infer(self, request: InferRequest) -> InferResponse:
        self.seen += 1
        await self.release.wait()
        return InferResponse(model_name="m", model_version="1", outputs=[])


async def test_requests_go_to_the_group_with_the_fewest_in_flight_per_replica():
    small, large = _Group(), _Group()
    model = RoutedModel(
        _config(), [1], [GroupRoute("m.cpu", 1, small.infer), GroupRoute("m.gpu", 3, large.infer)]
    )
    calls = [
        asyncio.create_task(model.infer(InferRequest(model_name="m", inputs=[]))) for _ in range(8)
    ]
    await asyncio.sleep(0)
    # 3 replicas take three times the requests of 1: 2 and 6 in flight.
    assert (small.seen, large.seen) == (2, 6)
    small.release.set()
    large.release.set()
    await asyncio.gather(*calls)
    assert [route.in_flight for route in model.routes] == [0, 0]


def test_a_version_is_ready_once_every_reporting_replica_has_it():
    model = RoutedModel(_config(), [1], [GroupRoute("g", 1, _Group().infer)])
    assert not model.is_ready()
    assert model.state()["1"].state is ModelState.UNAVAILABLE
    model.update_states([{"1": READY}, {"1": READY}])
    assert model.is_ready() and model.is_ready("1")
    assert model.metadata()["versions"] == ["1"]
    failed = VersionState(ModelState.UNAVAILABLE, "CUDA out of memory")
    model.update_states([{"1": READY}, {"1": failed}])
    assert model.state()["1"] == failed
    with pytest.raises(InferenceServerError) as raised:
        model.metadata()
    assert raised.value.code == StatusCode.UNAVAILABLE
    assert "CUDA out of memory" in str(raised.value)


def test_unknown_versions_and_statistics_errors_are_tritons():
    model = RoutedModel(_config(), [1], [GroupRoute("g", 1, _Group().infer)])
    model.update_states([{"1": READY}])
    with pytest.raises(InferenceServerError, match="version 7 is not found"):
        model.model_config("7")
    assert model.statistics() == []
    with pytest.raises(InferenceServerError, match="version 7 is not found"):
        model.statistics("7")


def test_a_model_needs_a_group():
    with pytest.raises(ValueError, match="no replica group"):
        RoutedModel(_config(), [1], [])
