"""Check an inference request against the model config, with Triton's error messages.

Mirrors core ``InferenceRequest::Normalize`` (and ``ValidateRequestInputs``): the same checks
in the same order, the same wording, and the ``[request id: <id>] `` prefix core puts on
request errors. :meth:`RequestValidator.normalize` also applies input ``reshape`` as core does,
so every backend sees the reshaped tensors.
"""

from __future__ import annotations

from collections.abc import Sequence

from tritonclient.grpc import model_config_pb2 as mc

from repo_adapter.datatypes import config_to_protocol
from repo_adapter.errors import InferenceServerError, StatusCode
from repo_adapter.inference_types import InferRequest, InferTensor

_WILDCARD = -1

# Core appends this to shape errors of batching models (infer_request.cc).
_IMPLICIT_BATCH_NOTE = (
    "NOTE: Setting a non-zero max_batch_size in the model config requires a batch dimension "
    "to be prepended to each input shape. If you want to specify the full shape including the "
    "batch dim in your input dims config, try setting max_batch_size to zero. See the model "
    "configuration docs for more info on max_batch_size."
)


def _format_shape(shape) -> str:
    return "[" + ",".join(str(int(d)) for d in shape) + "]"


def log_request(request_id: str) -> str:
    """Core's ``LogRequest()`` prefix of request errors."""
    return f"[request id: {request_id or '<id_unknown>'}] "


def reshaped(shape: Sequence[int], dims: Sequence[int], target: Sequence[int]) -> tuple:
    """``shape`` (matching ``dims``) mapped onto ``target``: wildcards carried over in order.

    Core's rule for both input and output reshape: the values of the ``-1`` dims of the
    source fill the ``-1`` dims of the target, left to right. A target wildcard with no source
    value left stays ``-1`` (numpy then infers it from the element count).
    """
    variable = [int(s) for s, d in zip(shape, dims, strict=True) if d == _WILDCARD]
    variable.reverse()
    return tuple(
        (variable.pop() if variable else _WILDCARD) if d == _WILDCARD else int(d) for d in target
    )


class RequestValidator:
    """Validates requests for one model; returns the request's batch rows."""

    def __init__(self, config: mc.ModelConfig) -> None:
        self.model_name = config.name
        self.max_batch_size = config.max_batch_size
        self._configs = {t.name: t for t in config.input}
        self._inputs = {
            t.name: (config_to_protocol(t.data_type), tuple(t.dims), t.optional)
            for t in config.input
        }
        self._required = [t.name for t in config.input if not t.optional]
        self._outputs = {t.name for t in config.output}

    def normalize(self, request: InferRequest) -> int:
        """:meth:`validate`, then replace inputs that have a ``reshape`` by reshaped views."""
        rows = self.validate(request)
        batch = (rows,) if self.max_batch_size > 0 else ()
        for index, tensor in enumerate(request.inputs):
            config = self._configs[tensor.name]
            if not config.HasField("reshape"):
                continue
            item_shape = tensor.data.shape[len(batch) :]
            shape = batch + reshaped(item_shape, config.dims, config.reshape.shape)
            request.inputs[index] = InferTensor(
                tensor.name, tensor.datatype, tensor.data.reshape(shape), tensor.parameters
            )
        return rows

    def validate(self, request: InferRequest) -> int:
        """Raise INVALID_ARG for anything Triton would reject; return the batch rows."""
        prefix = log_request(request.id)
        given = [tensor.name for tensor in request.inputs]
        seen: set[str] = set()
        for name in given:  # the frontend refuses duplicates while building the request
            if name in seen:
                raise InferenceServerError(f"{prefix}input '{name}' already exists in request")
            seen.add(name)
        for output in request.outputs:
            if output.name not in self._outputs:
                raise InferenceServerError(
                    f"unexpected inference output '{output.name}' for model '{self.model_name}'"
                )
        self._check_input_count(given, prefix)
        rows = self._batch_rows(request, prefix)
        for tensor in request.inputs:
            self._check_tensor(tensor, prefix)
        return rows

    def _check_input_count(self, given: list[str], prefix: str) -> None:
        """Core ``ValidateRequestInputs``: only the number of inputs is checked here."""
        if len(self._required) <= len(given) <= len(self._inputs):
            return
        missing = "".join(f"'{name}'," for name in self._required if name not in given)
        # Core builds "[" + "'a'," ... then drops the last character: with nothing missing
        # that drops the "[" itself, leaving just "]".
        missing = ("[" + missing)[:-1] + "]"
        got = "[" + ",".join(f"'{name}'" for name in given) + "]"
        model = self.model_name
        if len(self._inputs) == len(self._required):
            expected = f"expected {len(self._inputs)} inputs"
        else:
            expected = (
                f"expected number of inputs between {len(self._required)} and {len(self._inputs)}"
            )
        raise InferenceServerError(
            f"{prefix}{expected} but got {len(given)} inputs for model '{model}'. Got input(s) "
            f"{got}, but missing required input(s) {missing}. Please provide all required "
            "input(s)."
        )

    def _batch_rows(self, request: InferRequest, prefix: str) -> int:
        """The request's batch size (1 for non-batching models), checked as core does."""
        model = self.model_name
        rows = 0
        for tensor in request.inputs:
            self._input_config(tensor.name)
            if self.max_batch_size <= 0:
                continue
            shape = tensor.data.shape
            if len(shape) == 0:
                raise InferenceServerError(
                    f"{prefix}input '{tensor.name}' has no shape but model requires batch "
                    f"dimension for '{model}'"
                )
            if rows == 0:
                rows = int(shape[0])
            elif int(shape[0]) != rows:
                raise InferenceServerError(
                    f"{prefix}input '{tensor.name}' batch size does not match other inputs for "
                    f"'{model}'"
                )
        if rows > self.max_batch_size:
            raise InferenceServerError(
                f"{prefix}inference request batch-size must be <= {self.max_batch_size} for "
                f"'{model}'"
            )
        return rows if self.max_batch_size > 0 else 1

    def _input_config(self, name: str) -> tuple:
        if name not in self._inputs:
            raise InferenceServerError(
                f"unexpected inference input '{name}' for model '{self.model_name}'"
            )
        return self._inputs[name]

    def _check_tensor(self, tensor: InferTensor, prefix: str) -> None:
        model = self.model_name
        datatype, dims, _ = self._inputs[tensor.name]
        if tensor.datatype != datatype:
            raise InferenceServerError(
                f"{prefix}inference input '{tensor.name}' data-type is '{tensor.datatype}', but "
                f"model '{model}' expects '{datatype}'"
            )
        shape = tensor.data.shape
        batching = self.max_batch_size > 0
        item_shape = shape[1:] if batching else shape
        matches = len(item_shape) == len(dims)
        if matches:
            for expected, actual in zip(dims, item_shape, strict=True):
                if actual == _WILDCARD:
                    raise InferenceServerError(
                        f"{prefix}All input dimensions should be specified for input "
                        f"'{tensor.name}' for model '{model}', got {_format_shape(shape)}"
                    )
                if expected != _WILDCARD and expected != actual:
                    matches = False
                    break
        if not matches:
            full_dims = (_WILDCARD, *dims) if batching else dims
            note = _IMPLICIT_BATCH_NOTE if batching else ""
            raise InferenceServerError(
                f"{prefix}unexpected shape for input '{tensor.name}' for model '{model}'. "
                f"Expected {_format_shape(full_dims)}, got {_format_shape(shape)}. {note}"
            )


def model_not_found(name: str, version: str = "") -> InferenceServerError:
    """Triton's error for an unknown model or version."""
    if version:
        message = f"Request for unknown model: '{name}' version {version} is not found"
    else:
        message = f"Request for unknown model: '{name}' is not found"
    return InferenceServerError(message, StatusCode.NOT_FOUND)
