"""Hooks the serving layer installs, and the context of the model call in progress.

``triton_python_backend_utils`` functions that reach outside the model (BLS ``exec()``,
``load_model()``) cannot know which server they run in. The serving layer installs:

* a BLS dispatcher with :func:`set_bls_dispatcher`: an async callable taking a
  :class:`repo_adapter.inference_types.InferRequest` and returning an
  :class:`repo_adapter.inference_types.InferResponse`, or raising
  :class:`repo_adapter.errors.InferenceServerError`;
* optionally a model repository hook with :func:`set_model_repository_hook`, which serves
  ``pb_utils.load_model`` / ``unload_model`` / ``is_model_ready``.

Both are awaited on the event loop the python backend runs on (the replica's loop). A
synchronous ``execute`` runs on a worker thread, so a blocking ``exec()`` submits the coroutine
to that loop with :func:`asyncio.run_coroutine_threadsafe` and waits; the loop is free because
the backend awaits the worker thread. The loop comes from the context of the model call (set
by the backend around ``initialize``/``execute``/``finalize``), or, for threads the model starts
itself, from the last loop bound with :func:`bind_event_loop`.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import queue
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from repo_adapter.inference_types import InferRequest, InferResponse
from repo_adapter.response_stream import StreamedResponse

BlsDispatcher = Callable[[InferRequest], Awaitable[InferResponse]]
# Runs a BLS request on the calling thread and returns its response (raising as a
# BlsDispatcher does).
BlockingBlsDispatcher = Callable[[InferRequest], InferResponse]
# A BLS request's responses, a decoupled target's several (``exec(decoupled=True)``).
BlsStreamDispatcher = Callable[[InferRequest], AsyncIterator[StreamedResponse]]
BlockingBlsStreamDispatcher = Callable[[InferRequest], Iterator[StreamedResponse]]


class ModelRepositoryHook(Protocol):
    """What ``pb_utils.load_model``/``unload_model``/``is_model_ready`` call.

    Each method may be synchronous or return an awaitable (awaited on the backend's loop). A
    failure is reported by raising; the message reaches the model as a TritonModelException.
    """

    def load_model(self, model_name: str, config: str, files: dict[str, bytes] | None) -> Any:
        """Load or reload ``model_name``, optionally with a JSON config override and files."""

    def unload_model(self, model_name: str, unload_dependents: bool) -> Any:
        """Unload ``model_name``."""

    def is_model_ready(self, model_name: str, model_version: str) -> Any:
        """Whether ``model_name`` (``model_version``, "" for any) is ready."""


@dataclass(frozen=True)
class ModelCall:
    """The model method running in the current thread or task."""

    phase: str  # "auto_complete", "initialize", "execute" or "finalize"
    model_name: str
    version_dir: Path | None
    loop: asyncio.AbstractEventLoop | None


class LoopUnavailableError(RuntimeError):
    """A coroutine cannot be run to completion from here (no loop, or it would deadlock)."""


_current_call: contextvars.ContextVar[ModelCall | None] = contextvars.ContextVar(
    "rayton_python_model_call", default=None
)
_state: dict[str, Any] = {
    "dispatcher": None,
    "stream_dispatcher": None,
    "repository_hook": None,
    "loop": None,
}
_thread_state = threading.local()


def set_bls_dispatcher(dispatcher: BlsDispatcher | None) -> None:
    """Install (or with None remove) the async callable that runs BLS requests."""
    _state["dispatcher"] = dispatcher


def get_bls_dispatcher() -> BlsDispatcher | None:
    """The installed BLS dispatcher, or None."""
    return _state["dispatcher"]


def set_bls_stream_dispatcher(dispatcher: BlsStreamDispatcher | None) -> None:
    """Install (or with None remove) what runs BLS requests whose responses are iterated."""
    _state["stream_dispatcher"] = dispatcher


def get_bls_stream_dispatcher() -> BlsStreamDispatcher | None:
    return _state["stream_dispatcher"]


def set_thread_bls_stream_dispatcher(dispatcher: BlockingBlsStreamDispatcher | None) -> None:
    """The calling thread's blocking counterpart of the stream dispatcher (a stub's instance
    thread reads its host's replies itself)."""
    _thread_state.stream_dispatcher = dispatcher


def get_thread_bls_stream_dispatcher() -> BlockingBlsStreamDispatcher | None:
    return getattr(_thread_state, "stream_dispatcher", None)


def set_thread_bls_dispatcher(dispatcher: BlockingBlsDispatcher | None) -> None:
    """Install (or with None remove) a blocking BLS dispatcher for the calling thread: a
    blocking ``exec()`` on this thread calls it directly instead of going through the loop
    (a stub's instance thread sends its calls to its host itself)."""
    _thread_state.dispatcher = dispatcher


def get_thread_bls_dispatcher() -> BlockingBlsDispatcher | None:
    """The calling thread's blocking BLS dispatcher, or None."""
    return getattr(_thread_state, "dispatcher", None)


def set_model_repository_hook(hook: ModelRepositoryHook | None) -> None:
    """Install (or with None remove) the hook behind ``pb_utils.load_model`` and friends."""
    _state["repository_hook"] = hook


def get_model_repository_hook() -> ModelRepositoryHook | None:
    """The installed model repository hook, or None."""
    return _state["repository_hook"]


def bind_event_loop(loop: asyncio.AbstractEventLoop | None) -> None:
    """The loop used by BLS calls made outside a model call (threads the model started)."""
    _state["loop"] = loop


@contextlib.contextmanager
def model_call(
    phase: str,
    model_name: str,
    version_dir: Path | None,
    loop: asyncio.AbstractEventLoop | None,
) -> Iterator[ModelCall]:
    """Mark the current thread/task as running a model method (restored on exit)."""
    call = ModelCall(phase, model_name, version_dir, loop)
    token = _current_call.set(call)
    try:
        yield call
    finally:
        _current_call.reset(token)


def current_call() -> ModelCall | None:
    """The model call in progress in this thread/task, or None."""
    return _current_call.get()


def server_loop() -> asyncio.AbstractEventLoop | None:
    """The loop BLS calls run on from here: the current model call's, else the bound one."""
    return _target_loop()


def _target_loop() -> asyncio.AbstractEventLoop | None:
    call = _current_call.get()
    if call is not None and call.loop is not None:
        return call.loop
    return _state["loop"]


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def _loop_to_block_on(what: str) -> asyncio.AbstractEventLoop:
    """The backend's loop, which the calling thread may wait on.

    Raises:
        LoopUnavailableError: no loop is running, or the caller *is* that loop's thread.
    """
    loop = _target_loop()
    if loop is None or loop.is_closed() or not loop.is_running():
        raise LoopUnavailableError(f"{what} needs a running server event loop and none is bound")
    if _running_loop() is loop:
        raise LoopUnavailableError(
            f"{what} would block the event loop that has to serve it; in 'async def execute' "
            "use the awaitable variant (await request.async_exec())"
        )
    return loop


def run_blocking(make_coroutine: Callable[[], Coroutine[Any, Any, Any]], what: str) -> Any:
    """Run a coroutine on the backend's loop from synchronous code and return its result.

    Raises:
        LoopUnavailableError: when no loop is running, or when the caller *is* that loop's
            thread (waiting would deadlock it: use the async variant there).
    """
    loop = _loop_to_block_on(what)
    return asyncio.run_coroutine_threadsafe(make_coroutine(), loop).result()


_END = object()


def iterate_blocking(make_iterator: Callable[[], AsyncIterator[Any]], what: str) -> Iterator[Any]:
    """Iterate an async iterator made on the backend's loop from synchronous code: each item
    as the loop produces it.

    Raises:
        LoopUnavailableError: as :func:`run_blocking`, before anything runs.
    """
    loop = _loop_to_block_on(what)
    items: queue.Queue[Any] = queue.Queue()

    async def pump() -> None:
        try:
            async for item in make_iterator():
                items.put(item)
        except BaseException as err:  # handed to the reading thread
            items.put(err)
        finally:
            items.put(_END)

    asyncio.run_coroutine_threadsafe(pump(), loop)

    def read() -> Iterator[Any]:
        while (item := items.get()) is not _END:
            if isinstance(item, BaseException):
                raise item
            yield item

    return read()


async def run_async(make_coroutine: Callable[[], Coroutine[Any, Any, Any]]) -> Any:
    """Await a coroutine on the backend's loop from any running loop."""
    loop = _target_loop()
    if loop is None or loop is _running_loop() or loop.is_closed() or not loop.is_running():
        return await make_coroutine()
    return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(make_coroutine(), loop))
