"""``pb_utils.Logger``: model log lines through Python logging (logger ``rayton.python_model``)."""

from __future__ import annotations

import enum
import logging

MODEL_LOGGER_NAME = "rayton.python_model"
_LOGGER = logging.getLogger(MODEL_LOGGER_NAME)


class LogLevel(enum.IntEnum):
    """Triton's python backend log levels."""

    INFO = 0
    WARNING = 1
    ERROR = 2
    VERBOSE = 3


_PYTHON_LEVELS = {
    LogLevel.INFO: logging.INFO,
    LogLevel.WARNING: logging.WARNING,
    LogLevel.ERROR: logging.ERROR,
    LogLevel.VERBOSE: logging.DEBUG,
}


def _emit(message: str, level: LogLevel) -> None:
    # stacklevel=3 attributes the record to the model code that called Logger.
    _LOGGER.log(_PYTHON_LEVELS[LogLevel(level)], "%s", message, stacklevel=3)


class Logger:
    """Static logging functions: ``pb_utils.Logger.log_info("...")``."""

    LogLevel = LogLevel
    INFO = LogLevel.INFO
    WARNING = LogLevel.WARNING
    ERROR = LogLevel.ERROR
    VERBOSE = LogLevel.VERBOSE

    @staticmethod
    def log(message: str, level: LogLevel = LogLevel.INFO) -> None:
        """Log ``message`` at ``level`` (a :class:`LogLevel`)."""
        _emit(message, level)

    @staticmethod
    def log_info(message: str) -> None:
        """Log at INFO."""
        _emit(message, LogLevel.INFO)

    @staticmethod
    def log_warn(message: str) -> None:
        """Log at WARNING."""
        _emit(message, LogLevel.WARNING)

    @staticmethod
    def log_error(message: str) -> None:
        """Log at ERROR."""
        _emit(message, LogLevel.ERROR)

    @staticmethod
    def log_verbose(message: str) -> None:
        """Log at VERBOSE (Python DEBUG)."""
        _emit(message, LogLevel.VERBOSE)
