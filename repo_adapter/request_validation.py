"""Check an inference request against the model config, with Triton's error messages."""

from __future__ import annotations

from tritonclient.grpc import model_config_pb2 as mc

from repo_adapter.datatypes import config_to_protocol
from repo_adapter.errors import InferenceServerError, StatusCode
from repo_adapter.inference import InferRequest


def _format_shape(shape) -> str:
    return "[" + ",".join(str(int(d)) for d in shape) + "]"


class RequestValidator:
    """Validates requests for one model; returns the request's batch rows."""

    def __init__(self, config: mc.ModelConfig) -> None:
        self.model_name = config.name
        self.max_batch_size = config.max_batch_size
        self._inputs = {
            t.name: (config_to_protocol(t.data_type), tuple(t.dims), t.optional)
            for t in config.input
        }
        self._required = [t.name for t in config.input if not t.optional]
        self._outputs = {t.name for t in config.output}

    def validate(self, request: InferRequest) -> int:
        """Raise INVALID_ARG for anything Triton would reject; return the batch rows."""
        model = self.model_name
        given = [tensor.name for tensor in request.inputs]
        for name in given:
            if name not in self._inputs:
                raise InferenceServerError(
                    f"unexpected inference input '{name}' for model '{model}'"
                )
        if len(set(given)) != len(given):
            raise InferenceServerError(f"input specified multiple times for model '{model}'")
        missing = [name for name in self._required if name not in given]
        if missing:
            raise InferenceServerError(
                f"expected {len(self._inputs)} inputs but got {len(given)} inputs for model "
                f"'{model}'. Got input(s) {given}, but missing required input(s) {missing}. "
                "Please provide all required input(s)."
            )
        rows = self._check_tensors(request)
        for output in request.outputs:
            if output.name not in self._outputs:
                raise InferenceServerError(
                    f"unexpected inference output '{output.name}' for model '{model}'"
                )
        return rows

    def _check_tensors(self, request: InferRequest) -> int:
        model = self.model_name
        batching = self.max_batch_size > 0
        rows = 1
        for index, tensor in enumerate(request.inputs):
            datatype, dims, _ = self._inputs[tensor.name]
            if tensor.datatype != datatype:
                raise InferenceServerError(
                    f"inference input '{tensor.name}' data-type is '{tensor.datatype}', but "
                    f"model '{model}' expects '{datatype}'"
                )
            shape = tensor.data.shape
            if batching:
                if len(shape) == 0:
                    raise InferenceServerError(
                        f"input '{tensor.name}' has no batch dimension for model '{model}'"
                    )
                batch = int(shape[0])
                if index == 0:
                    rows = batch
                    if batch > self.max_batch_size:
                        raise InferenceServerError(
                            f"inference request batch-size must be <= {self.max_batch_size} "
                            f"for '{model}'"
                        )
                elif batch != rows:
                    raise InferenceServerError(
                        f"input '{tensor.name}' batch size does not match other inputs for "
                        f"'{model}'"
                    )
                item_shape = shape[1:]
                expected = (-1, *dims)
            else:
                item_shape = shape
                expected = dims
            if len(item_shape) != len(dims) or any(
                d != -1 and d != s for d, s in zip(dims, item_shape, strict=True)
            ):
                raise InferenceServerError(
                    f"unexpected shape for input '{tensor.name}' for model '{model}'. "
                    f"Expected {_format_shape(expected)}, got {_format_shape(shape)}. "
                )
        return rows


def model_not_found(name: str, version: str = "") -> InferenceServerError:
    """Triton's error for an unknown model or version."""
    if version:
        message = f"Request for unknown model: '{name}' version {version} is not found"
    else:
        message = f"Request for unknown model: '{name}' is not found"
    return InferenceServerError(message, StatusCode.NOT_FOUND)
