"""The server's HTTP routes for model paths the proxy could not route: sent on to the model's
replicas once it serves (loaded on demand, or loaded just now), never sent on twice, and
Triton's errors otherwise. Real models and repository state in this process."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import pytest

from deployments.core.server_core import ServerCore
from deployments.http.messages import HttpReply, HttpRequest
from deployments.http.server_routes import FORWARDED_HEADER, ServerHttpEndpoints
from tests.support.in_process import InProcessRepository

REPOSITORY = Path(__file__).parents[1] / "model_repository"


class Forwarded:
    """What the routes sent on to a model's replicas."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, HttpRequest]] = []

    async def __call__(self, model: str, request: HttpRequest) -> HttpReply:
        self.sent.append((model, request))
        return HttpReply(200, b'{"answered_by": "replica"}')


@pytest.fixture
def routes(tmp_path, request):
    shutil.copytree(REPOSITORY / "batch_recorder", tmp_path / "batch_recorder")
    models = InProcessRepository(tmp_path, on_demand=request.param)
    forwarded = Forwarded()
    yield ServerHttpEndpoints(ServerCore(models, models, models), forwarded), models, forwarded
    asyncio.run(models.close())


INFER = HttpRequest("POST", "/v2/models/batch_recorder/infer", {}, b"{}")


@pytest.mark.parametrize("routes", [True], indirect=True)
async def test_an_inference_loads_the_model_and_goes_to_its_replicas(routes):
    endpoints, models, forwarded = routes
    reply = await endpoints.handle(INFER)
    assert reply.status == 200 and json.loads(reply.body) == {"answered_by": "replica"}
    ((model, sent),) = forwarded.sent
    assert model == "batch_recorder" and sent.headers[FORWARDED_HEADER] == "1"
    assert sent.body == INFER.body and "batch_recorder" in models.models


@pytest.mark.parametrize("routes", [True], indirect=True)
async def test_a_forwarded_request_is_not_sent_on_again(routes):
    endpoints, models, forwarded = routes
    await models.load("batch_recorder")
    again = HttpRequest("POST", INFER.path, {FORWARDED_HEADER: "1"}, b"{}")
    reply = await endpoints.handle(again)
    assert reply.status == 404 and forwarded.sent == []  # Triton's error, no loop


@pytest.mark.parametrize("routes", [True], indirect=True)
async def test_readiness_of_a_model_not_loaded_does_not_load_it(routes):
    endpoints, models, forwarded = routes
    reply = await endpoints.handle(HttpRequest("GET", "/v2/models/batch_recorder/ready"))
    assert reply.status == 404 and models.models == {} and forwarded.sent == []


@pytest.mark.parametrize("routes", [True], indirect=True)
async def test_an_unknown_model_is_not_found(routes):
    endpoints, _, forwarded = routes
    reply = await endpoints.handle(HttpRequest("POST", "/v2/models/nope/infer", {}, b"{}"))
    assert reply.status == 404 and "nope" in json.loads(reply.body)["error"]
    assert forwarded.sent == []


@pytest.mark.parametrize("routes", [False], indirect=True)
async def test_without_on_demand_a_model_not_loaded_is_an_error(routes):
    endpoints, models, forwarded = routes
    reply = await endpoints.handle(INFER)
    assert reply.status == 404 and forwarded.sent == [] and models.models == {}


@pytest.mark.parametrize("routes", [False], indirect=True)
async def test_a_loaded_model_the_proxy_did_not_route_yet_goes_to_its_replicas(routes):
    endpoints, models, forwarded = routes
    await models.load("batch_recorder")
    reply = await endpoints.handle(INFER)
    assert reply.status == 200 and [m for m, _ in forwarded.sent] == ["batch_recorder"]
