"""Triton's logging extension (``/v2/logging``, gRPC ``LogSettings``): the settings and what
they change in a process.

The repository controller owns the settings and applies them to every replica
(:func:`apply_log_settings` in each); this module is Ray-free. What they change: which levels
rayton's loggers (``deployments``, ``repo_adapter``, ``cluster`` and python models'
``pb_utils.Logger``) let through (``log_info`` / ``log_warning`` / ``log_error``;
``log_verbose_level`` > 0 adds the verbose ones), and, with ``log_file``, a copy of those lines
in that file on each node, in Triton's ``default`` or ``ISO8601`` format (the file is set at
start-up only, as Triton's ``--log-file``).
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import asdict, dataclass, replace
from typing import Any, TypedDict

from repo_adapter.errors import InferenceServerError, StatusCode
from repo_adapter.inference_types import JsonObject

LOGGER_ROOTS = ("deployments", "repo_adapter", "cluster", "rayton")
LOG_FORMATS = ("default", "ISO8601")
_BOOLEANS = ("log_info", "log_warning", "log_error")


class LogSettingsDocument(TypedDict):
    """Triton's log settings as its logging extension answers them."""

    log_file: str
    log_info: bool
    log_warning: bool
    log_error: bool
    log_verbose_level: int
    log_format: str


@dataclass(frozen=True)
class LogSettings:
    """Triton's log settings, with its defaults."""

    log_file: str = ""
    log_info: bool = True
    log_warning: bool = True
    log_error: bool = True
    log_verbose_level: int = 0
    log_format: str = "default"

    def to_json(self) -> LogSettingsDocument:
        return LogSettingsDocument(**asdict(self))

    def updated(self, changes: JsonObject) -> LogSettings:
        """These settings with ``changes`` applied, checked as Triton checks them (other keys
        are ignored, as Triton ignores them).

        Raises:
            InferenceServerError: INVALID_ARG for a value of the wrong type or an unknown
                format; UNSUPPORTED for ``log_file`` (only the command line sets it, as in
                Triton). Nothing changes then.
        """
        if not isinstance(changes, dict):
            raise InferenceServerError("log settings must be a JSON object")
        values: dict[str, Any] = {}
        for key, value in changes.items():
            if key in _BOOLEANS:
                if not isinstance(value, bool):
                    raise InferenceServerError("attempt to access JSON non-boolean as boolean")
            elif key == "log_verbose_level":
                if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                    raise InferenceServerError(
                        "attempt to access JSON non-unsigned-integer as unsigned-integer"
                    )
            elif key == "log_format":
                if value not in LOG_FORMATS:
                    raise InferenceServerError(f"invalid argument for --log_format, got: {value}")
            elif key == "log_file":
                raise InferenceServerError(
                    "log file location can not be updated through network protocol",
                    StatusCode.UNSUPPORTED,
                )
            else:
                continue
            values[key] = value
        return replace(self, **values)


class _LevelFilter(logging.Filter):
    """Drops the levels the settings turn off."""

    def __init__(self, settings: LogSettings) -> None:
        super().__init__()
        self.settings = settings

    def filter(self, record: logging.LogRecord) -> bool:
        settings, level = self.settings, record.levelno
        if level >= logging.ERROR:
            return settings.log_error
        if level >= logging.WARNING:
            return settings.log_warning
        if level >= logging.INFO:
            return settings.log_info
        return settings.log_verbose_level > 0


class TritonFormatter(logging.Formatter):
    """Triton's line formats: ``I1201 17:10:00.123456 4242 file.py:12] message`` (default) or
    ``2026-12-01T17:10:00Z I file.py:12] message`` (ISO8601)."""

    def __init__(self, log_format: str) -> None:
        super().__init__()
        self.log_format = log_format

    def format(self, record: logging.LogRecord) -> str:
        letter = record.levelname[:1] if record.levelno >= logging.INFO else "V"
        where = f"{os.path.basename(record.pathname)}:{record.lineno}]"
        message = record.getMessage()
        if record.exc_info:
            message += "\n" + self.formatException(record.exc_info)
        if self.log_format == "ISO8601":
            stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(record.created))
            return f"{stamp} {letter} {where} {message}"
        local = time.localtime(record.created)
        micros = int((record.created % 1) * 1_000_000)
        stamp = time.strftime("%m%d %H:%M:%S", local) + f".{micros:06d}"
        return f"{letter}{stamp} {record.process} {where} {message}"


_applied: dict[str, Any] = {"filter": None, "file_handler": None, "file": ""}


def _lowest_level(settings: LogSettings) -> int:
    """The lowest level any setting lets through (the loggers' level)."""
    if settings.log_verbose_level > 0:
        return logging.DEBUG
    for level, on in (
        (logging.INFO, settings.log_info),
        (logging.WARNING, settings.log_warning),
        (logging.ERROR, settings.log_error),
    ):
        if on:
            return level
    return logging.CRITICAL + 1


def _rayton_loggers() -> list[logging.Logger]:
    """The root loggers and every logger created under them so far (a logger's filters do
    not see its children's records, so each gets the level filter)."""
    loggers = [logging.getLogger(root) for root in LOGGER_ROOTS]
    for name, logger in list(logging.Logger.manager.loggerDict.items()):
        if isinstance(logger, logging.Logger) and name.split(".")[0] in LOGGER_ROOTS:
            loggers.append(logger)
    return loggers


def apply_log_settings(settings: LogSettings) -> None:
    """Make this process's rayton loggers follow ``settings`` (idempotent).

    Raises:
        OSError: ``log_file`` cannot be opened for appending.
    """
    handler = _applied["file_handler"]
    if handler is not None and _applied["file"] != settings.log_file:
        for root in LOGGER_ROOTS:
            logging.getLogger(root).removeHandler(handler)
        handler.close()
        handler = None
    if handler is None and settings.log_file:
        handler = logging.FileHandler(settings.log_file)
    if handler is not None:
        handler.setFormatter(TritonFormatter(settings.log_format))
    old_filter, new_filter = _applied["filter"], _LevelFilter(settings)
    for logger in _rayton_loggers():
        if old_filter is not None:
            logger.removeFilter(old_filter)
        logger.addFilter(new_filter)
    for root in LOGGER_ROOTS:
        logger = logging.getLogger(root)
        logger.setLevel(_lowest_level(settings))
        if handler is not None and handler not in logger.handlers:
            logger.addHandler(handler)
    _applied.update(filter=new_filter, file_handler=handler, file=settings.log_file)


def reset_log_settings() -> None:
    """Undo :func:`apply_log_settings` in this process (loggers back to Python's defaults)."""
    old_filter, handler = _applied["filter"], _applied["file_handler"]
    for logger in _rayton_loggers():
        if old_filter is not None:
            logger.removeFilter(old_filter)
    for root in LOGGER_ROOTS:
        logger = logging.getLogger(root)
        logger.setLevel(logging.NOTSET)
        if handler is not None:
            logger.removeHandler(handler)
    if handler is not None:
        handler.close()
    _applied.update(filter=None, file_handler=None, file="")


def log_settings_error(err: Exception) -> InferenceServerError:
    """A log file that cannot be opened, as an INVALID_ARG error."""
    return InferenceServerError(f"failed to apply log settings: {err}", StatusCode.INVALID_ARG)
