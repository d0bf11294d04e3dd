"""A ``ModelStreamInfer`` stream: its requests answered concurrently, their replies in order.

Triton answers each request of a stream with its response messages (one, or a decoupled
model's any number) and keeps the stream open after an error (the error is the message).
Requests of a stream run concurrently, up to :data:`STREAM_WINDOW` in flight before reading
pauses, so a stream feeds the models' dynamic batchers as concurrent unary calls do; a
request's replies go out after those of the requests before it, each request's in the order
its model sent them. Both ends that serve streams use this: rayton's gRPC frontend (wire
bytes in) and a model's replica reached through HAProxy (requests parsed by Serve's gRPC
ingress).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import AsyncIterator, Callable, Hashable
from typing import TypeVar

from deployments.grpc import codec
from repo_adapter.errors import InferenceServerError

logger = logging.getLogger(__name__)

# Requests of one ModelStreamInfer stream that may be in flight before reading pauses.
STREAM_WINDOW = 256

Message = TypeVar("Message")


class _Replies:
    """One request's replies, collected by a task of its own while the replies of earlier
    requests are still going out."""

    def __init__(self, replies: AsyncIterator[bytes]) -> None:
        self._items: deque[bytes] = deque()
        self._changed = asyncio.Event()
        self._done = False
        self.task = asyncio.ensure_future(self._collect(replies))

    async def _collect(self, replies: AsyncIterator[bytes]) -> None:
        try:
            async for reply in replies:
                self._items.append(reply)
                self._changed.set()
        finally:
            self._done = True
            self._changed.set()

    async def __aiter__(self) -> AsyncIterator[bytes]:
        while True:
            while self._items:
                yield self._items.popleft()
            if self._done:
                await self.task  # re-raises what the replies raised
                return
            self._changed.clear()
            await self._changed.wait()


async def stream_replies(
    requests: AsyncIterator[Message], answer: Callable[[Message], AsyncIterator[bytes]]
) -> AsyncIterator[bytes]:
    """The replies ``answer(request)`` yields for each request as it arrives: every reply of
    a request after those of the requests before it.

    ``answer`` yields serialized ``ModelStreamInferResponse`` messages and should not raise
    (see :func:`replies_or_error`); reading stops when the client ends the stream, and a
    failed read (the client went away) is raised once every earlier reply was yielded.
    """
    pending: asyncio.Queue[_Replies | None] = asyncio.Queue(STREAM_WINDOW)

    async def read() -> None:
        try:
            async for request in requests:
                await pending.put(_Replies(answer(request)))
        finally:
            await pending.put(None)

    reader = asyncio.ensure_future(read())
    try:
        while (replies := await pending.get()) is not None:
            async for reply in replies:
                yield reply
        await reader  # re-raises a failed read
    finally:
        reader.cancel()
        while not pending.empty():
            replies = pending.get_nowait()
            if replies is not None:
                replies.task.cancel()


async def replies_or_error(replies: AsyncIterator[bytes], request_id: str) -> AsyncIterator[bytes]:
    """``replies``, ended by the stream's error message for the request when they fail."""
    try:
        async for reply in replies:
            yield reply
    except Exception as err:
        yield error_reply(err, request_id)


def error_reply(err: Exception, request_id: str) -> bytes:
    """The ``ModelStreamInferResponse`` Triton sends for a request of a stream that failed."""
    if not isinstance(err, InferenceServerError):
        logger.exception("gRPC ModelStreamInfer request failed", exc_info=err)
    return codec.stream_response(error=err, request_id=request_id).SerializeToString()


class SequenceTurns:
    """One stream's requests of each sequence, one after another in the order they came
    (requests without a sequence never wait). A stream's requests that travel to a replica
    as calls of their own need it: calls in flight together may arrive in any order."""

    def __init__(self) -> None:
        self._turns: dict[Hashable, tuple[asyncio.Lock, int]] = {}

    @contextlib.asynccontextmanager
    async def turn(self, key: tuple[str, int | str]) -> AsyncIterator[None]:
        if not key[1]:  # no correlation ID
            yield
            return
        lock, users = self._turns.get(key, (asyncio.Lock(), 0))
        self._turns[key] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._turns[key]
            if users == 1:
                del self._turns[key]
            else:
                self._turns[key] = (lock, users - 1)

    async def in_turn(
        self, key: tuple[str, int | str], replies: AsyncIterator[bytes]
    ) -> AsyncIterator[bytes]:
        """``replies``, produced in the turn of sequence ``key``."""
        async with self.turn(key):
            async for reply in replies:
                yield reply
