"""A Triton Python model instance in a stub process of its own, as Triton runs every one.

The replica keeps the batcher and the request path; each instance's ``TritonPythonModel``
runs in a child process (:mod:`repo_adapter.python_backend.stub_main`) that receives whole
batches over a local socket and answers with their results. A model that crashes its
process (a segfault in native code, ``os._exit``) fails the requests it was running and
nothing else: the replica and its other models keep serving, and the instance is started
again (``initialize`` included) while its next requests are answered UNAVAILABLE.

The host's side of the model's calls out of its process runs here: BLS requests and model
control go to the hooks installed in this process (:mod:`repo_adapter.python_backend.runtime`)
on the replica's event loop, log lines to this process's logging, custom metrics to
:func:`repo_adapter.python_backend.collect_metrics`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import inspect
import itertools
import logging
import socket
import subprocess
import threading
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

from repo_adapter.backends.base import Backend, BatchChain, Execution, InstanceSpec, ModelVersion
from repo_adapter.backends.stub_launcher import LaunchedStub, launcher
from repo_adapter.errors import InferenceServerError, StatusCode
from repo_adapter.inference_types import InferRequest
from repo_adapter.python_backend import runtime
from repo_adapter.python_backend.logs import MODEL_LOGGER_NAME
from repo_adapter.python_backend.metrics import (
    CustomFamily,
    add_metrics_source,
    remove_metrics_source,
)
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
    for_stub,
    plain_error,
)
from repo_adapter.response_stream import ResponseSink, StreamedResponse

logger = logging.getLogger(__name__)

START_TIMEOUT_S = 600.0  # initialize() may download or compile for minutes
STOP_TIMEOUT_S = 30.0
METRICS_TIMEOUT_S = 2.0
# Restarts after a crash wait this long, doubling while the fresh process fails to start.
RESTART_BACKOFF_S = (0.0, 1.0, 2.0, 5.0, 10.0, 30.0)


@dataclass
class _Batch:
    """A batch sent to the stub, and where its result goes."""

    requests: list[InferRequest]
    chain: BatchChain
    drained: concurrent.futures.Future[None]  # set when the chain has no next batch


class _OneBatch:
    """The chain of a single :meth:`PythonStubBackend.execute`."""

    def __init__(self) -> None:
        self.outcome: concurrent.futures.Future[Execution] = concurrent.futures.Future()

    def next_batch(self) -> Sequence[InferRequest]:
        return ()

    def finished(self, requests: Sequence[InferRequest], outcome: Execution | Exception) -> None:
        if isinstance(outcome, Execution):
            self.outcome.set_result(outcome)
        else:
            self.outcome.set_exception(outcome)


class _StubProcess:
    """One running stub: its process, its two channels (batches; everything else) and the
    threads reading them."""

    def __init__(self, process: LaunchedStub, batches: StubChannel, control: StubChannel) -> None:
        self.process = process
        self.batches_channel = batches
        self.control_channel = control
        self.started: concurrent.futures.Future[None] = concurrent.futures.Future()
        self.stopped = threading.Event()
        self.batches: dict[int, _Batch] = {}
        # A decoupled model's requests still open, by (batch id, index): where they go.
        self.sinks: dict[tuple[int, int], ResponseSink] = {}
        self.metric_calls: dict[int, concurrent.futures.Future[list[CustomFamily]]] = {}
        self.busy: concurrent.futures.Future[None] | None = None  # the running chain's end
        self.loop: asyncio.AbstractEventLoop | None = None  # where finished batches are read
        self.lock = threading.Lock()
        self.lost = False

    def exit_description(self) -> str:
        try:
            code = self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            return "its process stopped answering"
        if code < 0:
            return f"its process was killed by signal {-code}"
        return f"its process exited with code {code}"


class PythonStubBackend(Backend):
    """A Triton Python model instance run in a stub process (``instance.own_process``)."""

    name = "python"

    def __init__(self, model: ModelVersion, instance: InstanceSpec) -> None:
        super().__init__(model, instance)
        self._stub: _StubProcess | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ids = itertools.count(1)
        self._unloading = False
        self._restarting = threading.Lock()  # held while a restart is under way
        self._swap = threading.Lock()  # a restarted stub replaces the lost one, or unload ends it
        self._last_metrics: list[CustomFamily] = []

    # ------------------------------------------------------------------ load / unload

    def load(self) -> None:
        """Start the stub process and wait for the model's ``initialize``.

        Raises:
            InferenceServerError: UNAVAILABLE when the process cannot start or the model
                fails to load (the stub's reason).
        """
        self._loop = _running_loop() or runtime.server_loop()
        self._stub = self._start()
        add_metrics_source(self, self._collect_metrics)

    def _start(self) -> _StubProcess:
        batches, their_batches = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        control, their_control = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        # The batch channel's large tensors go through shared memory: ours, then the stub's.
        arenas = (Arena.create("rayton-stub-in"), Arena.create("rayton-stub-out"))
        fds = (their_batches.fileno(), their_control.fileno(), *(a.fd for a in arenas))
        try:
            process = launcher().spawn(fds)
        except OSError as err:
            batches.close()
            control.close()
            for arena in arenas:
                arena.close()
            raise InferenceServerError(
                f"failed to start the stub process of Python model '{self.model.name}' "
                f"instance '{self.instance.name}': {err}",
                StatusCode.UNAVAILABLE,
            ) from None
        finally:
            their_batches.close()
            their_control.close()
        stub = _StubProcess(process, StubChannel(batches, *arenas), StubChannel(control))
        # Finished batches are read on the event loop that runs the batches (attached by
        # run_batches): a thread of our own would wait for the loop's GIL on each one.
        threading.Thread(
            target=self._read_control,
            args=(stub,),
            name=f"{self.instance.name}-stub",
            daemon=True,
        ).start()
        stub.control_channel.send(
            StartInstance(
                self.model.name,
                self.model.version,
                self.config.SerializeToString(),
                str(self.model.model_dir),
                self.instance,
                _model_log_level(),
                str(self.model.backend_file or ""),
            )
        )
        try:
            stub.started.result(timeout=START_TIMEOUT_S)
        except BaseException:
            _end(stub)
            raise
        return stub

    def unload(self) -> None:
        """Call the model's ``finalize()`` in its process and end the process."""
        with self._swap:
            self._unloading = True
            stub, self._stub = self._stub, None
        remove_metrics_source(self)
        if stub is None:
            return
        try:
            stub.batches_channel.send(StopInstance())  # ends its batch loop, then finalize()
            stub.stopped.wait(STOP_TIMEOUT_S)
        except ChannelClosedError:
            pass
        _end(stub)

    # ------------------------------------------------------------------ execute

    async def execute(self, requests: Sequence[InferRequest]) -> Execution:
        """Run one batch in the stub process; one result per request."""
        chain = _OneBatch()
        await self.run_batches(list(requests), chain)
        return await asyncio.wrap_future(chain.outcome)

    async def run_batches(self, requests: list[InferRequest], chain: BatchChain) -> None:
        """Run ``requests`` and then ``chain``'s following batches in the stub process.

        The stub's finished batches are read on this event loop, which hands the next batch
        over before it reports the finished one, so the stub goes straight on.
        """
        self._loop = asyncio.get_running_loop()
        stub = self._stub
        # One batch at a time on the batch channel (its arenas hold one message each): a
        # chain whose caller gave up may still be running.
        while stub is not None and stub.busy is not None and not stub.busy.done():
            await asyncio.wrap_future(stub.busy)
        if stub is None or stub.lost:
            chain.finished(requests, self._unavailable())
            return
        self._attach(stub, self._loop)
        drained: concurrent.futures.Future[None] = concurrent.futures.Future()
        stub.busy = drained
        batch_id = self._send(stub, _Batch(requests, chain, drained))
        if batch_id is None:
            return
        try:
            await asyncio.wrap_future(drained)
        except asyncio.CancelledError:
            # The caller gave up: is_cancelled() tells the model; its answer still ends
            # the batch.
            with contextlib.suppress(ChannelClosedError):
                stub.control_channel.send(CancelBatch(batch_id))
            raise

    def _send(self, stub: _StubProcess, batch: _Batch) -> int | None:
        """Hand ``batch`` to the stub; None when the stub is gone (the batch is failed)."""
        batch_id = next(self._ids)
        with stub.lock:
            lost = stub.lost
            if not lost:
                stub.batches[batch_id] = batch
                for index, request in enumerate(batch.requests):
                    if request.responses is not None:
                        stub.sinks[(batch_id, index)] = request.responses
        if not lost:
            try:
                level = _model_log_level()
                requests = [for_stub(r) for r in batch.requests]
                stub.batches_channel.send(RunBatch(batch_id, requests, level))
                return batch_id
            except ChannelClosedError:
                with stub.lock:
                    if stub.batches.pop(batch_id, None) is None:
                        return None  # the reader failed it already
                    _drop_sinks(stub, batch_id)
        batch.chain.finished(batch.requests, self._unavailable())
        batch.drained.set_result(None)
        return None

    # ------------------------------------------------------------------ from the stub

    def _attach(self, stub: _StubProcess, loop: asyncio.AbstractEventLoop) -> None:
        """Read ``stub``'s finished batches on ``loop`` (the loop of the latest run)."""
        previous = stub.loop
        if previous is loop:
            return
        stub.loop = loop
        fd = stub.batches_channel.fileno()
        if previous is not None and not previous.is_closed():
            previous.call_soon_threadsafe(previous.remove_reader, fd)
        loop.add_reader(fd, self._batch_ready, stub, loop)

    def _batch_ready(self, stub: _StubProcess, loop: asyncio.AbstractEventLoop) -> None:
        try:
            message = stub.batches_channel.receive()
        except ChannelClosedError:
            # The process is gone: the control channel's reader fails its batches.
            loop.remove_reader(stub.batches_channel.fileno())
            return
        if isinstance(message, BlsCall):  # a blocking exec() of the running batch
            loop.create_task(self._answer_on_batch_channel(stub, message))
            return
        try:
            self._batch_done(stub, message)
        except Exception:
            logger.exception("python model '%s': a finished batch failed", self.model.name)

    async def _answer_on_batch_channel(self, stub: _StubProcess, call: BlsCall) -> None:
        try:
            if call.stream:  # each response as it comes, read by the model as it iterates
                async for item in _bls_stream(call.request):
                    with contextlib.suppress(ChannelClosedError):
                        stub.batches_channel.send(BlsStreamed(call.call_id, item), use_arena=False)
                return
            answer = CallReply(call.call_id, value=await _host_call(call))
        except Exception as err:  # the model sees the error
            answer = CallReply(call.call_id, error=plain_error(err, StatusCode.INTERNAL))
        with contextlib.suppress(ChannelClosedError):
            # Not through the arena: the running batch's messages use it.
            stub.batches_channel.send(answer, use_arena=False)

    def _read_control(self, stub: _StubProcess) -> None:
        """The thread reading a stub's other messages, until the process ends."""
        while True:
            try:
                message = stub.control_channel.receive()
            except ChannelClosedError:
                break
            try:
                self._handle(stub, message)
            except Exception:
                logger.exception("python model '%s': a stub message failed", self.model.name)
        self._lost(stub)

    def _handle(self, stub: _StubProcess, message: Any) -> None:
        if isinstance(message, DecoupledResponse):
            self._deliver(stub, message)
        elif isinstance(message, LogLine):
            _emit(message)
        elif isinstance(message, (BlsCall, LoadModelCall, UnloadModelCall, ModelReadyCall)):
            self._answer(stub, message)
        elif isinstance(message, MetricsCollected):
            with stub.lock:
                future = stub.metric_calls.pop(message.call_id, None)
            if future is not None:
                future.set_result(message.families)
        elif isinstance(message, InstanceStarted):
            if message.error is None:
                stub.started.set_result(None)
            else:
                stub.started.set_exception(message.error)
        elif isinstance(message, InstanceStopped):
            stub.stopped.set()

    def _deliver(self, stub: _StubProcess, message: DecoupledResponse) -> None:
        """A decoupled model's response, to its request's sink; a sink nobody reads any more
        tells the model (``is_cancelled()``)."""
        key = (message.batch_id, message.index)
        with stub.lock:
            sink = stub.sinks.get(key)
            if sink is not None and (message.final or sink.cancelled):
                del stub.sinks[key]
        if sink is None:
            return
        if sink.cancelled:
            with contextlib.suppress(ChannelClosedError):
                stub.control_channel.send(CancelResponses(*key))
            return
        sink.send(message.result, message.final)

    def _batch_done(self, stub: _StubProcess, message: BatchDone) -> None:
        with stub.lock:
            batch = stub.batches.pop(message.batch_id, None)
            if batch is not None and stub.sinks:
                # Requests whose execution failed send nothing more (the caller ends them).
                outcome = message.outcome
                for index in range(len(batch.requests)):
                    if isinstance(outcome, InferenceServerError) or isinstance(
                        outcome[index], InferenceServerError
                    ):
                        stub.sinks.pop((message.batch_id, index), None)
        if batch is None:
            return
        following = list(batch.chain.next_batch())
        if following:
            self._send(stub, _Batch(following, batch.chain, batch.drained))
        batch.chain.finished(batch.requests, message.outcome)
        if not following:
            batch.drained.set_result(None)

    def _answer(self, stub: _StubProcess, call: HostCall) -> None:
        """Run one of the model's outside calls on the replica's loop; reply when done."""
        loop = self._loop or runtime.server_loop()
        if loop is None or loop.is_closed():
            error = InferenceServerError(
                "no server event loop to run the call on", StatusCode.UNAVAILABLE
            )
            stub.control_channel.send(CallReply(call.call_id, error=error))
            return

        def reply(done: concurrent.futures.Future[Any]) -> None:
            try:
                answer = CallReply(call.call_id, value=done.result())
            except BaseException as err:  # the model sees the error
                answer = CallReply(call.call_id, error=plain_error(err, StatusCode.INTERNAL))
            with contextlib.suppress(ChannelClosedError):
                stub.control_channel.send(answer)

        future = asyncio.run_coroutine_threadsafe(_host_call(call), loop)
        future.add_done_callback(reply)

    # ------------------------------------------------------------------ a lost stub

    def _lost(self, stub: _StubProcess) -> None:
        """A stub's channel closed: fail what it was running; restart it unless unloading."""
        with stub.lock:
            if stub.lost:
                return  # its other reader saw it first
            stub.lost = True
            batches = list(stub.batches.values())
            stub.batches.clear()
            sinks = list(stub.sinks.values())
            stub.sinks.clear()
            metric_calls = list(stub.metric_calls.values())
            stub.metric_calls.clear()
        if not stub.started.done():
            stub.started.set_exception(
                InferenceServerError(
                    f"failed to load Python model '{self.model.name}' instance "
                    f"'{self.instance.name}': {stub.exit_description()}",
                    StatusCode.UNAVAILABLE,
                )
            )
            return
        stub.stopped.set()
        for future in metric_calls:
            future.set_result([])
        reason = stub.exit_description()
        error = InferenceServerError(
            f"Python model '{self.model.name}' instance '{self.instance.name}' stopped while "
            f"running this request: {reason}",
            StatusCode.INTERNAL,
        )
        for batch in batches:
            batch.chain.finished(batch.requests, error)
            batch.drained.set_result(None)
        for sink in sinks:  # decoupled requests still sending when the process stopped
            sink.send(error, True)
        if self._unloading or self._stub is not stub:
            return  # unload() ends it
        logger.error(
            "Python model '%s' instance '%s' stopped: %s; starting it again",
            self.model.name,
            self.instance.name,
            reason,
        )
        _end(stub)
        threading.Thread(
            target=self._restart, name=f"{self.instance.name}-restart", daemon=True
        ).start()

    def _restart(self) -> None:
        with self._restarting:
            delays = itertools.chain(RESTART_BACKOFF_S, itertools.repeat(RESTART_BACKOFF_S[-1]))
            for delay in delays:
                time.sleep(delay)
                if self._unloading:
                    return
                started = time.monotonic()
                try:
                    stub = self._start()
                except InferenceServerError as err:
                    logger.error("restarting Python model '%s' failed: %s", self.model.name, err)
                    continue
                with self._swap:  # unload() takes the stub under the same lock
                    unloading = self._unloading
                    if not unloading:
                        self._stub = stub
                if unloading:
                    _end(stub)
                    return
                logger.warning(
                    "Python model '%s' instance '%s' serves again (started in %.1f s)",
                    self.model.name,
                    self.instance.name,
                    time.monotonic() - started,
                )
                return

    def _unavailable(self) -> InferenceServerError:
        if self._unloading:
            return InferenceServerError(
                f"Python model '{self.model.name}' instance '{self.instance.name}' is not loaded",
                StatusCode.UNAVAILABLE,
            )
        return InferenceServerError(
            f"Python model '{self.model.name}' instance '{self.instance.name}' is restarting "
            "after its process stopped",
            StatusCode.UNAVAILABLE,
        )

    # ------------------------------------------------------------------ metrics

    def _collect_metrics(self) -> list[CustomFamily]:
        """The stub's custom metric families (its last answer if it is slow or gone)."""
        stub = self._stub
        if stub is None or stub.lost:
            return self._last_metrics
        call_id = next(self._ids)
        future: concurrent.futures.Future[list[CustomFamily]] = concurrent.futures.Future()
        with stub.lock:
            stub.metric_calls[call_id] = future
        try:
            stub.control_channel.send(CollectMetrics(call_id))
            self._last_metrics = future.result(timeout=METRICS_TIMEOUT_S)
        except (ChannelClosedError, concurrent.futures.TimeoutError):
            with stub.lock:
                stub.metric_calls.pop(call_id, None)
        return self._last_metrics


def _bls_stream(request: InferRequest) -> AsyncIterator[StreamedResponse]:
    dispatcher = runtime.get_bls_stream_dispatcher()
    if dispatcher is None:
        raise InferenceServerError(
            "BLS is not available: no inference dispatcher is installed in the model's host",
            StatusCode.UNAVAILABLE,
        )
    return dispatcher(request)


async def _host_call(call: HostCall) -> Any:
    """Run one of a stub's outside calls with this process's hooks."""
    if isinstance(call, BlsCall) and call.stream:  # all the responses, in one reply
        return [item async for item in _bls_stream(call.request)]
    if isinstance(call, BlsCall):
        dispatcher = runtime.get_bls_dispatcher()
        if dispatcher is None:
            raise InferenceServerError(
                "BLS is not available: no inference dispatcher is installed in the model's host",
                StatusCode.UNAVAILABLE,
            )
        return await dispatcher(call.request)
    hook = runtime.get_model_repository_hook()
    if hook is None:
        raise InferenceServerError(
            "model control from a python model is not available here", StatusCode.UNSUPPORTED
        )
    if isinstance(call, LoadModelCall):
        result = hook.load_model(call.model_name, call.config, call.files)
    elif isinstance(call, UnloadModelCall):
        result = hook.unload_model(call.model_name, call.unload_dependents)
    else:
        result = hook.is_model_ready(call.model_name, call.model_version)
    return await result if inspect.isawaitable(result) else result


def _drop_sinks(stub: _StubProcess, batch_id: int) -> None:
    """Forget the sinks of a batch that never reached the stub (its caller fails them)."""
    for key in [key for key in stub.sinks if key[0] == batch_id]:
        del stub.sinks[key]


def _end(stub: _StubProcess) -> None:
    """Close the stub's channels (its process exits when it sees them closed) and reap it."""
    _detach(stub)
    stub.batches_channel.close()
    stub.control_channel.close()
    try:
        stub.process.wait(timeout=5)
    except subprocess.TimeoutExpired:
        stub.process.kill()
        stub.process.wait()


def _detach(stub: _StubProcess) -> None:
    """Stop reading the stub's batch channel on its loop (before the channel closes)."""
    loop, stub.loop = stub.loop, None
    if loop is None or loop.is_closed():
        return
    fd = stub.batches_channel.fileno()
    if fd < 0:
        return
    if not loop.is_running() or _running_loop() is loop:
        loop.remove_reader(fd)
        return
    removed: concurrent.futures.Future[bool] = concurrent.futures.Future()
    loop.call_soon_threadsafe(lambda: removed.set_result(loop.remove_reader(fd)))
    with contextlib.suppress(concurrent.futures.TimeoutError):
        removed.result(timeout=STOP_TIMEOUT_S)


def _emit(line: LogLine) -> None:
    target = logging.getLogger(line.logger_name)
    if not target.isEnabledFor(line.level):
        return
    record = target.makeRecord(
        line.logger_name, line.level, line.pathname, line.lineno, line.message, (), None
    )
    record.exc_text = line.exc_text
    target.handle(record)


def _model_log_level() -> int:
    return logging.getLogger(MODEL_LOGGER_NAME).getEffectiveLevel()


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None
