"""A sequence's requests run in the replica that holds the sequence, Ray-free.

A sequence model's state lives in one replica (its :mod:`~deployments.core.batching.sequences`
batcher and the model's own memory), while a request may enter through any replica: HAProxy
picks one per HTTP request, a gRPC stream is pinned to the replica its first request reached.
Each replica therefore decides, before its batcher sees a request:

* a request of a sequence held here, or a START: here. A START claims the sequence in the
  model's :class:`SequenceDirectory` before it runs, so every replica can find it;
* any other request of a sequence: the directory names its replica, and the request is
  forwarded there (one hop, only when it entered elsewhere). A sequence the directory does
  not know runs here, where the batcher answers Triton's error for a sequence not started;
* a forwarded request that reached another replica than the one it was sent to was sent to a
  replica that is gone (Serve's router gives it to any other): it fails with UNAVAILABLE, so a
  lost replica fails only its own sequences and never restarts them silently.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import aclosing
from typing import Protocol

from repo_adapter.errors import InferenceServerError, StatusCode
from repo_adapter.inference_types import InferRequest, InferResponse
from repo_adapter.response_stream import StreamedResponse

RunHere = Callable[[InferRequest], Awaitable[InferResponse]]
StreamHere = Callable[[InferRequest], AsyncIterator[StreamedResponse]]


class SequenceDirectory(Protocol):
    """Which replica holds each running sequence of one model, shared by its replicas."""

    async def claim(self, sequence: str, replica: str) -> str | None:
        """``replica`` holds ``sequence`` from now on (a START, wherever it ran before); the
        replica that held it until now (None: none)."""
        ...

    async def owner(self, sequence: str) -> str | None:
        """The replica holding ``sequence`` (None: not known)."""
        ...

    def release(self, sequence: str, replica: str) -> None:
        """``sequence`` ended or idled out in ``replica`` (no answer awaited)."""
        ...


class SequenceForwarder(Protocol):
    """Sends a request to one named replica of the same model."""

    async def forward(self, replica: str, request: InferRequest) -> InferResponse: ...

    def forward_stream(
        self, replica: str, request: InferRequest
    ) -> AsyncIterator[StreamedResponse]: ...

    def drop(self, replica: str, sequence: str) -> None:
        """Tell ``replica`` that ``sequence`` started again elsewhere (no answer awaited)."""
        ...


def sequence_name(request: InferRequest) -> str | None:
    """The directory's name of ``request``'s sequence: its correlation id, an integer and a
    string kept apart (None without a usable one: the batcher answers Triton's error)."""
    return route_sequence_name(request.parameters.get("sequence_id"))


def route_sequence_name(value: object) -> str | None:
    """:func:`sequence_name` of a correlation id as sent."""
    if isinstance(value, bool) or value in (None, 0, ""):
        return None
    if isinstance(value, int):
        return f"i:{value}"
    if isinstance(value, str):
        return f"s:{value}"
    return None


def sequence_lost(model_name: str, request: InferRequest) -> InferenceServerError:
    """UNAVAILABLE for a request of a sequence whose replica stopped."""
    return InferenceServerError(
        f"sequence {request.parameters.get('sequence_id')} of model '{model_name}' was lost: "
        "the replica that held its state stopped; start the sequence again (with the START "
        "flag)",
        StatusCode.UNAVAILABLE,
    )


class SequenceRouting:
    """Where this replica runs each request of a sequence model (see the module's text).

    ``idle_s`` is the model's ``max_sequence_idle_microseconds``: a sequence this replica has
    not seen for longer is released in the directory, as the batcher releases it.
    """

    def __init__(
        self,
        model_name: str,
        replica: str,
        directory: SequenceDirectory,
        forwarder: SequenceForwarder,
        idle_s: float,
    ) -> None:
        self.model_name = model_name
        self.replica = replica
        self._directory = directory
        self._forwarder = forwarder
        self._idle_s = idle_s
        self._held: dict[str, float] = {}  # sequence -> when its last request came here
        self._last_sweep = time.monotonic()

    async def infer(self, request: InferRequest, here: RunHere) -> InferResponse:
        """``request``'s response, run by ``here`` or by the replica holding its sequence."""
        sequence, owner = await self._place(request)
        if owner is not None:
            return await self._forwarder.forward(owner, request)
        try:
            return await here(request)
        finally:
            self._after(sequence, request)

    async def infer_stream(
        self, request: InferRequest, here: StreamHere
    ) -> AsyncIterator[StreamedResponse]:
        """``request``'s responses (a decoupled model's), from wherever its sequence is."""
        sequence, owner = await self._place(request)
        if owner is not None:
            async with aclosing(self._forwarder.forward_stream(owner, request)) as items:
                async for item in items:
                    yield item
            return
        try:
            async with aclosing(here(request)) as items:
                async for item in items:
                    yield item
        finally:
            self._after(sequence, request)

    async def infer_forwarded(
        self, request: InferRequest, sent_to: str, here: RunHere
    ) -> InferResponse:
        """A request another replica forwarded to ``sent_to``, run here."""
        self._check_forwarded(request, sent_to)
        try:
            return await here(request)
        finally:
            self._after(sequence_name(request), request)

    async def stream_forwarded(
        self, request: InferRequest, sent_to: str, here: StreamHere
    ) -> AsyncIterator[StreamedResponse]:
        """A streamed request another replica forwarded to ``sent_to``, run here."""
        self._check_forwarded(request, sent_to)
        try:
            async with aclosing(here(request)) as items:
                async for item in items:
                    yield item
        finally:
            self._after(sequence_name(request), request)

    def drop(self, sequence: str, sent_to: str) -> None:
        """``sequence`` started again on another replica: its next requests go there."""
        if sent_to == self.replica:
            self._held.pop(sequence, None)

    def _check_forwarded(self, request: InferRequest, sent_to: str) -> None:
        """Refuse a request forwarded to ``sent_to`` that reached this replica instead.

        Raises:
            InferenceServerError: UNAVAILABLE: the replica that held the sequence is gone.
        """
        if sent_to != self.replica:
            raise sequence_lost(self.model_name, request)
        sequence = sequence_name(request)
        if sequence in self._held:
            self._held[sequence] = time.monotonic()

    async def _place(self, request: InferRequest) -> tuple[str | None, str | None]:
        """``request``'s sequence name, and the other replica to run it (None: here)."""
        sequence = sequence_name(request)
        if sequence is None:
            return None, None
        now = time.monotonic()
        self._release_idle(now)
        if request.parameters.get("sequence_start"):
            previous = await self._directory.claim(sequence, self.replica)
            if previous not in (None, self.replica):
                self._forwarder.drop(previous, sequence)  # Triton restarts it: here, now
            self._held[sequence] = now
            return sequence, None
        if sequence in self._held:
            self._held[sequence] = now
            return sequence, None
        owner = await self._directory.owner(sequence)
        if owner is None or owner == self.replica:
            return sequence, None  # not running anywhere: the batcher answers Triton's error
        return sequence, owner

    def _after(self, sequence: str | None, request: InferRequest) -> None:
        """A request of ``sequence`` ran here: an END releases it."""
        if sequence is None or not request.parameters.get("sequence_end"):
            return
        if self._held.pop(sequence, None) is not None:
            self._directory.release(sequence, self.replica)

    def _release_idle(self, now: float) -> None:
        """Release the sequences idle here for longer than the model lets them be, at most
        once per idle period (the batcher has forgotten them already)."""
        if now - self._last_sweep < self._idle_s:
            return
        self._last_sweep = now
        idle = [s for s, seen in self._held.items() if now - seen > self._idle_s]
        for sequence in idle:
            del self._held[sequence]
            self._directory.release(sequence, self.replica)
