"""Ensembles as a dataflow over member models (Triton's ensemble scheduler): a ``ServedModel``.

A step runs as soon as all its input tensors exist; independent steps run concurrently.
Each step is a call of ``call_member``, which in a replica is an ``infer`` on the member's own
deployment (:mod:`deployments.apps.ensemble_deployment`), so the member's dynamic batcher and
replicas apply, exactly as Triton sends ensemble steps through each member's scheduler.
Tensors stay numpy between steps. Ray-free: unit tests pass plain async functions as members.

An ensemble with a decoupled member is decoupled too (the repository scan marks it, as Triton's
core does): it answers through :meth:`EnsembleModel.infer_stream`, each step's responses read
as a stream (``stream_member``), and each response of a step that sends several runs the steps
after it again, so the ensemble sends one response per branch, the last one final.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable

from tritonclient.grpc import model_config_pb2 as mc

from deployments.core.response_cache import ModelResponseCache
from deployments.core.served_model import ModelMetadata, model_metadata, select_outputs
from deployments.observability.statistics import (
    CANCELED,
    OTHER,
    ModelStatistics,
    RequestOutcome,
    VersionMetrics,
    VersionStatistics,
)
from deployments.observability.tracing import TRACER, child_trace
from repo_adapter.config import ConfigDocument, config_to_json_dict
from repo_adapter.ensemble import EnsembleStep, ensemble_steps
from repo_adapter.errors import DecoupledModelError, InferenceServerError, StatusCode
from repo_adapter.inference_types import (
    ComputeTimes,
    InferRequest,
    InferResponse,
    InferTensor,
    RequestedOutput,
)
from repo_adapter.model_state import ModelState, VersionState, VersionStates
from repo_adapter.request_validation import RequestValidator, model_not_found
from repo_adapter.response_stream import StreamedResponse

MemberCall = Callable[[InferRequest], Awaitable[InferResponse]]
MemberStream = Callable[[InferRequest], AsyncIterator[StreamedResponse]]


class EnsembleModel:
    """Runs one ensemble; ``call_member`` sends a step's request to the member model."""

    def __init__(
        self,
        config: mc.ModelConfig,
        versions: list[int],
        labels: dict[str, list[str]],
        call_member: MemberCall,
        stream_member: MemberStream | None = None,
        cache: ModelResponseCache | None = None,
    ) -> None:
        """``call_member`` runs a step; ``stream_member`` reads a step's responses (a decoupled
        ensemble's steps; None: this ensemble is not served decoupled); ``cache``: where the
        ensemble's responses are cached (its config enables the response cache), a hit
        running no step."""
        self.config = config
        self.name = config.name
        self.labels = labels
        self.versions = versions
        self._steps = ensemble_steps(config)
        self._call_member = call_member
        self._stream_member = stream_member
        self.decoupled = config.model_transaction_policy.decoupled
        self._validator = RequestValidator(config)
        self._config_json = config_to_json_dict(config)
        self._batching = config.max_batch_size > 0
        self._statistics = {v: VersionStatistics(self.name, str(v)) for v in versions}
        self._cache = cache
        self._output_names = [output.name for output in config.output]

    # ------------------------------------------------------------------ protocol API

    def _version(self, version: str) -> int:
        if not version:
            return max(self.versions)
        if version.isdigit() and int(version) in self.versions:
            return int(version)
        raise model_not_found(self.name, version)

    def is_ready(self, version: str = "") -> bool:
        return not version or (version.isdigit() and int(version) in self.versions)

    def state(self) -> VersionStates:
        return {str(v): VersionState(ModelState.READY) for v in self.versions}

    def metadata(self, version: str = "") -> ModelMetadata:
        versions = [str(self._version(version))] if version else [str(v) for v in self.versions]
        return model_metadata(self.config, versions)

    def model_config(self, version: str = "") -> ConfigDocument:
        self._version(version)
        return self._config_json

    def statistics(self, version: str = "") -> list[ModelStatistics]:
        if version:
            if not self.is_ready(version):
                raise InferenceServerError(
                    f"requested model version is not available for model '{self.name}'"
                )
            return [self._statistics[int(version)].to_json()]
        return [self._statistics[v].to_json() for v in self.versions]

    def metrics(self) -> list[VersionMetrics]:
        """Per-version counters of Triton's metric families (nothing waits in a queue here)."""
        return [
            self._statistics[v].metrics_entry()
            | {"pending": 0, "load_duration_s": 0.0, "response_cache": self._cache is not None}
            for v in self.versions
        ]

    async def infer(self, request: InferRequest) -> InferResponse:
        """Run the steps (or answer from the response cache); the ensemble's response.

        Raises:
            DecoupledModelError: a member is decoupled (:meth:`infer_stream` reads it).
        """
        if self.decoupled:
            raise DecoupledModelError(self.name)
        arrival_ns = time.monotonic_ns()
        version = self._version(request.model_version)
        rows = self._validator.validate(request)
        owned = child_trace(request)
        trace = request.trace
        if trace is not None:
            trace.model_version = version
            trace.stamp("REQUEST_START", arrival_ns)
        try:
            if self._cache is None:
                return (await self._run(request, version, rows, arrival_ns))[0]
            return await self._run_cached(request, version, rows, arrival_ns, self._cache)
        finally:
            if trace is not None:
                trace.stamp("REQUEST_END")
                if owned:
                    TRACER.finish(trace)

    async def _run_cached(
        self,
        request: InferRequest,
        version: int,
        rows: int,
        arrival_ns: int,
        cache: ModelResponseCache,
    ) -> InferResponse:
        """The response from the cache when it holds it, else from the steps (whose outputs
        the cache then keeps)."""

        def from_cache(outputs: list[InferTensor]) -> InferResponse:
            response = self._response(request, version, {tensor.name: tensor for tensor in outputs})
            response.parameters = {}  # Triton's cached response has no sequence parameters
            return response

        return await cache.respond(
            request,
            version,
            self._output_names,
            self._statistics[version],
            lambda: self._run(request, version, rows, arrival_ns),
            from_cache,
            arrival_ns=arrival_ns,
        )

    async def _run(
        self, request: InferRequest, version: int, rows: int, arrival_ns: int
    ) -> tuple[InferResponse, list[InferTensor]]:
        """Run the steps: the ensemble's response, and every ensemble output they produced
        (what the response cache keeps)."""
        statistics = self._statistics[version]
        start_ns = time.monotonic_ns()
        try:
            tensors, compute = await self._run_steps(request)
        except BaseException as err:
            # Triton counts no execution for it (and, unlike rayton, counts the failure twice).
            cancelled = isinstance(err, asyncio.CancelledError)
            statistics.record_failure(arrival_ns, CANCELED if cancelled else OTHER)
            raise
        # Triton's ensemble statistics: its own queue time, its members' compute time sums.
        statistics.record_composed(
            start_ns, time.monotonic_ns(), compute, [RequestOutcome(arrival_ns, rows, False)]
        )
        response = self._response(request, version, tensors)
        response.compute = compute  # an ensemble over this one sums these too
        outputs = [tensors[name] for name in self._output_names if name in tensors]
        return response, outputs

    async def infer_stream(self, request: InferRequest) -> AsyncIterator[StreamedResponse]:
        """The ensemble's responses: one per branch of a decoupled ensemble, the last final
        (a flag alone when no branch reached the outputs); a plain ensemble's one response."""
        if not self.decoupled:
            yield StreamedResponse(await self.infer(request), True)
            return
        if self._stream_member is None:
            raise InferenceServerError(
                f"ensemble '{self.name}' has a decoupled member, which this host does not stream",
                StatusCode.UNSUPPORTED,
            )
        arrival_ns = time.monotonic_ns()
        version = self._version(request.model_version)
        rows = self._validator.validate(request)
        statistics = self._statistics[version]
        start_ns = time.monotonic_ns()
        computes: list[ComputeTimes] = []  # the members' compute times, summed at the end
        held: InferResponse | None = None  # sent once the next one (or the end) is known
        try:
            tensors = {t.name: t for t in request.inputs}
            async for branch in self._flow(request, tensors, list(self._steps), computes):
                if held is not None:
                    yield StreamedResponse(held, False)
                held = self._response(request, version, branch)
        except BaseException as err:
            cancelled = isinstance(err, (asyncio.CancelledError, GeneratorExit))
            statistics.record_failure(arrival_ns, CANCELED if cancelled else OTHER)
            raise
        compute = sum(computes, ComputeTimes())
        statistics.record_composed(
            start_ns, time.monotonic_ns(), compute, [RequestOutcome(arrival_ns, rows, False)]
        )
        yield StreamedResponse(held, True)

    async def _flow(
        self,
        request: InferRequest,
        tensors: dict[str, InferTensor],
        remaining: list[EnsembleStep],
        computes: list[ComputeTimes],
    ) -> AsyncIterator[dict[str, InferTensor]]:
        """The ensemble's tensors once every step ran, for each branch: the ready steps run
        together; a step that answers with several responses runs what follows once each."""
        assert self._stream_member is not None
        while remaining:
            ready = [step for step in remaining if _inputs_ready(step, tensors)]
            if not ready:
                raise InferenceServerError(
                    f"in ensemble '{self.name}', unexpected deadlock, at least one output is "
                    "not set while no more ensemble steps can be made",
                    StatusCode.INTERNAL,
                )
            for step in ready:
                remaining.remove(step)
            streams = [self._stream_member(_step_request(s, request, tensors)) for s in ready]
            try:
                branching = await self._first_responses(ready, streams, tensors, computes)
            except BaseException:
                await _close_all(streams)
                raise
            if branching is None:
                return  # a step that sent no response at all: this branch ends here
            if not branching:
                continue
            step, stream, item = branching[0]
            try:
                while item is not None:
                    if item.result is not None:
                        branch = dict(tensors)
                        self._merge(step, item, branch, computes)
                        async for done in self._flow(request, branch, list(remaining), computes):
                            yield done
                    if item.final:
                        break
                    item = await self._next(stream)
            finally:
                await _close_all([stream])  # a client gone, an error: the member stops too
            return
        yield tensors

    async def _first_responses(
        self,
        ready: list[EnsembleStep],
        streams: list[AsyncIterator[StreamedResponse]],
        tensors: dict[str, InferTensor],
        computes: list[ComputeTimes],
    ) -> list[tuple[EnsembleStep, AsyncIterator[StreamedResponse], StreamedResponse]] | None:
        """Read each ready step's first response: a step's one response goes into
        ``tensors``; the step that sends more is returned with its stream (None: a step sent
        no response at all).

        Raises:
            InferenceServerError: a step's error, or two steps sending several responses.
        """
        firsts = await asyncio.gather(*(self._next(stream) for stream in streams))
        if any(first is None or (first.final and first.result is None) for first in firsts):
            await _close_all(streams)
            return None
        branching = []
        for step, stream, first in zip(ready, streams, firsts, strict=True):
            assert first is not None
            if first.final:
                self._merge(step, first, tensors, computes)  # a step's one response
            else:
                branching.append((step, stream, first))
        if len(branching) > 1:
            raise InferenceServerError(
                f"in ensemble '{self.name}', decoupled steps "
                f"{', '.join(repr(s.model_name) for s, _, _ in branching)} run side by side, "
                "which rayton does not branch over",
                StatusCode.UNSUPPORTED,
            )
        return branching

    async def _next(self, stream: AsyncIterator[StreamedResponse]) -> StreamedResponse | None:
        """A step's next response (None: its stream ended), its errors as the ensemble's."""
        try:
            return await anext(stream)
        except StopAsyncIteration:
            return None
        except Exception as err:
            raise self._step_error(err) from None

    def _merge(
        self,
        step: EnsembleStep,
        item: StreamedResponse,
        tensors: dict[str, InferTensor],
        computes: list[ComputeTimes],
    ) -> None:
        """Add a step's response to ``tensors`` and its compute times to ``computes`` (its
        error fails the ensemble request)."""
        if isinstance(item.result, InferenceServerError):
            raise self._step_error(item.result)
        if item.result is None:
            return
        response = item.result
        if response.compute is not None:
            computes.append(response.compute)
        for member_output, ensemble_name in step.output_map.items():
            tensor = response.output(member_output)
            if tensor is not None:
                tensors[ensemble_name] = InferTensor(ensemble_name, tensor.datatype, tensor.data)

    # ------------------------------------------------------------------ dataflow

    async def _run_steps(
        self, request: InferRequest
    ) -> tuple[dict[str, InferTensor], ComputeTimes]:
        """Run the steps as their inputs become ready.

        Returns the ensemble's tensors and the sum of its members' compute times.
        """
        tensors = {t.name: t for t in request.inputs}
        compute = ComputeTimes()
        remaining = list(self._steps)
        running: dict[asyncio.Task, EnsembleStep] = {}
        try:
            while remaining or running:
                for step in [s for s in remaining if _inputs_ready(s, tensors)]:
                    remaining.remove(step)
                    task = asyncio.ensure_future(
                        self._call_member(_step_request(step, request, tensors))
                    )
                    running[task] = step
                if not running:
                    raise InferenceServerError(
                        f"in ensemble '{self.name}', unexpected deadlock, at least one output "
                        "is not set while no more ensemble steps can be made",
                        StatusCode.INTERNAL,
                    )
                done, _ = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    step = running.pop(task)
                    response = self._step_result(task)
                    if response.compute is not None:
                        compute += response.compute
                    for member_output, ensemble_name in step.output_map.items():
                        tensor = response.output(member_output)
                        if tensor is not None:
                            tensors[ensemble_name] = InferTensor(
                                ensemble_name, tensor.datatype, tensor.data
                            )
        finally:
            for task in running:
                task.cancel()
        return tensors, compute

    def _step_result(self, task: asyncio.Task) -> InferResponse:
        try:
            return task.result()
        except Exception as err:
            raise self._step_error(err) from None

    def _step_error(self, err: Exception) -> InferenceServerError:
        """A member's error as the ensemble reports it."""
        if isinstance(err, InferenceServerError):
            return InferenceServerError(f"in ensemble '{self.name}', {err.message}", err.code)
        return InferenceServerError(
            f"in ensemble '{self.name}', {type(err).__name__}: {err}", StatusCode.INTERNAL
        )

    def _response(
        self, request: InferRequest, version: int, tensors: dict[str, InferTensor]
    ) -> InferResponse:
        wanted = request.outputs or [RequestedOutput(t.name) for t in self.config.output]
        outputs = select_outputs(
            tensors,
            wanted,
            self.labels,
            self._batching,
            lambda name: InferenceServerError(
                f"in ensemble '{self.name}', output '{name}' is not set", StatusCode.INTERNAL
            ),
        )
        # Triton's ensemble scheduler always reports the sequence parameters it propagated.
        parameters = {
            "sequence_id": request.parameters.get("sequence_id", 0),
            "sequence_start": bool(request.parameters.get("sequence_start", False)),
            "sequence_end": bool(request.parameters.get("sequence_end", False)),
        }
        return InferResponse(self.name, str(version), outputs, id=request.id, parameters=parameters)


async def _close_all(streams: list[AsyncIterator[StreamedResponse]]) -> None:
    """Close step streams this ensemble stops reading."""
    for stream in streams:
        close = getattr(stream, "aclose", None)
        if close is not None:
            with contextlib.suppress(Exception):
                await close()


def _inputs_ready(step: EnsembleStep, tensors: dict[str, InferTensor]) -> bool:
    return all(name in tensors for name in step.input_map.values())


def _step_request(
    step: EnsembleStep, request: InferRequest, tensors: dict[str, InferTensor]
) -> InferRequest:
    return InferRequest(
        model_name=step.model_name,
        model_version=step.model_version,
        id=request.id,
        parameters=dict(request.parameters),
        parent_trace=request.trace.key if request.trace is not None else "",
        inputs=[
            InferTensor(member_input, tensors[name].datatype, tensors[name].data)
            for member_input, name in step.input_map.items()
        ],
        outputs=[RequestedOutput(name) for name in step.output_map],
    )
