"""Triton's trace extension settings (``/v2/trace/setting``, ``/v2/models/{m}/trace/setting``,
gRPC ``TraceSetting``): the server-wide settings, per-model overrides, and their checks.

The repository controller owns one :class:`TraceSettingsTable` and sends its
:meth:`~TraceSettingsTable.plan` to every replica, whose tracer samples requests by it
(:mod:`deployments.observability.tracing`). Values are Triton's: numbers travel as strings; ``null``
clears a model's override (the model follows the server's setting again) or resets a server
setting to its start-up value; ``trace_file`` is set at start-up only (``--trace-config
triton,file=...``). Ray-free.

Where rayton is stricter than Triton 2.51 (which accepts these and changes nothing, or wraps
them): an unknown level, an empty level list, a negative rate or log frequency, a rate of 0
while tracing is off, and a body that is not an object are errors.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, TypedDict

from repo_adapter.errors import InferenceServerError, StatusCode

OFF = "OFF"
LEVELS = ("TIMESTAMPS", "TENSORS")
TRACE_MODE = "triton"  # Triton's trace file; "opentelemetry": spans over OTLP/HTTP
MODES = (TRACE_MODE, "opentelemetry")
_UINT32_MAX = 2**32 - 1
# Triton's setting name -> TraceSettings field
_FIELDS = {
    "trace_level": "level",
    "trace_rate": "rate",
    "trace_count": "count",
    "log_frequency": "log_frequency",
    "trace_file": "file",
    "trace_mode": "mode",
}


class TraceSettingsDocument(TypedDict):
    """Triton's trace settings as its trace extension answers them (numbers as strings)."""

    trace_level: list[str]
    trace_rate: str
    trace_count: str
    log_frequency: str
    trace_file: str
    trace_mode: str


@dataclass(frozen=True)
class TraceSettings:
    """One set of trace settings, with Triton's defaults (tracing off)."""

    level: tuple[str, ...] = ()  # empty: OFF
    rate: int = 1000  # trace every rate-th request
    count: int = -1  # traces left to collect; -1: no limit
    log_frequency: int = 0  # traces per file (<file>.<n>); 0: all in <file>
    file: str = ""
    mode: str = TRACE_MODE

    @property
    def tracing(self) -> bool:
        return bool(self.level) and self.count != 0

    def view(self) -> TraceSettingsDocument:
        """Triton's JSON answer."""
        return {
            "trace_level": list(self.level) or [OFF],
            "trace_rate": str(self.rate),
            "trace_count": str(self.count),
            "log_frequency": str(self.log_frequency),
            "trace_file": self.file,
            "trace_mode": self.mode,
        }


def _invalid(message: str) -> InferenceServerError:
    return InferenceServerError(f"Attempting to set invalid trace setting :{message}")


def _string(key: str, value: Any) -> str:
    if not isinstance(value, str):
        raise InferenceServerError("attempt to access JSON non-string as string")
    return value


def _unsigned(key: str, value: Any, lowest: int = 0) -> int:
    text = _string(key, value)
    try:
        number = int(text)
    except ValueError:
        number = None
    if number is None or number < lowest or number > _UINT32_MAX:
        raise InferenceServerError(f"Unable to parse '{key}', got: {text}")
    return number


def _level(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise InferenceServerError("attempt to access JSON non-array as array")
    names = [_string("trace_level", item) for item in value]
    if not names:
        raise InferenceServerError(
            f"Unable to parse 'trace_level', got: []; give {OFF} or some of {', '.join(LEVELS)}"
        )
    if OFF in names:
        if len(names) > 1:
            raise InferenceServerError("Expect only one trace level 'OFF' is specified")
        return ()
    for name in names:
        if name not in LEVELS:
            raise InferenceServerError(
                f"Unable to parse 'trace_level', got: {name}; give {OFF} or some of "
                f"{', '.join(LEVELS)}"
            )
    return tuple(dict.fromkeys(names))


def parse_changes(changes: Any) -> dict[str, Any]:
    """Triton's settings ``changes`` as TraceSettings field values (None: clear / reset).

    Unknown keys and ``trace_mode`` are ignored, as Triton ignores them.

    Raises:
        InferenceServerError: INVALID_ARG for a value Triton cannot parse; UNSUPPORTED for
            ``trace_file`` (start-up only).
    """
    if not isinstance(changes, dict):
        raise InferenceServerError("trace settings must be a JSON object")
    parsed: dict[str, Any] = {}
    for key, value in changes.items():
        name = _FIELDS.get(key)
        if name is None or name == "mode":
            continue
        if name == "file":
            raise InferenceServerError(
                "trace file location can not be updated through network protocol",
                StatusCode.UNSUPPORTED,
            )
        if value is None:
            parsed[name] = None
        elif name == "level":
            parsed[name] = _level(value)
        elif name == "rate":
            parsed[name] = _unsigned(key, value)
            if parsed[name] == 0:
                raise _invalid("sample rate must be non-zero")
        elif name == "count":
            text = _string(key, value)
            try:
                count = int(text)
            except ValueError:
                count = -2
            if count < -1:
                raise InferenceServerError(
                    f"Unable to parse 'trace_count'. Expecting value >= -1, got:{text}"
                )
            parsed[name] = count
        else:
            parsed[name] = _unsigned(key, value)
    return parsed


def check(settings: TraceSettings) -> None:
    """Triton's checks of a resulting set of settings."""
    if settings.level and not settings.file and settings.mode == TRACE_MODE:
        raise _invalid("trace file name is not given")


class TraceSettingsTable:
    """The server's trace settings and the models' overrides (the controller's state)."""

    def __init__(self, startup: TraceSettings) -> None:
        check(startup)
        self.startup = startup
        self.server = startup
        self.overrides: dict[str, dict[str, Any]] = {}

    def effective(self, model: str | None = None) -> TraceSettings:
        """The settings requests of ``model`` (None: the server's) are traced by."""
        override = self.overrides.get(model or "")
        return replace(self.server, **override) if override else self.server

    def view(self, model: str | None = None) -> TraceSettingsDocument:
        return self.effective(model).view()

    def update(self, changes: Any, model: str | None = None) -> TraceSettingsDocument:
        """Apply Triton's ``changes`` to the server (``model`` None) or to one model; all or
        nothing. Returns the resulting view."""
        parsed = parse_changes(changes)
        if model:
            override = dict(self.overrides.get(model, {}))
            for name, value in parsed.items():
                if value is None:
                    override.pop(name, None)
                else:
                    override[name] = value
            check(replace(self.server, **override))
            if override:
                self.overrides[model] = override
            else:
                self.overrides.pop(model, None)
        else:
            values = {
                name: getattr(self.startup, name) if value is None else value
                for name, value in parsed.items()
            }
            server = replace(self.server, **values)
            check(server)
            for override in self.overrides.values():
                check(replace(server, **override))
            self.server = server
        return self.view(model)

    def count_owner(self, model: str) -> str:
        """Whose ``count`` a trace of ``model`` uses up: the model's own, or the server's ("")."""
        return model if "count" in self.overrides.get(model, {}) else ""

    def take(self, model: str, wanted: int) -> int:
        """Use up to ``wanted`` of the traces left for ``model``; returns how many may be kept."""
        owner = self.count_owner(model)
        count = self.effective(owner or None).count
        if count < 0:
            return wanted
        kept = min(wanted, count)
        if owner:
            self.overrides[owner]["count"] = count - kept
        else:
            self.server = replace(self.server, count=count - kept)
        return kept

    def plan(self) -> TracePlan:
        """What the replicas' tracers follow: each overridden model's effective settings."""
        return TracePlan(self.server, {model: self.effective(model) for model in self.overrides})


@dataclass(frozen=True)
class TracePlan:
    """The settings a replica's tracer samples by: the server's, and each model's that has
    its own (:meth:`TraceSettingsTable.plan`)."""

    server: TraceSettings = field(default_factory=lambda: TraceSettings())
    models: dict[str, TraceSettings] = field(default_factory=dict)

    def settings(self, model: str) -> TraceSettings:
        return self.models.get(model, self.server)


SETTING_NAMES = tuple(_FIELDS)
__all__ = [
    "LEVELS",
    "OFF",
    "SETTING_NAMES",
    "TracePlan",
    "TraceSettings",
    "TraceSettingsTable",
    "check",
    "parse_changes",
]
