"""A ``ModelStreamInfer`` stream: its requests answered concurrently, its replies in order.

Triton answers each request of a stream with one response message and keeps the stream open
after an error (the error is the message). Requests of a stream run concurrently, up to
:data:`STREAM_WINDOW` in flight before reading pauses, so a stream feeds the models' dynamic
batchers as concurrent unary calls do. Both ends that serve streams use this: rayton's gRPC
frontend (wire bytes in) and a model's replica reached through HAProxy (requests parsed by
Serve's gRPC ingress).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TypeVar

from deployments.grpc import codec
from repo_adapter.errors import InferenceServerError

logger = logging.getLogger(__name__)

# Requests of one ModelStreamInfer stream that may be in flight before reading pauses.
STREAM_WINDOW = 256

Message = TypeVar("Message")


async def stream_replies(
    requests: AsyncIterator[Message], answer: Callable[[Message], Awaitable[bytes]]
) -> AsyncIterator[bytes]:
    """``answer(request)`` for each request as it arrives, yielded in request order.

    ``answer`` returns a serialized ``ModelStreamInferResponse`` and should not raise (see
    :func:`error_reply`); reading stops when the client ends the stream, and a failed read
    (the client went away) is raised once every earlier reply was yielded.
    """
    pending: asyncio.Queue[asyncio.Future | None] = asyncio.Queue(STREAM_WINDOW)

    async def read() -> None:
        try:
            async for request in requests:
                await pending.put(asyncio.ensure_future(answer(request)))
        finally:
            await pending.put(None)

    reader = asyncio.ensure_future(read())
    try:
        while (task := await pending.get()) is not None:
            yield await task
        await reader  # re-raises a failed read
    finally:
        reader.cancel()
        while not pending.empty():
            task = pending.get_nowait()
            if task is not None:
                task.cancel()


async def answer_or_error(reply: Awaitable[bytes], request_id: str) -> bytes:
    """``reply``, or the stream's error message for the request when it fails."""
    try:
        return await reply
    except Exception as err:
        return error_reply(err, request_id)


def error_reply(err: Exception, request_id: str) -> bytes:
    """The ``ModelStreamInferResponse`` Triton sends for a request of a stream that failed."""
    if not isinstance(err, InferenceServerError):
        logger.exception("gRPC ModelStreamInfer request failed", exc_info=err)
    return codec.stream_response(error=err, request_id=request_id).SerializeToString()
