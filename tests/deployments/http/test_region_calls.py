"""The hop of a request naming a region of another node, Ray-free: the wire's gRPC answer
both ways, the headers a hopped HTTP request carries, and where a model's HTTP routes hop
(once, never again from a hopped request). The hop itself between replicas of two nodes runs
in tests/e2e/test_multinode.py."""

from __future__ import annotations

import json

import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc
from tritonclient.grpc import service_pb2 as pb

from deployments.core.shared_memory import MappedRegions, RegionElsewhereError, SystemRegion
from deployments.http import region_calls
from deployments.http.messages import HttpReply, HttpRequest
from deployments.http.model_routes import ModelHttpEndpoints
from repo_adapter.errors import InferenceServerError, StatusCode

CONFIG = text_format.Parse(
    'name: "m" max_batch_size: 4 '
    'input [ { name: "IN" data_type: TYPE_FP32 dims: [ 1 ] } ] '
    'output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] } ]',
    mc.ModelConfig(),
)
BODY = json.dumps(
    {
        "inputs": [
            {
                "name": "IN",
                "shape": [1, 1],
                "datatype": "FP32",
                "parameters": {"shared_memory_region": "r", "shared_memory_byte_size": 4},
            }
        ]
    }
).encode()


def _hop_request(**headers: str) -> HttpRequest:
    return HttpRequest("POST", region_calls.GRPC_PATH, headers, b"")


async def test_a_hopped_grpc_answer_comes_back_as_the_serialized_response():
    message = pb.ModelInferRequest(model_name="m", id="7")

    async def run(request: pb.ModelInferRequest) -> bytes:
        return pb.ModelInferResponse(
            model_name=request.model_name, id=request.id
        ).SerializeToString()

    request = HttpRequest("POST", region_calls.GRPC_PATH, {}, message.SerializeToString())
    reply = await region_calls.answer_grpc(request, run)
    answer = region_calls.grpc_answer(reply.status, reply.headers, bytes(reply.body))
    assert pb.ModelInferResponse.FromString(answer).id == "7"


@pytest.mark.parametrize(
    ("raised", "code", "message"),
    [
        (InferenceServerError("no such model", StatusCode.NOT_FOUND), "NOT_FOUND", "no such"),
        (ValueError("the model broke"), "INTERNAL", "the model broke"),
    ],
)
async def test_a_hopped_grpc_error_keeps_its_code_and_message(raised, code, message):
    async def run(request: pb.ModelInferRequest) -> bytes:
        raise raised

    body = pb.ModelInferRequest(model_name="m").SerializeToString()
    reply = await region_calls.answer_grpc(
        HttpRequest("POST", region_calls.GRPC_PATH, {}, body), run
    )
    with pytest.raises(InferenceServerError, match=message) as error:
        region_calls.grpc_answer(reply.status, reply.headers, bytes(reply.body))
    assert error.value.code == StatusCode[code]


async def test_a_malformed_hop_is_refused():
    async def run(request: pb.ModelInferRequest) -> bytes:
        raise AssertionError("not run")

    for request in (
        HttpRequest("GET", region_calls.GRPC_PATH),
        HttpRequest("POST", region_calls.GRPC_PATH, {}, b"\xff\xff not a message"),
    ):
        reply = await region_calls.answer_grpc(request, run)
        with pytest.raises(InferenceServerError) as error:
            region_calls.grpc_answer(reply.status, reply.headers, bytes(reply.body))
        assert error.value.code == StatusCode.INVALID_ARG


def test_an_answer_not_from_a_replica_is_unavailable():
    """The port now belongs to another process: no code header."""
    with pytest.raises(InferenceServerError, match="answered HTTP 404") as error:
        region_calls.grpc_answer(404, {"content-type": "text/plain"}, b"Not Found")
    assert error.value.code == StatusCode.UNAVAILABLE


def test_a_hopped_http_request_keeps_the_clients_headers_and_is_marked():
    headers = {
        "host": "10.0.0.1:8000",
        "content-length": "12",
        "connection": "keep-alive",
        "content-type": "application/json",
        "inference-header-content-length": "9",
        "accept-encoding": "gzip",
    }
    forwarded = region_calls.forwarded_headers(headers)
    assert forwarded == {
        "content-type": "application/json",
        "inference-header-content-length": "9",
        "accept-encoding": "gzip",
        region_calls.HOP_HEADER: "1",
    }
    assert region_calls.hopped(HttpRequest("POST", "/", forwarded))
    assert not region_calls.hopped(HttpRequest("POST", "/", headers))


class _Model:
    """What the routes read of a served model before a region is read (never run here)."""

    name = "m"
    config = CONFIG

    async def infer(self, request):
        raise AssertionError("a request naming another node's region must not run here")


class _RecordedHop:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str, str]] = []

    async def forward_http(
        self, elsewhere: RegionElsewhereError, model: str, request: HttpRequest
    ) -> HttpReply:
        self.calls.append((elsewhere.node_id, model, request.path))
        return HttpReply(200, b"from the region's node")


def _endpoints(hop: _RecordedHop | None) -> ModelHttpEndpoints:
    regions = MappedRegions("node-b")
    regions.adopt([SystemRegion("r", "/never_opened", 0, 64, "node-a")])
    return ModelHttpEndpoints(_Model(), None, None, regions, hop)  # type: ignore[arg-type]


async def test_an_infer_naming_another_nodes_region_hops_once():
    hop = _RecordedHop()
    request = HttpRequest("POST", "/v2/models/m/infer", {}, BODY)
    reply = await _endpoints(hop).handle(request)
    assert (reply.status, reply.body) == (200, b"from the region's node")
    assert hop.calls == [("node-a", "m", "/v2/models/m/infer")]


async def test_a_hopped_request_that_still_cannot_reach_the_region_is_unavailable():
    hop = _RecordedHop()
    marked = HttpRequest("POST", "/v2/models/m/infer", {region_calls.HOP_HEADER: "1"}, BODY)
    for endpoints, request in ((_endpoints(hop), marked), (_endpoints(None), marked)):
        reply = await endpoints.handle(request)
        assert reply.status == 503
        assert "registered on node node-a" in json.loads(bytes(reply.body))["error"]
    assert hop.calls == []
