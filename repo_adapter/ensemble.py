"""Ensemble models: the step graph of ``ensemble_scheduling`` and Triton's load-time checks."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from tritonclient.grpc import model_config_pb2 as mc

from repo_adapter.errors import ModelConfigError


@dataclass(frozen=True)
class EnsembleStep:
    """One step: member model, version ("" = latest), tensor maps (member name -> ensemble name)."""

    model_name: str
    model_version: str
    input_map: dict[str, str]
    output_map: dict[str, str]


def ensemble_steps(config: mc.ModelConfig) -> list[EnsembleStep]:
    return [
        EnsembleStep(
            model_name=step.model_name,
            model_version="" if step.model_version < 0 else str(step.model_version),
            input_map=dict(step.input_map),
            output_map=dict(step.output_map),
        )
        for step in config.ensemble_scheduling.step
    ]


def member_names(config: mc.ModelConfig) -> list[str]:
    return sorted({step.model_name for step in config.ensemble_scheduling.step})


def validate_ensemble(config: mc.ModelConfig, members: Mapping[str, mc.ModelConfig | None]) -> None:
    """Raise ModelConfigError when Triton would refuse to load the ensemble.

    ``members`` maps every model of the repository to its config, or None when that model
    is unavailable.
    """
    name = config.name

    def fail(message: str) -> None:
        raise ModelConfigError(f"in ensemble '{name}', {message}")

    producers: dict[str, str] = {t.name: "<ensemble input>" for t in config.input}
    dtypes: dict[str, int] = {t.name: t.data_type for t in config.input}
    consumed: set[str] = set()
    steps = ensemble_steps(config)
    if not steps:
        fail("ensemble_scheduling has no step")
    for step in steps:
        member = members.get(step.model_name, "missing")
        if member == "missing":
            fail(f"model '{step.model_name}' is not found in the model repository")
        if member is None:
            fail(f"model '{step.model_name}' is not available")
        inputs = {t.name: t for t in member.input}
        outputs = {t.name: t for t in member.output}
        for member_input, tensor in step.input_map.items():
            if member_input not in inputs:
                fail(f"'{member_input}' is not an input of model '{step.model_name}'")
            consumed.add(tensor)
        for required in (t.name for t in member.input if not t.optional):
            if required not in step.input_map:
                fail(f"input '{required}' of model '{step.model_name}' is not mapped")
        for member_output, tensor in step.output_map.items():
            if member_output not in outputs:
                fail(f"'{member_output}' is not an output of model '{step.model_name}'")
            if tensor in producers:
                fail(f"ensemble tensor '{tensor}' is produced more than once")
            producers[tensor] = step.model_name
            dtypes[tensor] = outputs[member_output].data_type
        if member.max_batch_size > 0 and config.max_batch_size > member.max_batch_size:
            raise ModelConfigError(
                f"ensemble {name} allows maximum batch size {config.max_batch_size}, but it "
                f"contains model {step.model_name} which only allows maximum batch size to be "
                f"{member.max_batch_size}"
            )
    for step in steps:
        member = members[step.model_name]
        inputs = {t.name: t for t in member.input}
        for member_input, tensor in step.input_map.items():
            if tensor not in producers:
                fail(f"ensemble tensor '{tensor}' is not produced by any step or input")
            if dtypes[tensor] != inputs[member_input].data_type:
                fail(
                    f"data type of ensemble tensor '{tensor}' does not match input "
                    f"'{member_input}' of model '{step.model_name}'"
                )
    for tensor in config.input:
        if tensor.name not in consumed:
            raise ModelConfigError(
                f"ensemble input '{tensor.name}' for ensemble {name}' is not used"
            )
    for tensor in config.output:
        if tensor.name not in producers or producers[tensor.name] == "<ensemble input>":
            raise ModelConfigError(f"output '{tensor.name}' for ensemble '{name}' is not written")
        if dtypes[tensor.name] != tensor.data_type:
            fail(f"data type of ensemble output '{tensor.name}' does not match its producer")
    _check_acyclic(name, steps)


def _check_acyclic(name: str, steps: list[EnsembleStep]) -> None:
    produced_by = {t: i for i, s in enumerate(steps) for t in s.output_map.values()}
    state: dict[int, int] = {}  # 1 visiting, 2 done

    def visit(index: int) -> None:
        if state.get(index) == 2:
            return
        if state.get(index) == 1:
            raise ModelConfigError(f"in ensemble '{name}', the steps form a cycle")
        state[index] = 1
        for tensor in steps[index].input_map.values():
            if tensor in produced_by:
                visit(produced_by[tensor])
        state[index] = 2

    for index in range(len(steps)):
        visit(index)
