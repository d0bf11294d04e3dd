"""The requests both servers receive for sequence models: ``sequence_sum`` (the python model
of ``tests/deployments/model_repository``: each sequence's running sum and what the sequence
batcher gave it, its control inputs and flags) with the ``oldest`` strategy, the same
model with ``direct``, and ``sequence_state`` (implicit state: an initial state from a file,
one of variable dims, a state output the config lists and one it does not)."""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from tests.conformance.driver import CaseRegistry, Target, TensorSpec

SEQUENCE_REGISTRY = CaseRegistry()
MODELS = ("sequence_sum", "sequence_direct")


def value(number: int) -> list[TensorSpec]:
    return [TensorSpec("IN", np.array([[number]], np.int32), "INT32", True)]


def step(t: Target, model: str, number: int, sequence_id: int = 0, **flags: bool) -> Any:
    sequence = {"sequence_id": sequence_id, **{f"sequence_{k}": v for k, v in flags.items()}}
    return t.client.infer(model, value(number), sequence=sequence)


def _register(model: str, base: int) -> None:
    case = SEQUENCE_REGISTRY.case

    @case(f"{model}_no_id", "sequence", f"{model}: a request without a correlation ID")
    def _(t: Target) -> Any:
        return step(t, model, 1)

    @case(f"{model}_not_started", "sequence", f"{model}: a sequence without START")
    def _(t: Target) -> Any:
        return step(t, model, 1, base + 77)

    @case(f"{model}_steps", "sequence", f"{model}: start, middle, end: sums and control inputs")
    def _(t: Target) -> Any:
        return [
            step(t, model, 5, base + 1, start=True),
            step(t, model, 3, base + 1),
            step(t, model, 2, base + 1, end=True),
        ]

    @case(f"{model}_after_end", "sequence", f"{model}: a request after the sequence's END")
    def _(t: Target) -> Any:
        return step(t, model, 1, base + 1)

    @case(f"{model}_start_and_end", "sequence", f"{model}: one request starting and ending")
    def _(t: Target) -> Any:
        return step(t, model, 9, base + 5, start=True, end=True)

    @case(f"{model}_restart", "sequence", f"{model}: START again on a running sequence")
    def _(t: Target) -> Any:
        return [step(t, model, 4, base + 6, start=True), step(t, model, 1, base + 6, start=True)]

    @case(f"{model}_idle", "sequence", f"{model}: a request after the idle timeout (0.5 s)")
    def _(t: Target) -> Any:
        first = step(t, model, 1, base + 8, start=True)
        time.sleep(1.0)
        return [first, step(t, model, 1, base + 8)]

    @case(f"{model}_stats", "sequence", f"{model}: statistics after the requests above")
    def _(t: Target) -> Any:
        return t.client.statistics(model)


for _index, _model in enumerate(MODELS):
    _register(_model, 1000 * (_index + 1))


def state_step(t: Target, number: int, sequence_id: int, **flags: bool) -> Any:
    sequence = {"sequence_id": sequence_id, **{f"sequence_{k}": v for k, v in flags.items()}}
    return t.client.infer("sequence_state", value(number), sequence=sequence)


@SEQUENCE_REGISTRY.case("state_config", "sequence", "sequence_state: /config with its states")
def _(t: Target) -> Any:
    return t.client.model_config("sequence_state")


@SEQUENCE_REGISTRY.case(
    "state_steps", "sequence", "sequence_state: three requests: the state each one saw"
)
def _(t: Target) -> Any:
    return [
        state_step(t, 1, 3001, start=True),
        state_step(t, 2, 3001),
        state_step(t, 3, 3001, end=True),
    ]


@SEQUENCE_REGISTRY.case("state_no_id", "sequence", "sequence_state: no correlation ID")
def _(t: Target) -> Any:
    return t.client.infer("sequence_state", value(1))
