"""Triton's sequence batcher for one model version in one replica, Ray-free.

A model with ``sequence_batching`` keeps state between the requests of a sequence: each
request names its sequence by a correlation id (the ``sequence_id`` parameter, an integer or
a string) with ``sequence_start`` / ``sequence_end`` flags. Here, as Triton's scheduler does:

* a request without a correlation id, or for a sequence not started (never, after its END,
  or released after ``max_sequence_idle_microseconds`` without a request), fails with
  Triton's INVALID_ARG error before it is queued;
* the requests of a sequence run one after another, in the order they arrived; those of
  different sequences are batched together by the version's dynamic batcher (the
  strategy's queue delay and preferred sizes), never two of one sequence in one batch;
* the config's control inputs are added to each request: START, END and READY as the
  ``int32_false_true`` / ``fp32_false_true`` / ``bool_false_true`` values it names, CORRID as
  the correlation id in its ``data_type``, each of shape ``[1]`` (``[rows, 1]`` for a
  batching model).

Implicit state (``state``, :mod:`repo_adapter.implicit_state`) is kept per sequence: each
request gets its state inputs (a START the initial state, the others the state outputs of the
sequence's previous request), and a state output reaches the client only where the config
lists it.

The ``direct`` and ``oldest`` strategies both batch the ready sequences' next requests; a
``direct`` sequence is not pinned to one batch slot of one instance.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import numpy as np
from tritonclient.grpc import model_config_pb2 as mc

from repo_adapter.datatypes import config_to_protocol, protocol_to_numpy
from repo_adapter.errors import InferenceServerError, StatusCode
from repo_adapter.implicit_state import ImplicitState
from repo_adapter.inference_types import InferRequest, InferResponse, InferTensor, RequestedOutput

Control = mc.ModelSequenceBatching.Control
# (request, its batch rows) -> its response, through the version's dynamic batcher
Submit = Callable[[InferRequest, int], Awaitable[InferResponse]]
SequenceKey = tuple[type, int | str]


@dataclass(frozen=True)
class ControlInput:
    """One control tensor the model declares: its name, kind and the values it takes."""

    name: str
    kind: int
    datatype: str  # the protocol datatype of the tensor
    false_true: tuple[object, object] = (0, 1)  # START / END / READY values


def control_inputs(config: mc.ModelConfig) -> list[ControlInput]:
    """The control tensors ``config.sequence_batching`` declares."""
    controls = []
    for control_input in config.sequence_batching.control_input:
        for control in control_input.control:
            if control.kind == Control.CONTROL_SEQUENCE_CORRID:
                datatype = config_to_protocol(control.data_type)
                controls.append(ControlInput(control_input.name, control.kind, datatype))
            elif control.int32_false_true:
                values = tuple(int(v) for v in control.int32_false_true)
                controls.append(ControlInput(control_input.name, control.kind, "INT32", values))
            elif control.fp32_false_true:
                values = tuple(float(v) for v in control.fp32_false_true)
                controls.append(ControlInput(control_input.name, control.kind, "FP32", values))
            else:
                values = tuple(bool(v) for v in control.bool_false_true)
                controls.append(ControlInput(control_input.name, control.kind, "BOOL", values))
    return controls


@dataclass
class _Sequence:
    """One sequence in progress: its turn (one request at a time, in arrival order) and
    when its last request finished."""

    turn: asyncio.Lock = field(default_factory=asyncio.Lock)
    last_active: float = field(default_factory=time.monotonic)
    queued: int = 0  # requests holding or waiting for the turn
    state: dict[str, InferTensor] = field(default_factory=dict)  # implicit state, by input


class SequenceBatcher:
    """The sequences of one model version in this replica, in front of its batcher."""

    def __init__(
        self,
        model_name: str,
        config: mc.ModelConfig,
        submit: Submit,
        states: list[ImplicitState] | None = None,
    ) -> None:
        self._model_name = model_name
        self._batching = config.max_batch_size > 0
        self._controls = control_inputs(config)
        self._states = states or []
        self._listed_outputs = {output.name for output in config.output}
        self._idle_s = config.sequence_batching.max_sequence_idle_microseconds / 1e6
        self._submit = submit
        self._sequences: dict[SequenceKey, _Sequence] = {}
        self._last_sweep = time.monotonic()

    async def submit(self, request: InferRequest, rows: int) -> InferResponse:
        """Run ``request`` in its sequence's turn, with its control inputs added.

        Raises:
            InferenceServerError: INVALID_ARG for a request without a correlation id or for a
                sequence that was not started (Triton's messages); what the batcher raises.
        """
        correlation_id = self._correlation_id(request)
        parameters = request.parameters
        start, end = bool(parameters.get("sequence_start")), bool(parameters.get("sequence_end"))
        key = _key(correlation_id)
        now = time.monotonic()
        self._release_idle(now)
        sequence = self._sequences.get(key)
        if sequence is not None and self._idle(sequence, now):
            del self._sequences[key]  # released: the sweep below runs only now and then
            sequence = None
        if sequence is None:
            if not start:
                raise InferenceServerError(
                    f"inference request for sequence {correlation_id} to model "
                    f"'{self._model_name}' must specify the START flag on the first request "
                    "of the sequence",
                    StatusCode.INVALID_ARG,
                )
            sequence = self._sequences[key] = _Sequence()
        sequence.queued += 1
        try:
            async with sequence.turn:
                request.inputs.extend(self._control_tensors(correlation_id, start, end, rows))
                if not self._states:
                    return await self._submit(request, rows)
                return await self._submit_with_state(request, rows, sequence, start)
        finally:
            sequence.queued -= 1
            sequence.last_active = time.monotonic()
            if end and not sequence.queued and self._sequences.get(key) is sequence:
                del self._sequences[key]

    async def _submit_with_state(
        self, request: InferRequest, rows: int, sequence: _Sequence, start: bool
    ) -> InferResponse:
        """Run ``request`` with its sequence's state inputs; keep its state outputs."""
        if start:
            sequence.state.clear()
        for state in self._states:
            kept = sequence.state.get(state.input_name)
            request.inputs.append(kept or state.start_tensor(rows, self._batching))
        asked = request.outputs
        hidden = set()  # state outputs produced for the server, not for the client
        if asked:
            named = {output.name for output in asked}
            hidden = {s.output_name for s in self._states if s.output_name not in named}
            request.outputs = asked + [RequestedOutput(name) for name in sorted(hidden)]
        hidden |= {s.output_name for s in self._states} - self._listed_outputs
        try:
            response = await self._submit(request, rows)
        finally:
            request.outputs = asked
        for state in self._states:
            output = response.output(state.output_name)
            if output is not None:
                sequence.state[state.input_name] = InferTensor(
                    state.input_name, state.datatype, output.data
                )
        if hidden:
            response.outputs = [o for o in response.outputs if o.name not in hidden]
        return response

    def holds(self, request: InferRequest) -> bool:
        """Whether ``request``'s sequence is running here (started, not ended, not idle)."""
        value = request.parameters.get("sequence_id")
        sequence = self._sequences.get(_key(value))
        return sequence is not None and not self._idle(sequence, time.monotonic())

    def running(self) -> int:
        """How many sequences are running here."""
        now = time.monotonic()
        return sum(not self._idle(sequence, now) for sequence in self._sequences.values())

    def _correlation_id(self, request: InferRequest) -> int | str:
        value = request.parameters.get("sequence_id")
        if isinstance(value, bool) or not isinstance(value, (int, str)) or value in (0, ""):
            raise InferenceServerError(
                f"inference request to model '{self._model_name}' must specify a non-zero or "
                "non-empty correlation ID",
                StatusCode.INVALID_ARG,
            )
        return value

    def _idle(self, sequence: _Sequence, now: float) -> bool:
        return not sequence.queued and now - sequence.last_active > self._idle_s

    def _release_idle(self, now: float) -> None:
        """Forget the sequences idle for longer than ``max_sequence_idle_microseconds``: a
        sweep of them all at most once per idle period, not on every request."""
        if now - self._last_sweep < self._idle_s:
            return
        self._last_sweep = now
        idle = [key for key, sequence in self._sequences.items() if self._idle(sequence, now)]
        for key in idle:
            del self._sequences[key]

    def _control_tensors(
        self, correlation_id: int | str, start: bool, end: bool, rows: int
    ) -> list[InferTensor]:
        shape = (rows, 1) if self._batching else (1,)
        tensors = []
        for control in self._controls:
            if control.kind == Control.CONTROL_SEQUENCE_CORRID:
                data = _correlation_tensor(correlation_id, control, self._model_name, shape)
            else:
                flag = {
                    Control.CONTROL_SEQUENCE_START: start,
                    Control.CONTROL_SEQUENCE_END: end,
                    Control.CONTROL_SEQUENCE_READY: True,
                }[control.kind]
                value = control.false_true[1 if flag else 0]
                dtype = protocol_to_numpy(control.datatype)
                data = np.full(shape, value, dtype=dtype)
            tensors.append(InferTensor(control.name, control.datatype, data))
        return tensors


def _key(correlation_id: object) -> SequenceKey:
    """A sequence's key here: the integer 7 and the string "7" name different sequences."""
    return (type(correlation_id), correlation_id)  # type: ignore[return-value]


def _correlation_tensor(
    correlation_id: int | str, control: ControlInput, model_name: str, shape: tuple[int, ...]
) -> np.ndarray:
    if control.datatype == "BYTES":
        data = np.empty(shape, dtype=np.object_)
        data.fill(str(correlation_id).encode())
        return data
    if isinstance(correlation_id, str):
        raise InferenceServerError(
            f"sequence '{correlation_id}' of model '{model_name}' has a string correlation ID, "
            f"and the model's CORRID control '{control.name}' is {control.datatype}: declare "
            "it TYPE_STRING",
            StatusCode.INVALID_ARG,
        )
    return np.full(shape, correlation_id, dtype=protocol_to_numpy(control.datatype))
