"""Ensembles as a dataflow over member models (Triton's ensemble scheduler): a ``ServedModel``.

A step runs as soon as all its input tensors exist; independent steps run concurrently.
Each step is a call of ``call_member``, which in a replica is an ``infer`` on the member's own
deployment (:mod:`deployments.apps.ensemble_deployment`), so the member's dynamic batcher and
replicas apply, exactly as Triton sends ensemble steps through each member's scheduler.
Tensors stay numpy between steps. Ray-free: unit tests pass plain async functions as members.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

from tritonclient.grpc import model_config_pb2 as mc

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
from repo_adapter.errors import InferenceServerError, StatusCode
from repo_adapter.inference_types import (
    ComputeTimes,
    InferRequest,
    InferResponse,
    InferTensor,
    RequestedOutput,
)
from repo_adapter.model_state import ModelState, VersionState, VersionStates
from repo_adapter.request_validation import RequestValidator, model_not_found

MemberCall = Callable[[InferRequest], Awaitable[InferResponse]]


class EnsembleModel:
    """Runs one ensemble; ``call_member`` sends a step's request to the member model."""

    def __init__(
        self,
        config: mc.ModelConfig,
        versions: list[int],
        labels: dict[str, list[str]],
        call_member: MemberCall,
    ) -> None:
        self.config = config
        self.name = config.name
        self.labels = labels
        self.versions = versions
        self._steps = ensemble_steps(config)
        self._call_member = call_member
        self._validator = RequestValidator(config)
        self._config_json = config_to_json_dict(config)
        self._batching = config.max_batch_size > 0
        self._statistics = {v: VersionStatistics(self.name, str(v)) for v in versions}

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
            self._statistics[v].metrics_entry() | {"pending": 0, "load_duration_s": 0.0}
            for v in self.versions
        ]

    async def infer(self, request: InferRequest) -> InferResponse:
        arrival_ns = time.monotonic_ns()
        version = self._version(request.model_version)
        rows = self._validator.validate(request)
        statistics = self._statistics[version]
        owned = child_trace(request)
        trace = request.trace
        if trace is not None:
            trace.model_version = version
            trace.stamp("REQUEST_START", arrival_ns)
        start_ns = time.monotonic_ns()
        try:
            tensors, compute = await self._run_steps(request)
        except BaseException as err:
            # Triton counts no execution for it (and, unlike rayton, counts the failure twice).
            cancelled = isinstance(err, asyncio.CancelledError)
            statistics.record_failure(arrival_ns, CANCELED if cancelled else OTHER)
            raise
        finally:
            if trace is not None:
                trace.stamp("REQUEST_END")
                if owned:
                    TRACER.finish(trace)
        # Triton's ensemble statistics: its own queue time, its members' compute time sums.
        statistics.record_composed(
            start_ns, time.monotonic_ns(), compute, [RequestOutcome(arrival_ns, rows, False)]
        )
        response = self._response(request, version, tensors)
        response.compute = compute  # an ensemble over this one sums these too
        return response

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
        except InferenceServerError as err:
            raise InferenceServerError(
                f"in ensemble '{self.name}', {err.message}", err.code
            ) from None
        except Exception as err:
            raise InferenceServerError(
                f"in ensemble '{self.name}', {type(err).__name__}: {err}", StatusCode.INTERNAL
            ) from None

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
