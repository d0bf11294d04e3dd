"""The hop of a request naming a shared-memory region registered on another node: to a
replica of the same deployment on that node, holding the model, through that replica's own
HTTP port (the wire: :mod:`deployments.http.region_calls`).

The replicas of the deployment and where each listens are asked of the replicas themselves
(their :class:`~deployments.observability.status.ReplicaInfo`), remembered for
:data:`_LISTING_TTL_S` and asked again when a hop's target is not listed or does not answer.
A model with no replica on the region's node is answered UNAVAILABLE with the reason.
"""

from __future__ import annotations

import time

import aiohttp

from deployments.apps.handles import ask_own_replicas
from deployments.apps.port_client import port_client
from deployments.apps.replica_api import ReplicaControlApi
from deployments.core.shared_memory import RegionElsewhereError
from deployments.http import region_calls as wire
from deployments.http.messages import HttpReply, HttpRequest
from deployments.observability.status import ReplicaInfo
from repo_adapter.errors import InferenceServerError, StatusCode

# Replicas come and go with scaling and reloads; a listing older than this is asked again.
_LISTING_TTL_S = 10.0
# The answer's headers a client reads (the hop's own connection sets the rest).
_REPLY_HEADERS = ("content-type", "inference-header-content-length", "content-encoding")


class ReplicaRegionHops:
    """:class:`~deployments.http.region_calls.HttpRegionHop` and
    :class:`~deployments.grpc.model_infer.GrpcRegionHop` for one replica."""

    def __init__(self) -> None:
        self._replicas: list[ReplicaInfo] = []
        self._listed_at = float("-inf")
        self._session: aiohttp.ClientSession | None = None

    async def forward_http(
        self, elsewhere: RegionElsewhereError, model: str, request: HttpRequest
    ) -> HttpReply:
        address = await self._address(elsewhere, model)
        query = f"?{request.query}" if request.query else ""
        url = f"http://{address}{request.path}{query}"
        try:
            async with self._client().post(
                url, data=request.body, headers=wire.forwarded_headers(request.headers)
            ) as reply:
                body = await reply.read()
                headers = {k: reply.headers[k] for k in _REPLY_HEADERS if k in reply.headers}
                return HttpReply(reply.status, body, headers)
        except (aiohttp.ClientError, OSError) as err:
            raise self._lost(elsewhere, model, err) from None

    async def forward_grpc(
        self, elsewhere: RegionElsewhereError, model: str, message: bytes
    ) -> bytes:
        address = await self._address(elsewhere, model)
        headers = {"content-type": wire.CONTENT_TYPE, wire.HOP_HEADER: "1"}
        try:
            async with self._client().post(
                f"http://{address}{wire.GRPC_PATH}", data=message, headers=headers
            ) as reply:
                body = await reply.read()
                return wire.grpc_answer(reply.status, reply.headers, body)
        except (aiohttp.ClientError, OSError) as err:
            raise self._lost(elsewhere, model, err) from None

    async def _address(self, elsewhere: RegionElsewhereError, model: str) -> str:
        """Where a replica holding ``model`` on the region's node listens."""
        if time.monotonic() - self._listed_at > _LISTING_TTL_S:
            await self._list()
        address = self._find(elsewhere.node_id, model)
        if address is None and self._listed_at < time.monotonic() - 1.0:
            await self._list()  # one started since the listing may be there
            address = self._find(elsewhere.node_id, model)
        if address is not None:
            return address
        raise InferenceServerError(
            f"model '{model}' has no replica on node {elsewhere.node_id}, where shared memory "
            f"region '{elsewhere.region}' was registered: a region is reachable only on its "
            "own node; place a replica of the model there (or register the region on a node "
            "that runs one)",
            StatusCode.UNAVAILABLE,
        )

    async def _list(self) -> None:
        self._replicas = await ask_own_replicas(ReplicaControlApi.replica_info)
        self._listed_at = time.monotonic()

    def _find(self, node_id: str, model: str) -> str | None:
        for info in self._replicas:
            if info.node_id == node_id and model in info.models and info.ingress_address:
                return info.ingress_address
        return None

    def _lost(
        self, elsewhere: RegionElsewhereError, model: str, err: BaseException
    ) -> InferenceServerError:
        self._listed_at = float("-inf")  # the next hop lists the replicas again
        return InferenceServerError(
            f"model '{model}': the replica on node {elsewhere.node_id}, where shared memory "
            f"region '{elsewhere.region}' was registered, did not answer "
            f"({type(err).__name__}); try again",
            StatusCode.UNAVAILABLE,
        )

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = port_client()
        return self._session
