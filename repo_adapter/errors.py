"""Triton's error codes and the one exception type that carries them to every transport."""

from __future__ import annotations

import enum


class StatusCode(enum.Enum):
    """Triton server error codes (``TRITONSERVER_Error_Code``) with their wire mappings."""

    UNKNOWN = "UNKNOWN"
    INTERNAL = "INTERNAL"
    NOT_FOUND = "NOT_FOUND"
    INVALID_ARG = "INVALID_ARG"
    UNAVAILABLE = "UNAVAILABLE"
    UNSUPPORTED = "UNSUPPORTED"
    ALREADY_EXISTS = "ALREADY_EXISTS"
    CANCELLED = "CANCELLED"

    @property
    def http_status(self) -> int:
        """HTTP status as Triton's ``HttpCodeFromError`` maps it (everything else is 400)."""
        return _HTTP_STATUS.get(self, 400)

    @property
    def grpc_status_name(self) -> str:
        """Name of the ``grpc.StatusCode`` Triton's gRPC frontend answers with."""
        return _GRPC_STATUS.get(self, "UNKNOWN")


_HTTP_STATUS = {
    StatusCode.INTERNAL: 500,
    StatusCode.NOT_FOUND: 404,
    StatusCode.UNAVAILABLE: 503,
    StatusCode.UNSUPPORTED: 501,
}

_GRPC_STATUS = {
    StatusCode.INTERNAL: "INTERNAL",
    StatusCode.NOT_FOUND: "NOT_FOUND",
    StatusCode.INVALID_ARG: "INVALID_ARGUMENT",
    StatusCode.UNAVAILABLE: "UNAVAILABLE",
    StatusCode.UNSUPPORTED: "UNIMPLEMENTED",
    StatusCode.ALREADY_EXISTS: "ALREADY_EXISTS",
    StatusCode.CANCELLED: "CANCELLED",
}


class InferenceServerError(Exception):
    """An error that reaches the client as Triton's ``{"error": message}`` with ``code``.

    Picklable, so it crosses Ray process boundaries unchanged.
    """

    def __init__(self, message: str, code: StatusCode = StatusCode.INVALID_ARG) -> None:
        super().__init__(message, code)
        self.message = message
        self.code = code

    def __str__(self) -> str:
        return self.message

    def __repr__(self) -> str:
        return f"InferenceServerError({self.message!r}, {self.code.name})"


class ModelConfigError(InferenceServerError):
    """A model's configuration or files are invalid: the model is UNAVAILABLE with this reason."""

    def __init__(self, message: str) -> None:
        super().__init__(message, StatusCode.INVALID_ARG)


class NoDeviceError(ModelConfigError):
    """The model asks for a device (a GPU) the cluster does not have: a placement fact."""


class ModelResponseError(InferenceServerError):
    """An error response a model returned for one request of a batch that executed.

    The client gets the error; Triton's statistics still count the request as a success,
    since the execution itself succeeded.
    """


class DecoupledModelError(InferenceServerError):
    """A single-response call (HTTP ``infer``, gRPC ``ModelInfer``) to a decoupled model,
    whose responses only a stream can carry; each transport words it as Triton does."""

    def __init__(self, model_name: str) -> None:
        super().__init__(
            f"model '{model_name}' uses the decoupled transaction policy: its responses are "
            "read through a stream (gRPC ModelStreamInfer, or generate_stream)",
            StatusCode.UNSUPPORTED,
        )
        self.model_name = model_name

    def __reduce__(self):  # pickled by its model name (Exception pickles its args)
        return (DecoupledModelError, (self.model_name,))
