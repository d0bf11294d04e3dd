"""Implicit state (``sequence_batching { state [...] }``): what the server keeps for a model
between the requests of a sequence, Ray-free.

Each state names an input the server fills (``input_name``) and an output the model produces
(``output_name``): the output of a sequence's request is the input of its next one. A START's
input is the ``initial_state`` (zeros, or ``<model>/initial_state/<data_file>`` in row-major
order), else zeros with every variable dimension 1 (Triton leaves it uninitialised). The
model's backend sees the state input and output as inputs and outputs of its own
(:func:`backend_inputs`, :func:`backend_outputs`); clients see the output only where the
config lists it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tritonclient.grpc import model_config_pb2 as mc

from repo_adapter.datatypes import config_to_protocol, protocol_to_numpy, tensor_from_bytes
from repo_adapter.errors import InferenceServerError, ModelConfigError
from repo_adapter.inference_types import InferTensor

INITIAL_STATE_DIRECTORY = "initial_state"


@dataclass(frozen=True)
class ImplicitState:
    """One state of a sequence model, with its START value (per batch row)."""

    input_name: str
    output_name: str
    datatype: str  # protocol datatype
    initial: np.ndarray  # one row's value, without the batch dimension

    def start_tensor(self, rows: int, batching: bool) -> InferTensor:
        """The state input of a sequence's first request."""
        data = np.stack([self.initial] * rows) if batching else self.initial.copy()
        return InferTensor(self.input_name, self.datatype, data)


def implicit_states(config: mc.ModelConfig, model_dir: Path) -> list[ImplicitState]:
    """The states ``config`` declares, their initial values read.

    Raises:
        ModelConfigError: an initial state whose dims are not fixed, or whose file is missing
            or holds the wrong number of bytes.
    """
    return [_state(config, state, model_dir) for state in config.sequence_batching.state]


def backend_inputs(config: mc.ModelConfig) -> list[str]:
    """The state inputs a backend gathers besides the config's inputs."""
    return [state.input_name for state in config.sequence_batching.state]


def backend_outputs(config: mc.ModelConfig) -> list[mc.ModelOutput]:
    """The state outputs a backend produces besides the config's outputs (one the config
    lists already is not repeated)."""
    listed = {output.name for output in config.output}
    return [
        mc.ModelOutput(name=state.output_name, data_type=state.data_type, dims=state.dims)
        for state in config.sequence_batching.state
        if state.output_name not in listed
    ]


def _state(
    config: mc.ModelConfig, state: mc.ModelSequenceBatching.State, model_dir: Path
) -> ImplicitState:
    datatype = config_to_protocol(state.data_type)
    label = f"model '{config.name}': state '{state.input_name}'"
    if not state.initial_state:
        shape = tuple(1 if d < 0 else int(d) for d in state.dims)
        return ImplicitState(state.input_name, state.output_name, datatype, _zeros(datatype, shape))
    if len(state.initial_state) > 1:
        raise ModelConfigError(f"{label}: only one initial_state is supported")
    initial = state.initial_state[0]
    shape = tuple(int(d) for d in initial.dims)
    if any(d < 0 for d in shape):
        raise ModelConfigError(f"{label}: initial_state needs fixed dims, got {list(shape)}")
    initial_type = config_to_protocol(initial.data_type or state.data_type)
    if initial.WhichOneof("state_data") == "data_file":
        path = model_dir / INITIAL_STATE_DIRECTORY / initial.data_file
        try:
            data = tensor_from_bytes(path.read_bytes(), initial_type, shape).copy()
        except OSError as err:
            raise ModelConfigError(f"{label}: cannot read '{path}': {err.strerror}") from None
        except InferenceServerError as err:
            raise ModelConfigError(f"{label}: file '{path}': {err.message}") from None
    else:
        data = _zeros(initial_type, shape)
    return ImplicitState(state.input_name, state.output_name, datatype, data)


def _zeros(datatype: str, shape: tuple[int, ...]) -> np.ndarray:
    if datatype == "BYTES":
        data = np.empty(shape, dtype=np.object_)
        data.fill(b"")
        return data
    return np.zeros(shape, dtype=protocol_to_numpy(datatype))
