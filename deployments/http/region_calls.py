"""A request that names a shared-memory region registered on another node, carried to a
replica of the same model on that node (a region is a file of one host's ``/dev/shm``).

HAProxy sends a model's requests to any of its replicas, on any node. A replica that finds
a region of another node in a request
(:class:`~deployments.core.shared_memory.RegionElsewhereError`) sends the request, once, to
the own port of a replica on the region's node
(:mod:`deployments.apps.region_hops`), and answers with that replica's answer:

* an HTTP request as it came (its path, query, headers and body), marked with
  :data:`HOP_HEADER`;
* a gRPC request as its serialized ``ModelInferRequest``, POSTed to :data:`GRPC_PATH`; the
  answer is the serialized ``ModelInferResponse``, or the error's message with its code in
  :data:`CODE_HEADER`.

A request that arrives marked as hopped never hops again: a replica that still cannot reach
the region answers Triton's UNAVAILABLE.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Protocol

from tritonclient.grpc import service_pb2 as pb

from deployments.core.shared_memory import RegionElsewhereError
from deployments.grpc.model_infer import parse_infer_request
from deployments.http.messages import HttpReply, HttpRequest
from deployments.http.responses import error_response
from repo_adapter.errors import InferenceServerError, StatusCode

HOP_HEADER = "rayton-region-hop"
GRPC_PATH = "/rayton/regions/grpc-infer"
CODE_HEADER = "rayton-region-code"
CONTENT_TYPE = "application/octet-stream"
# Connection-level headers the hop's own connection sets for itself.
_NOT_FORWARDED = frozenset(
    ("host", "content-length", "connection", "keep-alive", "transfer-encoding", "upgrade")
)


class HttpRegionHop(Protocol):
    """Sends an HTTP request to a replica of the same model on the region's node."""

    async def forward_http(
        self, elsewhere: RegionElsewhereError, model: str, request: HttpRequest
    ) -> HttpReply: ...


def hopped(request: HttpRequest) -> bool:
    """Whether ``request`` came from another replica's hop (it never hops again)."""
    return HOP_HEADER in request.headers


def forwarded_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """The headers a hopped HTTP request carries: the client's, marked as hopped."""
    kept = {name: value for name, value in headers.items() if name not in _NOT_FORWARDED}
    kept[HOP_HEADER] = "1"
    return kept


async def answer_grpc(
    request: HttpRequest, run: Callable[[pb.ModelInferRequest], Awaitable[bytes]]
) -> HttpReply:
    """The region's replica's answer to a hopped gRPC request: ``run`` serves the parsed
    request here (and never hops)."""
    try:
        if request.method != "POST":
            raise InferenceServerError(f"{request.method} {GRPC_PATH}: not a hopped call")
        payload = await run(parse_infer_request(request.body))
    except InferenceServerError as err:
        reply = error_response(err)
        return HttpReply(reply.status, reply.body, {**reply.headers, CODE_HEADER: err.code.name})
    except Exception as err:  # a model's own failure, answered as Triton's INTERNAL
        reply = error_response(InferenceServerError(str(err), StatusCode.INTERNAL))
        return HttpReply(reply.status, reply.body, {**reply.headers, CODE_HEADER: "INTERNAL"})
    return HttpReply(200, payload, {"content-type": CONTENT_TYPE})


def grpc_answer(status: int, headers: Mapping[str, str], body: bytes) -> bytes:
    """The serialized ``ModelInferResponse`` a hopped gRPC request got.

    Raises:
        InferenceServerError: the error the region's replica answered, with its code.
    """
    code = headers.get(CODE_HEADER)
    if status == 200 and code is None:
        return body
    if code is None:  # not a replica's answer: its port now belongs to something else
        raise InferenceServerError(
            f"the replica a shared-memory request was sent to answered HTTP {status}",
            StatusCode.UNAVAILABLE,
        )
    try:
        message = json.loads(body).get("error", "")
    except (ValueError, AttributeError):
        message = body.decode(errors="replace")
    raise InferenceServerError(message, StatusCode.__members__.get(code, StatusCode.INTERNAL))
