"""Transport-neutral inference request and response types.

Both the HTTP and the gRPC frontends decode into these and encode from them; model
deployments and backends see nothing else. Tensors are numpy arrays end to end (BYTES
tensors are numpy object arrays of ``bytes``), never Python lists.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass
class InferTensor:
    """A named tensor with its protocol datatype (``"FP32"``, ``"BYTES"``, ...)."""

    name: str
    datatype: str
    data: np.ndarray
    parameters: dict[str, Any] = field(default_factory=dict)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.data.shape)


@dataclass
class RequestedOutput:
    """An output the client asked for, with its per-output parameters.

    ``binary_data`` is None when the client did not say (the transport decides).
    ``class_count`` > 0 asks for the classification extension.
    """

    name: str
    binary_data: bool | None = None
    class_count: int = 0
    parameters: dict[str, Any] = field(default_factory=dict)


@dataclass
class InferRequest:
    """One client inference request, already decoded from its transport."""

    model_name: str
    inputs: list[InferTensor]
    model_version: str = ""
    id: str = ""
    parameters: dict[str, Any] = field(default_factory=dict)
    outputs: list[RequestedOutput] = field(default_factory=list)

    def input(self, name: str) -> InferTensor | None:
        for tensor in self.inputs:
            if tensor.name == name:
                return tensor
        return None

    @property
    def priority(self) -> int:
        return int(self.parameters.get("priority", 0) or 0)

    @property
    def timeout_us(self) -> int:
        return int(self.parameters.get("timeout", 0) or 0)


@dataclass
class InferResponse:
    """The result of one request: outputs in the order they should be returned."""

    model_name: str
    model_version: str
    outputs: list[InferTensor]
    id: str = ""
    parameters: dict[str, Any] = field(default_factory=dict)

    def output(self, name: str) -> InferTensor | None:
        for tensor in self.outputs:
            if tensor.name == name:
                return tensor
        return None
