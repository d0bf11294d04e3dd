"""Forwarding a sequence's request to the replica holding it through that replica's own HTTP
port: the :class:`~deployments.core.sequence_routing.SequenceForwarder` behind HAProxy.

Behind HAProxy every replica of a model has a port of its own (Serve's direct ingress, served
by rayton's server), and Serve refuses the model's deployment a request router that could
send a call to a named replica. A replica therefore records its port's address in the model's
sequence directory with its first START, and the others send the sequence's requests there
(:mod:`deployments.http.sequence_calls`): one hop, on any node. A holder that stopped refuses
the connection, breaks it, or its port now answers for another process: the sequence is lost
(UNAVAILABLE).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Protocol

import aiohttp

from deployments.apps.port_client import port_client
from deployments.core.sequence_routing import sequence_lost
from deployments.http import sequence_calls as wire
from repo_adapter.errors import InferenceServerError
from repo_adapter.inference_types import InferRequest, InferResponse
from repo_adapter.response_stream import StreamedResponse


class ReplicaAddresses(Protocol):
    """Where each replica of the model listens (the sequence directory keeps it)."""

    async def address(self, replica: str) -> str | None: ...


class PortForwarder:
    """Sends a sequence's request to the port of the replica holding it."""

    def __init__(self, model: str, addresses: ReplicaAddresses) -> None:
        self._model = model
        self._addresses = addresses
        self._known: dict[str, str] = {}  # replica -> host:port (a replica's never changes)
        self._session: aiohttp.ClientSession | None = None
        self._background: set[asyncio.Task] = set()

    async def forward(self, replica: str, request: InferRequest) -> InferResponse:
        try:
            async with self._post(replica, wire.INFER_PATH, wire.request_body(request)) as reply:
                items = wire.split_frames(await self._body(reply, request))
        except (aiohttp.ClientError, asyncio.IncompleteReadError, OSError):
            raise sequence_lost(self._model, request) from None
        if not items:
            raise sequence_lost(self._model, request)
        result = items[0].result
        if isinstance(result, BaseException):
            raise result
        if result is None:  # a non-decoupled call answers one response
            raise InferenceServerError(f"model '{self._model}' sent no response")
        return result

    async def forward_stream(
        self, replica: str, request: InferRequest
    ) -> AsyncIterator[StreamedResponse]:
        body = wire.request_body(request)
        try:
            async with self._post(replica, wire.STREAM_PATH, body) as reply:
                self._check(reply, request)
                content = reply.content
                while True:
                    kind, final, length = wire.read_head(await content.readexactly(wire.HEAD_SIZE))
                    payload = await content.readexactly(length) if length else b""
                    yield wire.read_frame(kind, final, payload)
                    if final:
                        return
        except (aiohttp.ClientError, asyncio.IncompleteReadError, OSError):
            raise sequence_lost(self._model, request) from None

    def drop(self, replica: str, sequence: str) -> None:
        task = asyncio.ensure_future(self._drop(replica, sequence))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _drop(self, replica: str, sequence: str) -> None:
        try:
            async with self._post(replica, wire.DROP_PATH, sequence.encode()) as reply:
                await reply.read()
        except (aiohttp.ClientError, InferenceServerError, OSError):
            pass  # gone already: nothing holds the sequence there

    @contextlib.asynccontextmanager
    async def _post(
        self, replica: str, path: str, body: bytes
    ) -> AsyncIterator[aiohttp.ClientResponse]:
        url = await self._url(replica, path)
        headers = {wire.TARGET_HEADER: replica, "content-type": wire.CONTENT_TYPE}
        async with self._client().post(url, data=body, headers=headers) as reply:
            yield reply

    async def _url(self, replica: str, path: str) -> str:
        address = self._known.get(replica)
        if address is None:
            address = await self._addresses.address(replica)
            if address is None:
                raise aiohttp.ClientConnectionError(f"replica {replica} has no address")
            self._known[replica] = address
        return f"http://{address}{path}"

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = port_client()
        return self._session

    def _check(self, reply: aiohttp.ClientResponse, request: InferRequest) -> None:
        """Refuse an answer that did not come from a replica of this model."""
        if reply.status != 200 or wire.FRAMES_HEADER not in reply.headers:
            raise sequence_lost(self._model, request)

    async def _body(self, reply: aiohttp.ClientResponse, request: InferRequest) -> bytes:
        self._check(reply, request)
        return await reply.read()

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
