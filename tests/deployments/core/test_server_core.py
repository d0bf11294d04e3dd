"""ServerCore without Ray: readiness, repository index, statistics and errors, over real models.

The models are real :class:`SingleModel` objects reached through an in-process ``ModelCalls``
(in a cluster the same calls go through Serve deployment handles).
"""

from __future__ import annotations

import asyncio
import inspect
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from deployments.core.server_core import SERVER_NAME, SERVER_VERSION, ServerCore, ServerSpec
from deployments.core.single_model import SingleModel
from repo_adapter.backends import InstanceSpec
from repo_adapter.errors import InferenceServerError, StatusCode
from repo_adapter.inference_types import InferRequest, InferTensor
from repo_adapter.repository import scan_model

REPOSITORY = Path(__file__).parents[1] / "model_repository"


class InProcessModels:
    """``ModelCalls`` over served models living in this process."""

    def __init__(self, models: dict[str, Any]) -> None:
        self.models = models

    async def call(self, model: str, method: str, *args: Any, timeout_s: float | None = None):
        result = getattr(self.models[model], method)(*args)
        if inspect.isawaitable(result):
            result = await asyncio.wait_for(result, timeout_s)
        return result


@pytest.fixture
def core():
    scanned = scan_model(REPOSITORY / "batch_recorder")
    model = SingleModel(
        scanned.config, scanned.path, scanned.versions, {}, InstanceSpec.cpu("batch_recorder")
    )
    spec = ServerSpec(
        repository=str(REPOSITORY),
        deployed=["batch_recorder"],
        unavailable={"broken": "config.pbtxt: bad field"},
    )
    yield ServerCore(spec, InProcessModels({"batch_recorder": model})), model
    asyncio.run(model.close())


def test_server_metadata_names_the_installed_version(core):
    server, _ = core
    metadata = server.server_metadata()
    assert metadata["name"] == SERVER_NAME and metadata["version"] == SERVER_VERSION
    assert SERVER_VERSION[0].isdigit() and "statistics" in metadata["extensions"]


async def test_strict_readiness_needs_every_model(core):
    server, _ = core
    assert not await server.server_ready()  # 'broken' failed to scan
    server.spec.strict_readiness = False
    assert await server.server_ready()


async def test_repository_index_lists_versions_and_reasons(core):
    server, _ = core
    assert await server.repository_index() == [
        {"name": "batch_recorder", "version": "1", "state": "READY"},
        {"name": "broken", "state": "UNAVAILABLE", "reason": "config.pbtxt: bad field"},
    ]
    assert await server.repository_index(ready_only=True) == [
        {"name": "batch_recorder", "version": "1", "state": "READY"}
    ]


async def test_all_statistics_after_an_inference(core):
    server, model = core
    data = np.ones((2, 2), np.float32)
    await model.infer(InferRequest("batch_recorder", [InferTensor("IN", "FP32", data)]))
    (entry,) = await server.all_statistics()
    assert (entry["name"], entry["version"], entry["inference_count"]) == ("batch_recorder", "1", 2)


def test_errors_for_models_without_a_deployment(core):
    server, _ = core
    unavailable = server.undeployed_model_error("broken")
    assert unavailable.code == StatusCode.UNAVAILABLE and "bad field" in unavailable.message
    unknown = server.undeployed_model_error("nope", "3")
    assert unknown.code == StatusCode.NOT_FOUND
    stats = server.undeployed_model_error("nope", action="stats")
    assert stats.code == StatusCode.INVALID_ARG
    refused = server.model_control_error()
    assert isinstance(refused, InferenceServerError) and refused.code == StatusCode.UNAVAILABLE
