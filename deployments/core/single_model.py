"""One model with all its served versions: a :class:`ServedModel`, Ray-free.

The model's Serve deployment hosts one per replica; the HTTP routes and (through the
deployment) gRPC, ensembles and the server call it: metadata, config, readiness, inference,
statistics. Each version owns a backend instance and a :class:`DynamicBatcher`; loading
failures are kept as the version's UNAVAILABLE reason instead of crashing the replica, as
Triton keeps serving its other models.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from tritonclient.grpc import model_config_pb2 as mc

from deployments.core.batching import AdmissionFactory, BatchPolicy, DynamicBatcher
from deployments.core.batching.sequences import SequenceBatcher
from deployments.core.response_cache import ModelResponseCache
from deployments.core.served_model import ModelMetadata, model_metadata, select_outputs
from deployments.observability.statistics import (
    ModelStatistics,
    ShadowRecord,
    VersionMetrics,
    VersionStatistics,
)
from deployments.observability.tracing import TRACER, child_trace
from repo_adapter.backends import Backend, InstanceSpec, ModelVersion, model_backend_class
from repo_adapter.config import ConfigDocument, config_to_json_dict
from repo_adapter.errors import DecoupledModelError, InferenceServerError, StatusCode
from repo_adapter.implicit_state import implicit_states
from repo_adapter.inference_types import InferRequest, InferResponse, InferTensor
from repo_adapter.model_state import ModelState, VersionState, VersionStates
from repo_adapter.request_validation import RequestValidator, model_not_found, reshaped
from repo_adapter.response_stream import ResponseStream, StreamedResponse
from repo_adapter.version_traffic import TrafficPolicy, VersionSplitter
from repo_adapter.warmup import run_warmup

logger = logging.getLogger(__name__)

# Shadow copies running at once per model: beyond it a copy is dropped (counted), so a slow
# shadow version never holds memory or the loop for the requests clients wait for.
SHADOW_IN_FLIGHT_LIMIT = 64


@dataclass
class VersionRunner:
    """A loaded version: its backend instances, batcher and statistics."""

    version: int
    backends: list[Backend]
    batcher: DynamicBatcher
    statistics: VersionStatistics
    load_duration_s: float = 0.0  # every instance loaded and warmed up
    sequences: SequenceBatcher | None = None  # a model with sequence_batching

    async def submit(self, request: InferRequest, rows: int) -> InferResponse:
        """Queue ``request`` (in its sequence's turn, for a sequence model); its response."""
        if self.sequences is not None:
            return await self.sequences.submit(request, rows)
        return await self.batcher.submit(request, rows)


class SingleModel:
    """Serves every selected version of one model from this process (a ``ServedModel``)."""

    def __init__(
        self,
        config: mc.ModelConfig,
        model_dir: Path,
        versions: Sequence[int],
        labels: dict[str, list[str]],
        instance: InstanceSpec | Sequence[InstanceSpec],
        admission: AdmissionFactory | None = None,
        backend_file: Path | None = None,
        backend_config: Mapping[str, str] | None = None,
        cache: ModelResponseCache | None = None,
        traffic: TrafficPolicy | None = None,
    ) -> None:
        """Load ``versions`` of the model in ``model_dir`` as ``instance`` (or instances: each
        loads every version and runs batches in parallel with the others).

        ``admission`` is the batcher's admission stage (``@serve.batch`` in a replica; None
        sends requests straight to the batch queue). ``backend_file``: the Triton C/C++ library or
        python-based backend the repository scan found for the config's backend (None: one of
        rayton's), ``backend_config`` that library's settings (``--backend-config``).
        ``cache``: where this model's responses are cached (its config enables the response
        cache and the server has one). ``traffic``: how requests that name no version are
        spread over the versions (None: as the config's parameters say).
        """
        self.config = config
        self.name = config.name
        self.labels = labels
        self._config_json = config_to_json_dict(config)
        self._validator = RequestValidator(config)
        # Outputs with a reshape: backends may produce the reshape shape (as Triton's Python
        # backend models do); clients always see the configured dims.
        self._output_reshapes = {t.name: t for t in config.output if t.HasField("reshape")}
        self._policy = BatchPolicy.from_config(config)
        self._batching = config.max_batch_size > 0
        self.decoupled = config.model_transaction_policy.decoupled
        self.runners: dict[int, VersionRunner] = {}
        self.errors: dict[int, str] = {}
        self._admission = admission
        self._cache = cache
        self._output_names = [output.name for output in config.output]
        instances = [instance] if isinstance(instance, InstanceSpec) else list(instance)
        for version in versions:
            model = ModelVersion(
                self.name, version, config, model_dir, backend_file, dict(backend_config or {})
            )
            self._load_version(model, instances)
        self._splitter: VersionSplitter | None = None
        self._shadow_records: dict[int, ShadowRecord] = {}
        self._shadows: set[asyncio.Future] = set()
        self.steer(traffic if traffic is not None else TrafficPolicy.from_config(config))

    def _load_version(self, model: ModelVersion, instances: list[InstanceSpec]) -> None:
        backends: list[Backend] = []
        started = time.monotonic()
        try:
            states = implicit_states(model.config, model.model_dir)  # a sequence model's
            for instance in instances:
                backend = model_backend_class(model).for_instance(model, instance)
                backends.append(backend)
                backend.load()
                run_warmup(backend, model.config, model.model_dir)  # ready once warmed up
        except InferenceServerError as err:
            _unload_quietly(backends)
            self.errors[model.version] = err.message
            logger.error("failed to load '%s' version %d: %s", self.name, model.version, err)
            return
        except Exception as err:  # any exception from user or framework code
            _unload_quietly(backends)
            self.errors[model.version] = f"{type(err).__name__}: {err}"
            logger.exception("failed to load '%s' version %d", self.name, model.version)
            return
        statistics = VersionStatistics(self.name, str(model.version))
        batcher = DynamicBatcher(
            f"{self.name}_{model.version}",
            self._policy,
            backends,
            statistics,
            self._admission,
        )
        runner = VersionRunner(
            model.version, backends, batcher, statistics, time.monotonic() - started
        )
        if model.config.HasField("sequence_batching"):
            runner.sequences = SequenceBatcher(self.name, model.config, batcher.submit, states)
        self.runners[model.version] = runner

    # ------------------------------------------------------------------ version traffic

    def steer(self, policy: TrafficPolicy) -> None:
        """Spread the requests that name no version as ``policy`` says, from now on."""
        self._splitter = None if policy.is_default else VersionSplitter(policy, self.runners)
        if policy.shadow is not None and policy.shadow.version in self.runners:
            self._shadow_records.setdefault(policy.shadow.version, ShadowRecord())

    @property
    def traffic(self) -> TrafficPolicy:
        return self._splitter.policy if self._splitter is not None else TrafficPolicy()

    def _serving_runner(self, request: InferRequest) -> VersionRunner:
        """The version that serves ``request``: the one it names, else the policy's pick."""
        if not request.model_version and self._splitter is not None:
            picked = self._splitter.pick()
            if picked is not None:
                return self.runners[picked]
        return self._runner(request.model_version)

    def _shadow(self, request: InferRequest, rows: int) -> None:
        """Send a copy of ``request`` (which names no version) to the shadow version when its
        share says so; the copy's answer is discarded, its outcome recorded apart."""
        if self._splitter is None or request.model_version:
            return
        version = self._splitter.shadow()
        if version is None:
            return
        record = self._shadow_records[version]
        if len(self._shadows) >= SHADOW_IN_FLIGHT_LIMIT:
            record.dropped += 1
            return
        copy = InferRequest(
            request.model_name,
            request.inputs,
            str(version),
            request.id,
            dict(request.parameters),
            list(request.outputs),
        )
        task = asyncio.ensure_future(self._run_shadow(copy, self.runners[version], rows, record))
        self._shadows.add(task)
        task.add_done_callback(self._shadows.discard)

    @staticmethod
    async def _run_shadow(
        copy: InferRequest, runner: VersionRunner, rows: int, record: ShadowRecord
    ) -> None:
        start_ns = time.monotonic_ns()
        try:
            await runner.submit(copy, rows)
            record.success += 1
        except Exception:  # the shadow's failure is recorded, never the client's
            record.failure += 1
        finally:
            record.ns += time.monotonic_ns() - start_ns

    # ------------------------------------------------------------------ lookups

    @property
    def ready_versions(self) -> list[int]:
        return sorted(self.runners)

    def is_ready(self, version: str = "") -> bool:
        if not version:
            return bool(self.runners)
        return version.isdigit() and int(version) in self.runners

    def _runner(self, version: str) -> VersionRunner:
        if not version:
            if not self.runners:
                raise self._unavailable()
            return self.runners[max(self.runners)]
        if version.isdigit() and int(version) in self.runners:
            return self.runners[int(version)]
        if version.isdigit() and int(version) in self.errors:
            raise self._unavailable(int(version))
        raise model_not_found(self.name, version)

    def _unavailable(self, version: int | None = None) -> InferenceServerError:
        reasons = [self.errors[version]] if version is not None else list(self.errors.values())
        reason = "; ".join(reasons) or "no version is loaded"
        return InferenceServerError(
            f"Request for unknown model: '{self.name}' is not ready: {reason}",
            StatusCode.UNAVAILABLE,
        )

    def state(self) -> VersionStates:
        """Per-version state for the repository index: READY or UNAVAILABLE with reason."""
        states = {str(v): VersionState(ModelState.READY) for v in self.runners}
        states |= {str(v): VersionState(ModelState.UNAVAILABLE, r) for v, r in self.errors.items()}
        return states

    # ------------------------------------------------------------------ protocol API

    def metadata(self, version: str = "") -> ModelMetadata:
        """Triton's model metadata (``GET /v2/models/{m}[/versions/{v}]``)."""
        if version:
            self._runner(version)
            versions = [version]
        else:
            if not self.runners:
                raise self._unavailable()
            versions = [str(v) for v in self.ready_versions]
        return model_metadata(self.config, versions)

    def model_config(self, version: str = "") -> ConfigDocument:
        """The normalised config as ``/config`` renders it."""
        self._runner(version)
        return self._config_json

    def statistics(self, version: str = "") -> list[ModelStatistics]:
        """Statistics JSON entries of the ready versions (or of ``version``)."""
        if not self.runners:
            raise InferenceServerError(
                f"requested model '{self.name}' is not available", StatusCode.INVALID_ARG
            )
        if version:
            if not (version.isdigit() and int(version) in self.runners):
                raise InferenceServerError(
                    f"requested model version is not available for model '{self.name}'",
                    StatusCode.INVALID_ARG,
                )
            return [self.runners[int(version)].statistics.to_json()]
        return [self.runners[v].statistics.to_json() for v in self.ready_versions]

    def metrics(self) -> list[VersionMetrics]:
        """Per-version counters of Triton's metric families (see
        :mod:`deployments.metrics.families`): the statistics' records, the queue, load time."""
        return [
            runner.statistics.metrics_entry()
            | {
                "pending": runner.batcher.pending_count,
                "load_duration_s": runner.load_duration_s,
                "response_cache": self._cache is not None,
            }
            | (self._shadow_records[version].metrics() if version in self._shadow_records else {})
            for version, runner in sorted(self.runners.items())
        ]

    def holds_sequence(self, request: InferRequest) -> bool:
        """Whether ``request``'s sequence is running in one of this model's versions."""
        return any(
            runner.sequences is not None and runner.sequences.holds(request)
            for runner in self.runners.values()
        )

    def running_sequences(self) -> int:
        """How many sequences are running in this model's versions."""
        return sum(
            runner.sequences.running() for runner in self.runners.values() if runner.sequences
        )

    async def infer(self, request: InferRequest) -> InferResponse:
        """Validate, queue, execute; returns only the requested outputs, classified if asked.

        Raises:
            DecoupledModelError: the model is decoupled (:meth:`infer_stream` reads it).
        """
        if self.decoupled:
            raise DecoupledModelError(self.name)
        with self._traced(request):
            runner, rows = self._admit(request)
            return self._finish(request, runner, await self._run(request, runner, rows))

    async def infer_stream(self, request: InferRequest) -> AsyncIterator[StreamedResponse]:
        """Validate, queue, execute: the responses the model sends for ``request``, each as
        :meth:`infer` answers (requested outputs, classified), until the final one: a
        decoupled model's as it sends them, another's one response.

        The request's own errors (its version, its inputs) raise; a failed execution is the
        last response (Triton's response-level error). A reader that stops early cancels the
        request (the model's ``is_cancelled()``).
        """
        with self._traced(request):
            runner, rows = self._admit(request)
            if not self.decoupled:
                try:
                    response = await self._run(request, runner, rows)
                except InferenceServerError as err:
                    yield StreamedResponse(err, True)
                    return
                yield StreamedResponse(self._finish(request, runner, response), True)
                return
            stream = ResponseStream()
            request.responses = stream
            execution = asyncio.ensure_future(runner.submit(request, rows))
            execution.add_done_callback(lambda done: _end_failed(stream, done))
            try:
                async for item in stream:
                    if isinstance(item.result, InferResponse):
                        response = self._finish(request, runner, item.result)
                        item = StreamedResponse(response, item.final)
                    yield item
            finally:
                if not stream.closed:  # the reader stopped before the final response
                    stream.cancel()
                    if not execution.done():
                        execution.cancel()

    async def _run(self, request: InferRequest, runner: VersionRunner, rows: int) -> InferResponse:
        """``request``'s response: from the response cache where the model's is on and holds
        it, else from an execution (whose outputs the cache then keeps)."""
        if self._cache is None:
            return await runner.submit(request, rows)

        async def execute() -> tuple[InferResponse, list[InferTensor]]:
            response = await runner.submit(request, rows)
            return response, list(response.outputs)

        def from_cache(outputs: list[InferTensor]) -> InferResponse:
            return InferResponse(self.name, str(runner.version), outputs)

        return await self._cache.respond(
            request,
            runner.version,
            self._output_names,
            runner.statistics,
            execute,
            from_cache,
            arrival_ns=time.monotonic_ns(),
        )

    @contextlib.contextmanager
    def _traced(self, request: InferRequest) -> Iterator[None]:
        """``request``'s trace stamps around its time in the model (finished here when it is
        a child trace this model made)."""
        owned = child_trace(request)
        trace = request.trace
        if trace is not None:
            trace.stamp("REQUEST_START")
        try:
            yield
        finally:
            if trace is not None:
                trace.stamp("REQUEST_END")
                if owned:
                    TRACER.finish(trace)

    def _admit(self, request: InferRequest) -> tuple[VersionRunner, int]:
        """The version that serves ``request`` and its batch rows, once it is validated (its
        input reshapes applied)."""
        runner = self._serving_runner(request)
        if request.trace is not None:
            request.trace.model_version = runner.version
        rows = self._validator.normalize(request)
        self._shadow(request, rows)
        return runner, rows

    def _finish(
        self, request: InferRequest, runner: VersionRunner, response: InferResponse
    ) -> InferResponse:
        self._reshape_outputs(response)
        response.model_name = self.name
        response.model_version = str(runner.version)
        response.id = request.id
        return self._select_outputs(request, response)

    def _reshape_outputs(self, response: InferResponse) -> None:
        """Core ``Output::Reshape``: report outputs with a ``reshape`` in their config dims."""
        for index, tensor in enumerate(response.outputs):
            config = self._output_reshapes.get(tensor.name)
            if config is None:
                continue
            batch = tensor.shape[:1] if self._batching else ()
            item_shape = tensor.shape[len(batch) :]
            if _matches(item_shape, config.dims):
                continue  # the backend already produced the configured dims
            if len(item_shape) != len(config.reshape.shape):
                raise InferenceServerError(
                    f"output '{tensor.name}' of model '{self.name}' has shape "
                    f"{list(tensor.shape)}, which matches neither its dims nor its reshape",
                    StatusCode.INTERNAL,
                )
            shape = batch + reshaped(item_shape, config.reshape.shape, config.dims)
            response.outputs[index] = InferTensor(
                tensor.name, tensor.datatype, tensor.data.reshape(shape), tensor.parameters
            )

    def _select_outputs(self, request: InferRequest, response: InferResponse) -> InferResponse:
        if not request.outputs:
            return response
        response.outputs = select_outputs(
            {tensor.name: tensor for tensor in response.outputs},
            request.outputs,
            self.labels,
            self._batching,
            lambda name: InferenceServerError(
                f"output '{name}' was not produced by model '{self.name}'", StatusCode.INTERNAL
            ),
        )
        return response

    async def close(self) -> None:
        for shadow in list(self._shadows):
            shadow.cancel()
        for runner in self.runners.values():
            await runner.batcher.close()
            # Off the event loop: a python instance's unload waits for its finalize() and its
            # process to end, while the replica's other models keep serving.
            await asyncio.to_thread(_unload_all, runner.backends)
        self.runners.clear()


def _unload_all(backends: list[Backend]) -> None:
    for backend in backends:
        backend.unload()


def _end_failed(stream: ResponseStream, execution: asyncio.Future[InferResponse]) -> None:
    """A decoupled request whose execution failed ends with the error (unless the model
    sent its final response already)."""
    if execution.cancelled():
        return
    error = execution.exception()
    if error is None:
        return
    if not isinstance(error, InferenceServerError):
        error = InferenceServerError(f"{type(error).__name__}: {error}", StatusCode.INTERNAL)
    stream.fail(error)


def _unload_quietly(backends: list[Backend]) -> None:
    """Unload backends of a version whose load or warmup failed (their errors are logged)."""
    for backend in backends:
        try:
            backend.unload()
        except Exception:
            logger.exception("unloading a backend that failed to load")


def _matches(shape: Sequence[int], dims: Sequence[int]) -> bool:
    """Whether ``shape`` fits config ``dims`` (``-1`` matches any size)."""
    return len(shape) == len(dims) and all(d in (-1, s) for s, d in zip(shape, dims, strict=True))
