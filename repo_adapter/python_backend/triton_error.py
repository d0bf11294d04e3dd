"""``TritonError`` (per-response errors), ``TritonModelException`` and their status codes."""

from __future__ import annotations

import enum

from repo_adapter.errors import StatusCode


class TritonErrorCode(enum.IntEnum):
    """``TRITONSERVER_Error_Code`` values, exposed as ``TritonError.NOT_FOUND`` etc."""

    UNKNOWN = 0
    INTERNAL = 1
    NOT_FOUND = 2
    INVALID_ARG = 3
    UNAVAILABLE = 4
    UNSUPPORTED = 5
    ALREADY_EXISTS = 6
    CANCELLED = 7


class TritonError(Exception):
    """An error for one response: ``InferenceResponse(error=TritonError("msg", code))``.

    In Triton this is not an exception class; it derives from ``Exception`` here only so that a
    model raising one by mistake gets its message reported instead of a ``TypeError``.

    Args:
        message: What went wrong; it reaches the client unchanged.
        code: One of the class attributes (``TritonError.NOT_FOUND`` ...); default INTERNAL.
    """

    UNKNOWN = TritonErrorCode.UNKNOWN
    INTERNAL = TritonErrorCode.INTERNAL
    NOT_FOUND = TritonErrorCode.NOT_FOUND
    INVALID_ARG = TritonErrorCode.INVALID_ARG
    UNAVAILABLE = TritonErrorCode.UNAVAILABLE
    UNSUPPORTED = TritonErrorCode.UNSUPPORTED
    ALREADY_EXISTS = TritonErrorCode.ALREADY_EXISTS
    CANCELLED = TritonErrorCode.CANCELLED

    def __init__(self, message: str, code: int = TritonErrorCode.INTERNAL) -> None:
        if message is None:
            raise TypeError("TritonError message must not be None")
        try:
            error_code = TritonErrorCode(code)
        except ValueError:
            raise ValueError(f"invalid TritonError code {code!r}") from None
        super().__init__(str(message))
        self._message = str(message)
        self._code = error_code

    def message(self) -> str:
        """The error message."""
        return self._message

    def code(self) -> TritonErrorCode:
        """The error code (a ``TritonError`` class attribute)."""
        return self._code

    def __str__(self) -> str:
        return self._message

    def __repr__(self) -> str:
        return f"TritonError({self._message!r}, {self._code.name})"


class TritonModelException(Exception):  # noqa: N818 - Triton's name
    """Raised by the API for misuse and failed operations (BLS setup, model control, ...)."""

    def message(self) -> str:
        """The exception message."""
        return str(self)


def from_status_code(code: StatusCode) -> TritonErrorCode:
    """Status code of an :class:`InferenceServerError` -> ``TritonError`` code."""
    return TritonErrorCode[code.name]
