"""A model instance served by a Triton C/C++ backend (``libtriton_<name>.so``), as rayton's
:class:`~repo_adapter.backends.base.Backend`.

Triton's layering is kept in the process: one backend object per library (initialized once),
one model object per model version (shared by its instances), one instance object per
instance. A batch is handed to the backend's ``Execute`` on the instance's own thread; its
responses may come later and from any thread: they arrive in the instance's completion queue,
which the serving event loop reads (its fd), and each request's result is ready once its
final response came and the backend released it. A decoupled model's responses go to the
request's sink as they arrive instead; its execution ends when ``Execute`` returns.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import json
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from repo_adapter.backends.base import Backend, Execution, InstanceSpec, ModelVersion
from repo_adapter.backends.native.host import (
    BatchReport,
    CompletionQueue,
    NativeBackend,
    NativeInstance,
    NativeModel,
    NativeRequest,
    ReleaseEvent,
    RequestReport,
    ResponseEvent,
)
from repo_adapter.config import config_to_json_dict
from repo_adapter.errors import InferenceServerError, StatusCode
from repo_adapter.inference_types import (
    BackendReports,
    InferRequest,
    InferResponse,
    InferTensor,
    ReportedTimes,
)
from repo_adapter.response_stream import ResponseSink

_KINDS = {"CPU": "KIND_CPU", "GPU": "KIND_GPU", "MODEL": "KIND_MODEL"}


class _Shared:
    """Process-wide backend and model objects with their users counted: a library's
    ``Initialize`` runs once however many models use it, a model version's once for all of
    its instances; the last user finalizes."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._backends: dict[Path, tuple[NativeBackend, int]] = {}
        self._models: dict[tuple[Path, str, int], tuple[NativeModel, int]] = {}

    def model(self, library: Path, backend_name: str, version: ModelVersion) -> NativeModel:
        key = (library, version.name, version.version)
        with self._lock:
            if key in self._models:
                model, users = self._models[key]
                self._models[key] = (model, users + 1)
                return model
            backend = self._backend(library, backend_name, version.backend_config)
            try:
                config = json.dumps(config_to_json_dict(version.config))
                model = NativeModel(
                    backend, version.name, version.version, version.model_dir, config
                )
            except Exception:
                self._release_backend(library)
                raise
            self._models[key] = (model, 1)
            return model

    def release_model(self, library: Path, version: ModelVersion) -> None:
        key = (library, version.name, version.version)
        with self._lock:
            model, users = self._models[key]
            if users > 1:
                self._models[key] = (model, users - 1)
                return
            del self._models[key]
            try:
                model.finalize()
            finally:
                self._release_backend(library)

    def _backend(self, library: Path, name: str, settings: Mapping[str, str]) -> NativeBackend:
        if library in self._backends:
            backend, users = self._backends[library]
            self._backends[library] = (backend, users + 1)
            return backend
        # TRITONBACKEND_BackendConfig's message: the server's settings and --backend-config's.
        backend = NativeBackend(library, name, json.dumps({"cmdline": dict(settings)}))
        self._backends[library] = (backend, 1)
        return backend

    def _release_backend(self, library: Path) -> None:
        backend, users = self._backends[library]
        if users > 1:
            self._backends[library] = (backend, users - 1)
            return
        del self._backends[library]
        backend.unload()


_SHARED = _Shared()


@dataclass
class _Pending:
    """One request handed to the backend: what came back so far."""

    request: NativeRequest
    done: asyncio.Future
    sink: ResponseSink | None = None  # a decoupled model's: responses go there as they come
    responses: list[ResponseEvent] = field(default_factory=list)
    final: bool = False
    released: bool = False


class NativeTritonBackend(Backend):
    """One instance of a model whose backend is a Triton C/C++ library.

    Subclasses made by :func:`native_backend_class` carry the backend's name and library.
    """

    def __init__(self, model: ModelVersion, instance: InstanceSpec, library: Path) -> None:
        super().__init__(model, instance)
        self.library = library
        self.thread = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix=f"{instance.name}-exec"
        )
        self._model: NativeModel | None = None
        self._instance: NativeInstance | None = None
        self._queue: CompletionQueue | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pending: dict[int, _Pending] = {}
        self._request_reports: dict[int, RequestReport] = {}
        self._next_token = 0

    def load(self) -> None:
        model = _SHARED.model(self.library, self.name, self.model)
        try:
            spec = self.instance
            kind = _KINDS.get(spec.kind, "KIND_CPU")
            self._instance = NativeInstance(model, spec.name, kind, spec.device_id)
        except Exception:
            _SHARED.release_model(self.library, self.model)
            raise
        self._model = model
        self._queue = CompletionQueue()

    def unload(self) -> None:
        instance, self._instance = self._instance, None
        if self._loop is not None and self._queue is not None and not self._loop.is_closed():
            self._loop.remove_reader(self._queue.fd)
        try:
            if instance is not None:
                instance.finalize()
        finally:
            if self._model is not None:
                self._model = None
                _SHARED.release_model(self.library, self.model)
            if self._queue is not None:
                self._queue.close()
                self._queue = None
            self.thread.shutdown(wait=False)

    async def execute(self, requests: Sequence[InferRequest]) -> Execution:
        instance, queue = self._instance, self._queue
        if instance is None or queue is None:
            raise InferenceServerError(
                f"model '{self.model.name}' instance '{self.instance.name}' is not loaded",
                StatusCode.UNAVAILABLE,
            )
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            loop.add_reader(queue.fd, self._drain)
            self._loop = loop
        pending = [self._handed(queue, request, loop) for request in requests]
        try:
            # What Execute sends before it returns is drained here at once, not through a
            # wake-up of the loop per response; later responses wake it through the fd.
            with queue.held():
                await loop.run_in_executor(
                    self.thread, instance.execute, [p.request for p in pending]
                )
        except InferenceServerError as refused:  # the backend took none of them
            for item in pending:
                self._forget(item)
            return Execution([refused] * len(requests))
        self._drain()
        if self.config.model_transaction_policy.decoupled:
            # Execute returned: the instance is free; responses go on arriving in the sinks.
            answered = InferResponse(self.model.name, str(self.model.version), [])
            return Execution([answered] * len(requests), reports=self._reports(instance, pending))
        await asyncio.gather(*(item.done for item in pending))
        pairs = zip(requests, pending, strict=True)
        results = [self._result(request, item) for request, item in pairs]
        return Execution(results, reports=self._reports(instance, pending))

    def _reports(self, instance: NativeInstance, pending: list[_Pending]) -> BackendReports:
        """The statistics the backend reported for this execution: the batches reported so
        far, and each request's own report (kept for later when it belongs to another)."""
        batches = []
        for report in instance.take_reports():
            if isinstance(report, BatchReport):
                batches.append((report.batch_size, report.times))
            else:
                self._request_reports[report.token] = report
        requests: list[tuple[bool, ReportedTimes] | None] = []
        for item in pending:
            report = self._request_reports.pop(item.request.token, None)
            requests.append(None if report is None else (report.success, report.times))
        return BackendReports(batches, requests)

    def _handed(
        self, queue: CompletionQueue, request: InferRequest, loop: asyncio.AbstractEventLoop
    ) -> _Pending:
        self._next_token += 1
        token = self._next_token
        outputs = [o.name for o in request.outputs] or [o.name for o in self.config.output]
        native = NativeRequest(
            queue,
            token,
            {tensor.name: (tensor.datatype, tensor.data) for tensor in request.inputs},
            outputs,
            request_id=request.id,
            parameters={
                k: v for k, v in request.parameters.items() if isinstance(v, (str, int, float))
            },
        )
        item = _Pending(native, loop.create_future(), request.responses)
        self._pending[token] = item
        return item

    def _drain(self) -> None:
        """The queue's fd is readable: route each event to its request."""
        queue = self._queue
        if queue is None:
            return
        for event in queue.pop_all():
            item = self._pending.get(event.token)
            if item is None:
                continue
            if isinstance(event, ReleaseEvent):
                item.released = True
            elif item.sink is not None:
                item.final = item.final or event.final
                item.sink.send(self._streamed(event), event.final)
            else:
                item.responses.append(event)
                item.final = item.final or event.final
            if item.released and item.final and not item.done.done():
                self._forget(item)
                item.done.set_result(None)

    def _forget(self, item: _Pending) -> None:
        self._pending.pop(item.request.token, None)
        item.request.delete()

    def _streamed(self, event: ResponseEvent) -> InferResponse | InferenceServerError | None:
        """A decoupled model's response as its sink takes it (None: the final flag alone)."""
        if event.error is not None:
            return event.error
        if not event.outputs and event.final:
            return None
        return self._response(event)

    def _response(self, event: ResponseEvent) -> InferResponse:
        return InferResponse(
            model_name=self.model.name,
            model_version=str(self.model.version),
            outputs=[InferTensor(o.name, o.datatype, o.data) for o in event.outputs],
        )

    def _result(
        self, request: InferRequest, item: _Pending
    ) -> InferResponse | InferenceServerError:
        answers = [r for r in item.responses if r.outputs or r.error is not None]
        if not answers:
            return InferenceServerError(
                f"backend '{self.name}' sent no response for a request of model "
                f"'{self.model.name}'",
                StatusCode.INTERNAL,
            )
        answer = answers[0]
        if answer.error is not None:
            return answer.error
        response = self._response(answer)
        response.id = request.id
        return response


@functools.cache
def native_backend_class(name: str, library: Path) -> type[NativeTritonBackend]:
    """A Backend class for models whose config says ``backend: "<name>"``, served by
    ``library``."""

    class _Named(NativeTritonBackend):
        def __init__(self, model: ModelVersion, instance: InstanceSpec) -> None:
            super().__init__(model, instance, library)

    _Named.name = name
    _Named.__name__ = _Named.__qualname__ = f"NativeTritonBackend[{name}]"
    return _Named
