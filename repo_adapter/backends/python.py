"""Triton's Python backend, in process: ``TritonPythonModel`` classes from ``model.py``.

Each backend instance is one Triton model instance. It imports ``model.py`` as its own module,
instantiates ``TritonPythonModel`` and calls ``initialize(args)``. ``execute`` receives the
batch as a list of ``pb_utils.InferenceRequest`` objects, one per client request and never a
stacked tensor, exactly as under Triton; the returned responses are checked with Triton's rules
and converted back.

Threading: a synchronous ``execute`` runs on one dedicated worker thread per instance, so the
replica's event loop never blocks and a model always sees the same thread (``initialize`` and
``finalize`` run there too); that thread takes the instance's next batch from the batcher
itself (:meth:`PythonBackend.run_batches`), as a Triton stub runs execute after execute. An
``async def execute`` is awaited on the event loop itself. BLS ``exec()`` from the worker
thread runs the request on that loop (see :mod:`repo_adapter.python_backend.runtime`). One
batch runs per instance at a time.

Decoupled models (``model_transaction_policy { decoupled: true }``) send their responses
through each request's sender, from ``execute`` or later from their own threads; each goes to
the request's :class:`~repo_adapter.response_stream.ResponseSink` as it is sent, and the
execution's result for such a request only says whether ``execute`` succeeded.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import json
import logging
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from google.protobuf import json_format
from tritonclient.grpc import model_config_pb2 as mc

from repo_adapter.backends.base import (
    Backend,
    BatchChain,
    Execution,
    InstanceSpec,
    ModelVersion,
)
from repo_adapter.backends.python_stub import PythonStubBackend
from repo_adapter.config import config_to_json_dict, config_to_json_text
from repo_adapter.datatypes import config_to_protocol
from repo_adapter.errors import InferenceServerError, ModelConfigError, StatusCode
from repo_adapter.implicit_state import backend_outputs
from repo_adapter.inference_types import ComputeTimes, InferRequest, InferResponse, InferTensor
from repo_adapter.python_backend import execution_env, model_loader, runtime
from repo_adapter.python_backend.dtypes import as_protocol_array, enum_to_protocol
from repo_adapter.python_backend.inference import (
    TRITONSERVER_REQUEST_RELEASE_ALL,
    TRITONSERVER_REQUEST_RELEASE_RESCHEDULE,
    TRITONSERVER_RESPONSE_COMPLETE_FINAL,
    InferenceRequest,
    InferenceResponse,
    error_from_response,
    from_infer_request,
    request_state,
)
from repo_adapter.python_backend.model_config import ModelConfig
from repo_adapter.python_backend.triton_error import TritonModelException
from repo_adapter.version_dirs import available_versions

logger = logging.getLogger(__name__)

DEFAULT_MODEL_FILENAME = "model.py"
_AUTO_COMPLETE_HOOK = "auto_complete_config"

# Per-request outcomes of one execute call, before conversion.
_RESCHEDULE = object()
_PENDING = object()


class _ContractError(Exception):
    """The execute return breaks Triton's rules; the message is reported without a type."""


class _Outcomes:
    """What one execution gave each of its requests so far; rescheduled requests stay
    pending for the next ``execute`` call."""

    def __init__(self, pb_requests: list[InferenceRequest]) -> None:
        self.requests = pb_requests
        self.values: list[Any] = [None] * len(pb_requests)
        self.pending = list(range(len(pb_requests)))
        self.infer_ns = 0

    def batch(self) -> list[InferenceRequest]:
        return [self.requests[i] for i in self.pending]

    def fail(self, message: str) -> None:
        for i in self.pending:
            self.values[i] = InferenceServerError(message, StatusCode.INTERNAL)
        self.pending = []

    def settle(self, matched: list[Any]) -> None:
        rescheduled = []
        for i, outcome in zip(self.pending, matched, strict=True):
            if outcome is _RESCHEDULE:
                request_state(self.requests[i]).release_flags = TRITONSERVER_REQUEST_RELEASE_ALL
                rescheduled.append(i)
            else:
                self.values[i] = outcome
        self.pending = rescheduled

    def of(
        self, requests: Sequence[InferRequest]
    ) -> Iterator[tuple[InferenceRequest, InferRequest, Any]]:
        return zip(self.requests, requests, self.values, strict=True)

    def cancel(self) -> None:
        """The caller gave up: is_cancelled() tells the model, and a response it has yet to
        send is no longer waited for."""
        for pb_request in self.requests:
            state = request_state(pb_request)
            state.cancelled = True
            state.response.cancel()


class PythonBackend(Backend):
    """A Triton Python model instance (``backend: "python"``)."""

    name = "python"
    platforms = ()
    default_model_filename = "model.py"
    probe_priority = 50

    def __init__(self, model: ModelVersion, instance: InstanceSpec) -> None:
        super().__init__(model, instance)
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix=f"{instance.name}-python"
        )
        self._module_name = model_loader.unique_module_name(
            model.name, model.version, instance.name
        )
        self._model: Any = None
        self._async_execute = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock: tuple[asyncio.AbstractEventLoop, asyncio.Lock] | None = None
        self._running: _Outcomes | None = None  # the requests the worker is executing
        # The config's outputs, then a sequence model's state outputs (kept by the server)
        outputs = [*self.config.output, *backend_outputs(self.config)]
        self._output_datatypes = {o.name: config_to_protocol(o.data_type) for o in outputs}
        self._default_outputs = [o.name for o in outputs]
        self._decoupled = self.config.model_transaction_policy.decoupled
        # Per response and per call: built once, not per request.
        self._version_label = str(model.version)
        self._version_dir = model.version_dir

    @classmethod
    def for_instance(cls, model: ModelVersion, instance: InstanceSpec) -> Backend:
        """An instance with ``own_process`` runs in a stub process
        (:class:`repo_adapter.backends.python_stub.PythonStubBackend`); others in this one."""
        if instance.own_process:
            return PythonStubBackend(model, instance)
        return cls(model, instance)

    @property
    def model_file(self) -> Path:
        """The model.py this instance runs: its version's, or its python-based backend's."""
        if self.model.python_based_backend:
            return self.model.model_path
        filename = self.config.default_model_filename or DEFAULT_MODEL_FILENAME
        return self.model.version_dir / filename

    # -----------------------------------------------------------------------------------------
    # auto-complete (repository scan time)

    @classmethod
    def auto_complete_config(cls, config: mc.ModelConfig, model_dir: Path) -> None:
        """Run ``TritonPythonModel.auto_complete_config`` of the latest version's model.py.

        model.py is always compiled, so a syntax error makes the model unavailable at scan time
        as in Triton. It is only imported (running its top-level code in the scanning process)
        when its source mentions ``auto_complete_config``: importing every model here would
        pull each model's dependencies into the controller.

        Raises:
            ModelConfigError: for an unreadable or broken model.py, a failing hook, or a result
                that is not a valid configuration.
        """

        versions = available_versions(model_dir)
        if not versions:
            return  # the scan reports the missing version directory
        version_dir = model_dir / str(versions[-1])
        path = version_dir / (config.default_model_filename or DEFAULT_MODEL_FILENAME)
        if not path.is_file():
            return  # the scan reports the missing model file
        try:
            source = model_loader.check_syntax(path)
        except model_loader.ModelFileError as err:
            raise ModelConfigError(str(err)) from None
        if _AUTO_COMPLETE_HOOK not in source:
            return
        module_name = model_loader.unique_module_name(config.name, "auto_complete")
        try:
            module = model_loader.import_model_file(path, module_name)
            model_cls = model_loader.model_class(module, path)
            hook = getattr(model_cls, _AUTO_COMPLETE_HOOK, None)
            if hook is None:
                return
            completed = _run_auto_complete(hook, config, version_dir)
        except model_loader.ModelFileError as err:
            raise ModelConfigError(str(err)) from None
        finally:
            model_loader.forget_module(module_name)
        # The hook may not rename the model or move it to another backend.
        completed.name = config.name
        completed.backend = config.backend
        config.CopyFrom(completed)

    # -----------------------------------------------------------------------------------------
    # load / unload

    def load(self) -> None:
        """Import model.py, create ``TritonPythonModel`` and call its ``initialize(args)``.

        Raises:
            InferenceServerError: UNAVAILABLE when model.py cannot be imported or
                ``initialize`` raises (the message says why).
        """
        self._loop = _running_loop()
        if self._loop is not None:
            runtime.bind_event_loop(self._loop)
        try:
            self._executor.submit(self._load_on_worker).result()
        except BaseException:
            # A failed instance is discarded, never loaded again: release its worker thread.
            self._executor.shutdown(wait=False)
            raise

    def _load_on_worker(self) -> None:
        path = self.model_file
        archive = execution_env.execution_env_path(self.config, self.model.model_dir)
        if archive is not None:  # the model's own packages, first on the import path
            execution_env.activate(execution_env.prepare(archive, self.model.name))
        try:
            module = model_loader.import_model_file(path, self._module_name)
            model_cls = model_loader.model_class(module, path)
        except model_loader.ModelFileError as err:
            raise InferenceServerError(str(err), StatusCode.UNAVAILABLE) from None
        try:
            with self._call("initialize"):
                instance = model_cls()
                initialize = getattr(instance, "initialize", None)
                if initialize is not None:
                    _finish(initialize(self.initialize_args()))
        except Exception as err:
            model_loader.forget_module(self._module_name)
            message = (
                f"failed to initialize Python model '{self.model.name}' instance "
                f"'{self.instance.name}': {type(err).__name__}: {err}"
            )
            logger.error(message, exc_info=err)
            raise InferenceServerError(message, StatusCode.UNAVAILABLE) from None
        execute = getattr(instance, "execute", None)
        if not callable(execute):
            model_loader.forget_module(self._module_name)
            raise InferenceServerError(
                f"Python model '{path}' does not implement `execute` method.",
                StatusCode.UNAVAILABLE,
            )
        self._async_execute = inspect.iscoroutinefunction(execute)
        self._model = instance

    def initialize_args(self) -> dict[str, str]:
        """The ``args`` dict Triton passes to ``initialize``: every value a string."""
        return {
            "model_config": config_to_json_text(self.config),
            "model_instance_kind": self.instance.kind.removeprefix("KIND_"),
            "model_instance_name": self.instance.name,
            "model_instance_device_id": str(self.instance.device_id),
            "model_repository": str(self.model.model_dir),
            "model_version": str(self.model.version),
            "model_name": self.model.name,
        }

    def unload(self) -> None:
        """Call ``finalize()`` (errors are logged, as Triton does) and drop the module."""
        model, self._model = self._model, None
        if model is not None and hasattr(model, "finalize"):
            try:
                self._executor.submit(self._finalize_on_worker, model).result()
            except Exception as err:
                logger.error(
                    "finalize() of Python model '%s' instance '%s' failed: %s: %s",
                    self.model.name,
                    self.instance.name,
                    type(err).__name__,
                    err,
                )
        self._executor.shutdown(wait=False)
        model_loader.forget_module(self._module_name)

    def _finalize_on_worker(self, model: Any) -> None:
        with self._call("finalize"):
            _finish(model.finalize())

    # -----------------------------------------------------------------------------------------
    # execute

    async def execute(self, requests: Sequence[InferRequest]) -> Execution:
        """Run ``TritonPythonModel.execute`` on the list of requests; one result per request.

        A failing ``execute`` (an exception, or a return that breaks Triton's rules) fails
        every request of the batch with INTERNAL; a response carrying a ``TritonError`` fails
        only its request, with the error's code. Rescheduled requests
        (``TRITONSERVER_REQUEST_RELEASE_RESCHEDULE``) run again in a following call.
        """
        if self._model is None:
            raise InferenceServerError(
                f"Python model '{self.model.name}' instance '{self.instance.name}' is not loaded",
                StatusCode.UNAVAILABLE,
            )
        loop = self._bind(asyncio.get_running_loop())
        if not self._async_execute:
            return await self._on_worker(loop, self._execute_on_worker, list(requests), loop)
        start = time.monotonic_ns()
        pb_requests = self._execute_requests(requests)
        outcomes = _Outcomes(pb_requests)
        infer_start = time.monotonic_ns()
        try:
            while outcomes.pending:
                batch = outcomes.batch()
                called = time.monotonic_ns()
                try:
                    async with self._execute_lock(loop):
                        with self._call("execute", loop):
                            returned = await self._model.execute(batch)
                except Exception as err:
                    outcomes.infer_ns += time.monotonic_ns() - called
                    outcomes.fail(self._batch_error_message(err))
                    break
                outcomes.infer_ns += time.monotonic_ns() - called
                self._settle(outcomes, batch, returned)
            results = [
                await self._result(pb_request, request, outcome)
                for pb_request, request, outcome in outcomes.of(requests)
            ]
        except asyncio.CancelledError:
            # The caller gave up: let is_cancelled() tell a still-running execute.
            outcomes.cancel()
            raise
        return Execution(results, ComputeTimes(infer_start - start, outcomes.infer_ns, 0))

    async def run_batches(self, requests: list[InferRequest], chain: BatchChain) -> None:
        """Run ``requests`` and then ``chain``'s following batches, each reported to it.

        A synchronous ``execute`` runs them all on the instance's thread, which takes the next
        batch from the chain itself the moment it is free (as a Triton stub runs execute after
        execute), so the event loop never sits between two executions. An ``async def
        execute`` runs on the loop, one batch per call.
        """
        if self._async_execute or self._model is None:
            try:  # an instance not loaded (any more) fails the batch here: UNAVAILABLE
                outcome: Execution | Exception = await self.execute(requests)
            except Exception as err:  # the batcher fails the batch with it
                outcome = err
            chain.finished(requests, outcome)
            return
        loop = self._bind(asyncio.get_running_loop())
        await self._on_worker(loop, self._run_chain_on_worker, requests, chain, loop)

    @property
    def runs_on_loop(self) -> bool:
        """Whether the model's ``execute`` is ``async def`` (it runs on the event loop)."""
        return self._async_execute

    def run_on_instance_thread(self, work: Callable[[], None]) -> None:
        """Run ``work`` on the instance's thread (where ``initialize`` ran); the instance's
        batches and ``finalize`` wait until it returns."""
        self._executor.submit(work)

    def execute_here(
        self, requests: list[InferRequest], loop: asyncio.AbstractEventLoop
    ) -> Execution:
        """Run one batch of a synchronous model on the calling thread, which must be the
        instance's (:meth:`run_on_instance_thread`); ``loop`` runs the model's BLS calls."""
        return self._execute_on_worker(requests, loop)

    def cancel_running(self) -> None:
        """The caller gave up on the running batch: ``is_cancelled()`` tells the model."""
        running = self._running
        if running is not None:
            running.cancel()

    def _bind(self, loop: asyncio.AbstractEventLoop) -> asyncio.AbstractEventLoop:
        """The loop BLS calls from this model run on (the replica's)."""
        self._loop = loop
        runtime.bind_event_loop(loop)
        return loop

    async def _on_worker(self, loop: asyncio.AbstractEventLoop, work: Any, *args: Any) -> Any:
        try:
            return await loop.run_in_executor(self._executor, work, *args)
        except asyncio.CancelledError:
            # The caller gave up: let is_cancelled() tell the execute still running there.
            self.cancel_running()
            raise

    def _run_chain_on_worker(
        self, requests: list[InferRequest], chain: BatchChain, loop: asyncio.AbstractEventLoop
    ) -> None:
        while requests:
            try:
                outcome: Execution | Exception = self._execute_on_worker(requests, loop)
            except Exception as err:  # the batcher fails the batch with it
                outcome = err
            following = list(chain.next_batch())
            chain.finished(requests, outcome)
            requests = following

    def _execute_on_worker(
        self, requests: list[InferRequest], loop: asyncio.AbstractEventLoop
    ) -> Execution:
        """:meth:`execute` for a synchronous model, on the instance's thread."""
        start = time.monotonic_ns()
        pb_requests = self._execute_requests(requests)
        outcomes = self._running = _Outcomes(pb_requests)
        infer_start = time.monotonic_ns()
        try:
            while outcomes.pending:
                batch = outcomes.batch()
                called = time.monotonic_ns()
                try:
                    returned = self._call_model_execute(batch, loop)
                except Exception as err:
                    outcomes.infer_ns += time.monotonic_ns() - called
                    outcomes.fail(self._batch_error_message(err))
                    break
                outcomes.infer_ns += time.monotonic_ns() - called
                self._settle(outcomes, batch, returned)
            results = [
                self._result_on_worker(pb_request, request, outcome)
                for pb_request, request, outcome in outcomes.of(requests)
            ]
        finally:
            self._running = None
        return Execution(results, ComputeTimes(infer_start - start, outcomes.infer_ns, 0))

    def _execute_requests(self, requests: Sequence[InferRequest]) -> list[InferenceRequest]:
        """The ``execute``-side requests; a decoupled model's send to each request's sink."""
        pb_requests = [from_infer_request(r, self._default_outputs) for r in requests]
        if self._decoupled:
            for pb_request, request in zip(pb_requests, requests, strict=True):
                request_state(pb_request).delivery = _Delivery(self, pb_request, request)
        return pb_requests

    def _call_model_execute(
        self, batch: list[InferenceRequest], loop: asyncio.AbstractEventLoop
    ) -> Any:
        with self._call("execute", loop):
            result = self._model.execute(batch)
            if inspect.isawaitable(result):
                # execute returned an awaitable without being "async def" (a decorated
                # coroutine function): run it on the event loop, as async execute would.
                return runtime.run_blocking(lambda: _await(result), "execute()")
            return result

    def _settle(self, outcomes: _Outcomes, batch: list[InferenceRequest], returned: Any) -> None:
        """Record what ``execute`` returned for ``batch``; a broken return fails it all."""
        try:
            matched = self._match_responses(batch, returned)
        except Exception as err:
            outcomes.fail(self._batch_error_message(err))
            return
        outcomes.settle(matched)

    def _execute_lock(self, loop: asyncio.AbstractEventLoop) -> asyncio.Lock:
        if self._lock is None or self._lock[0] is not loop:
            self._lock = (loop, asyncio.Lock())
        return self._lock[1]

    def _match_responses(self, batch: list[InferenceRequest], returned: Any) -> list[Any]:
        """Triton's checks of the execute return; responses go through the request's sender."""
        if self._decoupled:
            if returned is not None:
                raise _ContractError(
                    f"Python model '{self.instance.name}' is using the decoupled mode and the "
                    "execute function must return None."
                )
            return [_PENDING] * len(batch)  # responses go through the senders, as sent
        if returned is None:
            entries: list[Any] = [None] * len(batch)  # responses come through the senders
        elif not isinstance(returned, list):
            raise _ContractError(
                f"Expected a list in the execute return, found type '{type(returned)}'."
            )
        elif len(returned) != len(batch):
            raise _ContractError(
                "Number of InferenceResponse objects do not match the number of "
                f"InferenceRequest objects. InferenceRequest(s) size is:{len(batch)}, and "
                f"InferenceResponse(s) size is:{len(returned)}"
            )
        else:
            entries = returned
        matched = []
        for request, entry in zip(batch, entries, strict=True):
            state = request_state(request)
            if state.release_flags == TRITONSERVER_REQUEST_RELEASE_RESCHEDULE:
                if entry is not None:
                    raise _ContractError(
                        "Expected a None object in the execute function return list for "
                        f"rescheduled request, found type '{type(entry)}'."
                    )
                matched.append(_RESCHEDULE)
                continue
            if entry is not None:
                if not isinstance(entry, InferenceResponse):
                    raise _ContractError(
                        "Expected an 'InferenceResponse' object in the execute function return "
                        f"list, found type '{type(entry)}'."
                    )
                try:
                    state.send(entry, TRITONSERVER_RESPONSE_COMPLETE_FINAL)
                except TritonModelException as err:
                    raise _ContractError(str(err)) from None
            matched.append(_PENDING)
        return matched

    def _early_result(
        self, pb_request: InferenceRequest, request: InferRequest, outcome: Any
    ) -> InferResponse | InferenceServerError | None:
        """The request's result when it needs no wait: its error or its converted response;
        None while a model that kept the sender has yet to send it (from another thread,
        after execute returned)."""
        if isinstance(outcome, InferenceServerError):
            return outcome
        if self._decoupled:  # execute succeeded; the responses went to the request's sink
            return InferResponse(self.model.name, self._version_label, [], id=request.id)
        state = request_state(pb_request)
        if state.response.done():
            return self.convert_response(pb_request, request, state.response.result())
        if not state.sender_requested or state.closed:
            return InferenceServerError(
                f"Python model '{self.model.name}' returned no response for request "
                f"'{request.id}' and did not send one",
                StatusCode.INTERNAL,
            )
        return None

    async def _result(
        self, pb_request: InferenceRequest, request: InferRequest, outcome: Any
    ) -> InferResponse | InferenceServerError:
        early = self._early_result(pb_request, request, outcome)
        if early is not None:
            return early
        response = await asyncio.wrap_future(request_state(pb_request).response)
        return self.convert_response(pb_request, request, response)

    def _result_on_worker(
        self, pb_request: InferenceRequest, request: InferRequest, outcome: Any
    ) -> InferResponse | InferenceServerError:
        early = self._early_result(pb_request, request, outcome)
        if early is not None:
            return early
        # The instance waits for the response, as it waits for execute (one batch at a time).
        return self.convert_response(
            pb_request, request, request_state(pb_request).response.result()
        )

    def convert_response(
        self, pb_request: InferenceRequest, request: InferRequest, response: InferenceResponse
    ) -> InferResponse | InferenceServerError:
        if response.has_error():
            return error_from_response(response)
        requested = pb_request.requested_output_names()
        outputs = []
        try:
            for tensor in response.output_tensors():
                name = tensor.name()
                if requested and name not in requested:
                    continue  # Triton prunes outputs the request did not ask for
                datatype = self._output_datatypes.get(name) or enum_to_protocol(
                    tensor.triton_dtype()
                )
                array = as_protocol_array(tensor._host_array(), datatype)
                outputs.append(InferTensor(name, datatype, array))
            raw_parameters = response.parameters()
            parameters = json.loads(raw_parameters) if raw_parameters != "{}" else {}
        except Exception as err:
            return InferenceServerError(
                f"failed to read the response of Python model '{self.model.name}': "
                f"{type(err).__name__}: {err}",
                StatusCode.INTERNAL,
            )
        return InferResponse(
            model_name=self.model.name,
            model_version=self._version_label,
            outputs=outputs,
            id=request.id,
            parameters=parameters,
        )

    def _batch_error_message(self, err: Exception) -> str:
        detail = str(err) if isinstance(err, _ContractError) else f"{type(err).__name__}: {err}"
        message = (
            f"Failed to process the request(s) for model '{self.instance.name}', message: {detail}"
        )
        logger.error(message, exc_info=None if isinstance(err, _ContractError) else err)
        return message

    def _call(self, phase: str, loop: asyncio.AbstractEventLoop | None = None) -> Any:
        return runtime.model_call(phase, self.model.name, self._version_dir, loop or self._loop)


class _Delivery:
    """A decoupled request's responses, converted as the model sends them and handed to
    the request's sink (dropped where nobody reads them: warmup)."""

    def __init__(
        self, backend: PythonBackend, pb_request: InferenceRequest, request: InferRequest
    ) -> None:
        self._backend = backend
        self._pb_request = pb_request
        self._request = request

    def deliver(self, response: InferenceResponse | None, final: bool) -> None:
        sink = self._request.responses
        if sink is None or (response is None and not final):
            return
        if response is None:
            sink.send(None, final)
            return
        result = self._backend.convert_response(self._pb_request, self._request, response)
        sink.send(result, final)

    @property
    def cancelled(self) -> bool:
        sink = self._request.responses
        return sink is not None and sink.cancelled


def _run_auto_complete(hook: Any, config: mc.ModelConfig, version_dir: Path) -> mc.ModelConfig:
    """Call the hook on a ModelConfig wrapping ``config``; its result as a protobuf config."""
    wrapper = ModelConfig(config_to_json_dict(config))
    try:
        with runtime.model_call("auto_complete", config.name, version_dir, None):
            result = hook(wrapper)
    except Exception as err:
        raise ModelConfigError(
            f"auto_complete_config of Python model '{config.name}' failed: "
            f"{type(err).__name__}: {err}"
        ) from None
    if not isinstance(result, ModelConfig):
        raise ModelConfigError(
            f"auto_complete_config function in model '{config.name}' must return a valid "
            "pb.ModelConfig object."
        )
    try:
        return json_format.ParseDict(result.as_dict(), mc.ModelConfig())
    except (json_format.ParseError, TypeError, ValueError) as err:
        raise ModelConfigError(
            f"auto_complete_config of Python model '{config.name}' returned an invalid "
            f"configuration: {err}"
        ) from None


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


async def _await(awaitable: Awaitable[Any]) -> Any:
    return await awaitable


def _finish(result: Any) -> None:
    """Complete an ``async def initialize``/``finalize`` on the worker thread's own loop."""
    if inspect.isawaitable(result):
        asyncio.run(_await(result))
