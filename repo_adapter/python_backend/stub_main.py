"""A python model instance in a process of its own: the stub its host starts.

``python -m repo_adapter.python_backend.stub_main BATCHES_FD CONTROL_FD IN_FD OUT_FD``: the
stub's ends of its two channels to the host (:mod:`repo_adapter.python_backend.stub_channel`)
and the batch channel's shared-memory arenas (the host's, the stub's). On the batch
channel the instance's own thread (the one ``initialize`` ran on) receives each batch, runs
it and sends its results back, with no other thread in between; everything else travels on
the control channel, read by a thread of its own: the model's calls out of its process (BLS
requests, model control) and their replies, log lines (the host's logging writes them),
metric snapshots, cancellations, start and stop.

The stub runs one :class:`repo_adapter.backends.python.PythonBackend` instance, exactly as a
replica runs it in process. It exits when its host closes a channel, so a stub never
outlives its host.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import ctypes
import ctypes.util
import logging
import os
import socket
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from tritonclient.grpc import model_config_pb2 as mc

from repo_adapter.backends.base import Execution, ModelVersion
from repo_adapter.backends.python import PythonBackend
from repo_adapter.errors import InferenceServerError, StatusCode
from repo_adapter.inference_types import InferRequest, InferResponse
from repo_adapter.python_backend import runtime
from repo_adapter.python_backend.logs import MODEL_LOGGER_NAME
from repo_adapter.python_backend.metrics import collect_metrics
from repo_adapter.python_backend.stub_channel import Arena, ChannelClosedError, StubChannel
from repo_adapter.python_backend.stub_messages import (
    BatchDone,
    BlsCall,
    BlsStreamed,
    CallReply,
    CancelBatch,
    CancelResponses,
    CollectMetrics,
    DecoupledResponse,
    HostCall,
    InstanceStarted,
    InstanceStopped,
    LoadModelCall,
    LogLine,
    MetricsCollected,
    ModelReadyCall,
    RunBatch,
    StartInstance,
    StopInstance,
    UnloadModelCall,
    plain_error,
)
from repo_adapter.response_stream import StreamedResponse


class _ForwardingHandler(logging.Handler):
    """Sends this process's log records to the host."""

    def __init__(self, channel: StubChannel) -> None:
        super().__init__()
        self._channel = channel

    def emit(self, record: logging.LogRecord) -> None:
        exc_text = None
        if record.exc_info:
            exc_text = logging.Formatter().formatException(record.exc_info)
        line = LogLine(
            record.name,
            record.levelno,
            record.getMessage(),
            record.pathname,
            record.lineno,
            exc_text,
        )
        with contextlib.suppress(ChannelClosedError):
            self._channel.send(line)


class _HostSink:
    """A decoupled request's responses, sent to the host as the model sends them (on the
    control channel: they may come after ``execute`` returned, from any thread)."""

    def __init__(self, stub: Stub, batch_id: int, index: int) -> None:
        self._stub = stub
        self._key = (batch_id, index)
        self.cancelled = False

    def send(self, result: InferResponse | InferenceServerError | None, final: bool) -> None:
        if final:
            self._stub.forget_sink(self._key)
        self._stub._reply(DecoupledResponse(*self._key, result, final))


class Stub:
    """The stub's side of both channels."""

    def __init__(
        self, batches: StubChannel, control: StubChannel, loop: asyncio.AbstractEventLoop
    ) -> None:
        self._batches = batches
        self._control = control
        self._loop = loop
        self._backend: PythonBackend | None = None
        self._running_id = 0  # the batch running now (0: none)
        self._running_on_loop: Future[Execution] | None = None
        self._calls: dict[int, Future[Any]] = {}
        self._calls_lock = threading.Lock()
        self._next_call = 0
        self._next_batch_call = 0  # BLS calls on the batch channel count down from -1
        self._stopping = False  # the host asked to stop during a batch
        self._sinks: dict[tuple[int, int], _HostSink] = {}  # decoupled requests still open
        self._sinks_lock = threading.Lock()
        self.stopped = loop.create_future()

    # ------------------------------------------------------------------ control channel

    def read_control(self) -> None:
        """The control reader thread; the host gone ends the process."""
        while True:
            try:
                message = self._control.receive()
            except ChannelClosedError:
                os._exit(0)
            if isinstance(message, CallReply):
                self._settle_call(message)
            elif isinstance(message, CancelBatch):
                self._cancel(message.batch_id)
            elif isinstance(message, CancelResponses):
                with self._sinks_lock:
                    sink = self._sinks.get((message.batch_id, message.index))
                if sink is not None:
                    sink.cancelled = True
            elif isinstance(message, CollectMetrics):
                self._reply(MetricsCollected(message.call_id, collect_metrics()))
            elif isinstance(message, StartInstance):
                self._loop.call_soon_threadsafe(self._loop.create_task, self._start(message))

    def _reply(self, message: Any) -> None:
        try:
            self._control.send(message)
        except ChannelClosedError:
            os._exit(0)

    async def _start(self, message: StartInstance) -> None:
        _follow_log_level(message.log_level)
        config = mc.ModelConfig()
        config.ParseFromString(message.config_bytes)
        model = ModelVersion(
            message.model_name,
            message.version,
            config,
            Path(message.model_dir),
            Path(message.backend_file) if message.backend_file else None,
        )
        backend = PythonBackend(model, message.instance)
        try:
            # load() waits for initialize() on the instance's thread; the loop stays free
            # for the BLS calls initialize may make.
            await asyncio.to_thread(backend.load)
        except Exception as err:
            self._reply(InstanceStarted(plain_error(err, StatusCode.UNAVAILABLE)))
            return
        self._backend = backend
        backend.run_on_instance_thread(self._run_batches)
        self._reply(InstanceStarted(None))

    def _cancel(self, batch_id: int) -> None:
        if batch_id != self._running_id or self._backend is None:
            return
        on_loop = self._running_on_loop
        if on_loop is not None:
            on_loop.cancel()
        else:
            self._backend.cancel_running()

    # ------------------------------------------------------------------ batch channel

    def _run_batches(self) -> None:
        """On the instance's thread: each batch as it arrives, until the host stops us.

        A blocking ``exec()`` on this thread sends its request on the batch channel and
        reads the reply itself (:meth:`_bls_on_batch_channel`): no other thread in between.
        """
        backend = self._backend
        assert backend is not None
        runtime.set_thread_bls_dispatcher(self._bls_on_batch_channel)
        runtime.set_thread_bls_stream_dispatcher(self._bls_stream_on_batch_channel)
        while not self._stopping:
            try:
                message = self._batches.receive()
            except ChannelClosedError:
                os._exit(0)
            if isinstance(message, StopInstance):
                break
            if isinstance(message, (BlsStreamed, CallReply)):
                continue  # the rest of a streamed BLS call the model stopped reading
            assert isinstance(message, RunBatch)
            _follow_log_level(message.log_level)
            self._running_id = message.batch_id
            if backend.config.model_transaction_policy.decoupled:
                self._attach_sinks(message.batch_id, message.requests)
            outcome = self._run(backend, message.requests)
            if backend.config.model_transaction_policy.decoupled:
                self._forget_failed(message.batch_id, outcome)
            self._running_id = 0
            try:
                self._batches.send(BatchDone(message.batch_id, outcome))
            except ChannelClosedError:
                os._exit(0)
        # finalize() needs the instance's thread, which is ours until we return.
        runtime.set_thread_bls_dispatcher(None)
        runtime.set_thread_bls_stream_dispatcher(None)
        self._loop.call_soon_threadsafe(self._loop.create_task, self._stop())

    def _attach_sinks(self, batch_id: int, requests: list[InferRequest]) -> None:
        """Give each request of a decoupled model's batch its way back to the host."""
        with self._sinks_lock:
            for index, request in enumerate(requests):
                sink = self._sinks[(batch_id, index)] = _HostSink(self, batch_id, index)
                request.responses = sink

    def _forget_failed(self, batch_id: int, outcome: Execution | InferenceServerError) -> None:
        """Requests whose execution failed send nothing more: the host ends them."""
        with self._sinks_lock:
            for index in range(len(outcome) if isinstance(outcome, Execution) else 0):
                if isinstance(outcome[index], InferenceServerError):
                    self._sinks.pop((batch_id, index), None)
            if isinstance(outcome, InferenceServerError):
                for key in [k for k in self._sinks if k[0] == batch_id]:
                    del self._sinks[key]

    def forget_sink(self, key: tuple[int, int]) -> None:
        with self._sinks_lock:
            self._sinks.pop(key, None)

    def _bls_on_batch_channel(self, request: InferRequest) -> InferResponse:
        """A BLS request from the running batch, answered by the host on the batch channel.

        Raises:
            InferenceServerError: the host's error for the request.
        """
        self._next_batch_call -= 1  # negative: apart from the control channel's call ids
        call_id = self._next_batch_call
        try:
            # Not through the arena: the batch's own messages use it.
            self._batches.send(BlsCall(call_id, request), use_arena=False)
            while True:
                message = self._batches.receive()
                if isinstance(message, StopInstance):
                    self._stopping = True  # after this batch
                elif isinstance(message, CallReply) and message.call_id == call_id:
                    break
        except ChannelClosedError:
            os._exit(0)
        if message.error is not None:
            raise message.error
        assert isinstance(message.value, InferResponse)
        return message.value

    def _bls_stream_on_batch_channel(self, request: InferRequest) -> Iterator[StreamedResponse]:
        """A streamed BLS request from the running batch: the host sends each response on
        the batch channel as the target sends it, read here as the model iterates.

        Raises:
            InferenceServerError: the host's error for the request.
        """
        self._next_batch_call -= 1
        call_id = self._next_batch_call
        try:
            self._batches.send(BlsCall(call_id, request, stream=True), use_arena=False)
            while True:
                message = self._batches.receive()
                if isinstance(message, StopInstance):
                    self._stopping = True  # after this batch
                elif isinstance(message, BlsStreamed) and message.call_id == call_id:
                    yield message.item
                    if message.item.final:
                        return
                elif isinstance(message, CallReply) and message.call_id == call_id:
                    if message.error is not None:
                        raise message.error
                    return
        except ChannelClosedError:
            os._exit(0)

    def _run(
        self, backend: PythonBackend, requests: list[InferRequest]
    ) -> Execution | InferenceServerError:
        try:
            if not backend.runs_on_loop:
                return backend.execute_here(requests, self._loop)
            running = asyncio.run_coroutine_threadsafe(backend.execute(requests), self._loop)
            self._running_on_loop = running
            try:
                return running.result()
            finally:
                self._running_on_loop = None
        except (asyncio.CancelledError, concurrent.futures.CancelledError):
            return InferenceServerError("the request was cancelled", StatusCode.CANCELLED)
        except Exception as err:  # the whole batch fails with it
            return plain_error(err, StatusCode.INTERNAL)

    async def _stop(self) -> None:
        backend, self._backend = self._backend, None
        if backend is not None:
            await asyncio.to_thread(backend.unload)
        self._reply(InstanceStopped())
        self.stopped.set_result(None)

    # ------------------------------------------------------------------ to the host

    async def call_host(self, make_call: Any) -> Any:
        """Send the call ``make_call(call_id)`` builds and await the host's reply."""
        future: Future[Any] = Future()
        with self._calls_lock:
            self._next_call += 1
            call_id = self._next_call
            self._calls[call_id] = future
        call: HostCall = make_call(call_id)
        self._reply(call)
        return await asyncio.wrap_future(future)

    def _settle_call(self, reply: CallReply) -> None:
        with self._calls_lock:
            future = self._calls.pop(reply.call_id, None)
        if future is None:
            return
        if reply.error is not None:
            future.set_exception(reply.error)
        else:
            future.set_result(reply.value)


class _HostRepository:
    """``pb_utils.load_model`` and friends, answered by the host."""

    def __init__(self, stub: Stub) -> None:
        self._stub = stub

    async def load_model(self, model_name: str, config: str, files: dict[str, bytes] | None):
        return await self._stub.call_host(lambda i: LoadModelCall(i, model_name, config, files))

    async def unload_model(self, model_name: str, unload_dependents: bool):
        return await self._stub.call_host(
            lambda i: UnloadModelCall(i, model_name, unload_dependents)
        )

    async def is_model_ready(self, model_name: str, model_version: str):
        return await self._stub.call_host(lambda i: ModelReadyCall(i, model_name, model_version))


def _model_logger() -> logging.Logger:
    return logging.getLogger(MODEL_LOGGER_NAME)


def _follow_log_level(level: int) -> None:
    """Take the host's level for model log lines (setting it clears logging's caches:
    only when it changed)."""
    model_logger = _model_logger()
    if model_logger.level != level:
        model_logger.setLevel(level)


async def _serve(batches: StubChannel, control: StubChannel) -> None:
    loop = asyncio.get_running_loop()
    stub = Stub(batches, control, loop)

    async def bls(request: InferRequest) -> InferResponse:
        return await stub.call_host(lambda i: BlsCall(i, request))

    async def bls_stream(request: InferRequest) -> AsyncIterator[StreamedResponse]:
        # The host answers a streamed call on the control channel with every response.
        for item in await stub.call_host(lambda i: BlsCall(i, request, stream=True)):
            yield item

    runtime.bind_event_loop(loop)
    runtime.set_bls_dispatcher(bls)
    runtime.set_bls_stream_dispatcher(bls_stream)
    runtime.set_model_repository_hook(_HostRepository(stub))
    threading.Thread(target=stub.read_control, name="stub-control", daemon=True).start()
    await stub.stopped


# glibc's mallopt parameters, and the values the stub uses.
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
_MMAP_THRESHOLD_BYTES = 32 << 20  # glibc's largest
_TRIM_THRESHOLD_BYTES = 256 << 20


def _keep_freed_memory() -> None:
    """Let freed tensor memory be reused instead of returned to the system: each batch's
    tensors are fresh multi-megabyte buffers, and glibc's defaults map and fault them in
    anew every time (five 900 KB images took 2 ms to copy in, 0.2 ms with this)."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD_BYTES)
        libc.mallopt(_M_TRIM_THRESHOLD, _TRIM_THRESHOLD_BYTES)


def main(argv: list[str]) -> None:
    _keep_freed_memory()
    batches_fd, control_fd, in_fd, out_fd = map(int, argv[1:5])
    batches = StubChannel(socket.socket(fileno=batches_fd), Arena(out_fd), Arena(in_fd))
    control = StubChannel(socket.socket(fileno=control_fd))
    root = logging.getLogger()
    root.handlers[:] = [_ForwardingHandler(control)]
    root.setLevel(logging.INFO)
    try:
        asyncio.run(_serve(batches, control))
    finally:
        batches.close()
        control.close()


if __name__ == "__main__":
    main(sys.argv)
