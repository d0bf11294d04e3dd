"""ServerCore without Ray: readiness, the repository API, statistics and errors, over real models.

The models are real :class:`SingleModel` objects and the state a real :class:`LiveRepository`,
both in this process (:mod:`tests.support.in_process`); in a cluster the same calls go to the
repository controller and the deployments' handles.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
from pathlib import Path

import numpy as np
import pytest

from deployments.core.server_core import SERVER_NAME, SERVER_VERSION, ServerCore
from repo_adapter.errors import InferenceServerError, StatusCode
from repo_adapter.inference_types import InferRequest, InferTensor
from tests.support.in_process import InProcessRepository

REPOSITORY = Path(__file__).parents[1] / "model_repository"


@pytest.fixture
def repository(tmp_path):
    """batch_recorder (loads) and broken (its config does not parse)."""
    shutil.copytree(REPOSITORY / "batch_recorder", tmp_path / "batch_recorder")
    (tmp_path / "broken" / "1").mkdir(parents=True)
    (tmp_path / "broken" / "config.pbtxt").write_text("bad_field: 1\n")
    return tmp_path


@pytest.fixture
def core(repository):
    models = InProcessRepository(repository)
    server = ServerCore(models, models, models)
    for name in ("batch_recorder", "broken"):
        with contextlib.suppress(InferenceServerError):
            asyncio.run(models.load(name))
    yield server, models
    asyncio.run(models.close())


async def test_server_metadata_names_the_installed_version(core):
    server, _ = core
    metadata = await server.server_metadata()
    assert metadata["name"] == SERVER_NAME and metadata["version"] == SERVER_VERSION
    assert SERVER_VERSION[0].isdigit() and "statistics" in metadata["extensions"]


async def test_server_metadata_lists_unload_dependents_where_unload_works(core):
    server, _ = core
    extensions = (await server.server_metadata())["extensions"]
    assert extensions.index("model_repository(unload_dependents)") == (
        extensions.index("model_repository") + 1
    )


async def test_strict_readiness_needs_every_model(core):
    server, _ = core
    assert not await server.server_ready()  # 'broken' failed to load
    await server.unload("broken", False)
    # As Triton 2.51: unloading a model that failed to load leaves the server not ready.
    assert not await server.server_ready()


async def test_repository_index_lists_versions_and_reasons(core):
    server, _ = core
    index = await server.repository_index()
    assert index[0] == {"name": "batch_recorder", "version": "1", "state": "READY"}
    assert index[1]["name"] == "broken" and index[1]["state"] == "UNAVAILABLE"
    assert "bad_field" in index[1]["reason"]
    assert await server.repository_index(ready_only=True) == [index[0]]


async def test_load_and_unload_change_what_is_served(core):
    server, _ = core
    await server.unload("batch_recorder", False)
    assert not await server.is_deployed("batch_recorder")
    assert await server.repository_index(ready_only=True) == []
    (entry,) = [e for e in await server.repository_index() if e["name"] == "batch_recorder"]
    assert entry == {
        "name": "batch_recorder",
        "version": "1",
        "state": "UNAVAILABLE",
        "reason": "unloaded",
    }
    error = await server.undeployed_model_error("batch_recorder")
    assert (error.code, error.message) == (  # Triton's answer for an unloaded model
        StatusCode.NOT_FOUND,
        "Request for unknown model: 'batch_recorder' has no available versions",
    )
    await server.load("batch_recorder", None, [])
    assert await server.is_deployed("batch_recorder")


async def test_all_statistics_after_an_inference(core):
    server, models = core
    data = np.ones((2, 2), np.float32)
    await models.models["batch_recorder"].infer(
        InferRequest("batch_recorder", [InferTensor("IN", "FP32", data)])
    )
    (entry,) = await server.all_statistics()
    assert (entry["name"], entry["version"], entry["inference_count"]) == ("batch_recorder", "1", 2)


async def test_errors_for_models_without_a_deployment(core):
    server, _ = core
    unavailable = await server.undeployed_model_error("broken")
    assert unavailable.code == StatusCode.UNAVAILABLE and "bad_field" in unavailable.message
    unknown = await server.undeployed_model_error("nope", "3")
    assert unknown.code == StatusCode.NOT_FOUND
    stats = await server.undeployed_model_error("nope", action="stats")
    assert stats.code == StatusCode.INVALID_ARG


@pytest.fixture
def on_demand(repository):
    models = InProcessRepository(repository, on_demand=True)
    yield ServerCore(models, models, models), models
    asyncio.run(models.close())


async def test_on_demand_loads_a_model_on_its_first_inference(on_demand):
    server, models = on_demand
    assert not await server.is_deployed("batch_recorder")
    assert await server.serves_now("batch_recorder", "infer")
    assert "batch_recorder" in (await server.view(fresh=True)).served
    assert "batch_recorder" in models.models


async def test_on_demand_metadata_and_config_load_but_readiness_and_stats_do_not(on_demand):
    server, models = on_demand
    assert not await server.serves_now("batch_recorder", "ready")
    assert not await server.serves_now("batch_recorder", "stats")
    assert models.models == {}
    assert await server.serves_now("batch_recorder", "")  # metadata
    await models.unload("batch_recorder")
    assert await server.serves_now("batch_recorder", "config")


async def test_on_demand_unknown_model_is_not_found_and_a_broken_one_says_why(on_demand):
    server, _ = on_demand
    with pytest.raises(InferenceServerError) as unknown:
        await server.serves_now("nope", "infer")
    assert unknown.value.code == StatusCode.NOT_FOUND
    assert not await server.serves_now("broken", "infer")
    error = await server.undeployed_model_error("broken", action="infer")
    assert error.code == StatusCode.UNAVAILABLE and "bad_field" in error.message


async def test_without_on_demand_nothing_loads(core):
    server, models = core
    assert await server.serves_now("batch_recorder", "infer")
    await server.unload("batch_recorder", False)
    assert not await server.serves_now("batch_recorder", "infer")
    assert "batch_recorder" not in models.models
