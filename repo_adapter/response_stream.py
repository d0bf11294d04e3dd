"""A request's responses from a decoupled model, delivered as the model sends them.

A decoupled model (``model_transaction_policy { decoupled: true }``) answers a request with
zero or more responses and a final flag, from ``execute`` or later from threads of its own.
The serving side gives such a request a :class:`ResponseStream` (``InferRequest.responses``);
the backend sends each response into it from whatever thread it runs on, and the transport
reads it with ``async for`` on the event loop until the final one.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Protocol

from repo_adapter.errors import InferenceServerError
from repo_adapter.inference_types import InferResponse


@dataclass(frozen=True)
class StreamedResponse:
    """One response of a request: its outputs or its error (None: the final flag came alone,
    ``TRITONSERVER_RESPONSE_COMPLETE_FINAL`` without a response), and whether it is the
    request's last."""

    result: InferResponse | InferenceServerError | None
    final: bool


class ResponseSink(Protocol):
    """Where a backend sends a decoupled request's responses (any thread)."""

    def send(self, result: InferResponse | InferenceServerError | None, final: bool) -> None:
        """One response (None: the final flag alone); nothing after a final one."""

    @property
    def cancelled(self) -> bool:
        """Whether the client stopped reading (``is_cancelled()`` for the model)."""


class ResponseStream:
    """A :class:`ResponseSink` read with ``async for`` on the event loop that made it.

    Sends are thread-safe and never block; a reader that has stopped
    (:meth:`cancel`) makes later sends no-ops. Iteration ends after the final response.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self._loop = loop or asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        self._lock = threading.Lock()
        self._items: deque[StreamedResponse] = deque()
        self._waiter: asyncio.Future[None] | None = None
        self._wake_pending = False  # a wake-up is scheduled on the loop already
        self._closed = False  # the final response was sent, or the reader stopped
        self._cancelled = False

    def send(self, result: InferResponse | InferenceServerError | None, final: bool) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = final
            self._items.append(StreamedResponse(result, final))
            if self._wake_pending:
                return  # one wake-up per burst of responses, not one per response
            self._wake_pending = True
        if threading.get_ident() == self._loop_thread:
            self._wake()
            return
        with contextlib.suppress(RuntimeError):  # the loop closed: nobody reads any more
            self._loop.call_soon_threadsafe(self._wake)

    def fail(self, error: InferenceServerError) -> None:
        """End the stream with ``error`` unless its final response came already."""
        self.send(error, True)

    @property
    def closed(self) -> bool:
        """Whether the final response was sent (or the reader stopped)."""
        return self._closed

    @property
    def cancelled(self) -> bool:
        return self._cancelled

    def cancel(self) -> None:
        """The reader stopped: later responses are dropped and the model may ask."""
        with self._lock:
            self._cancelled = True
            self._closed = True
            self._items.clear()

    def _wake(self) -> None:
        with self._lock:
            self._wake_pending = False
            waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def __aiter__(self) -> AsyncIterator[StreamedResponse]:
        while True:
            with self._lock:
                items = list(self._items)
                self._items.clear()
                if not items:
                    self._waiter = self._loop.create_future()
                    waiter = self._waiter
            if not items:
                await waiter
                continue
            for item in items:
                yield item
                if item.final:
                    return
