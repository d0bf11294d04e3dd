"""The server application's arguments: ``args`` in ``serve_config.yaml`` and ``rayton serve``'s.

Its own module because both the application builders and the repository controller (which
runs on them) read it.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from deployments.http.body_limit import DEFAULT_MAX_INPUT_SIZE

DEFAULT_POLL_SECS = 15.0
# A model whose replicas are not all up by then is UNAVAILABLE (its application is removed).
DEFAULT_LOAD_TIMEOUT_S = 300.0


class ServerAppArgs(BaseModel):
    """``args`` of the server application in ``serve_config.yaml`` (and of ``rayton serve``).

    ``deploy_models`` False (a Serve config): the config's own model applications serve the
    models and the repository controller only watches them, so only ``model_control_mode:
    none`` applies. True (``rayton serve``): the controller deploys and changes them.
    """

    model_config = ConfigDict(extra="forbid", protected_namespaces=())
    model_repository: str
    models: list[str] | None = None  # a config's model selection; None: every model
    model_control_mode: Literal["none", "poll", "explicit"] = "none"
    load_models: list[str] | None = None  # explicit mode's start-up models ('*': all)
    repository_poll_secs: float = Field(DEFAULT_POLL_SECS, gt=0)
    model_load_timeout_secs: float = Field(DEFAULT_LOAD_TIMEOUT_S, gt=0)
    strict_readiness: bool = True
    deploy_models: bool = False
    # rayton serve: "shared" runs CPU models in one host application (one process for many
    # models, as Triton); "dedicated" gives each model an application and replicas of its own.
    cpu_models: Literal["shared", "dedicated"] = "shared"
    # Where a repository load may write the model files a client sends (Triton's file:
    # parameters: model code from the network); None refuses them.
    model_file_override_dir: str | None = None
    # Triton's --http-max-input-size: the largest inference request body a model takes
    http_max_input_size: int = Field(DEFAULT_MAX_INPUT_SIZE, gt=0)
    # Triton's --log-* start-up settings (the logging extension changes all but the file).
    log_file: str = ""
    log_info: bool = True
    log_warning: bool = True
    log_error: bool = True
    log_verbose_level: int = Field(0, ge=0)
    log_format: Literal["default", "ISO8601"] = "default"
    # Triton's --trace-config start-up settings (the trace extension changes all but the file).
    trace_file: str = ""
    trace_level: list[Literal["OFF", "TIMESTAMPS", "TENSORS"]] = Field(default_factory=list)
    trace_rate: int = Field(1000, gt=0, lt=2**32)
    trace_count: int = Field(-1, ge=-1)
    trace_log_frequency: int = Field(0, ge=0, lt=2**32)
    trace_mode: Literal["triton", "opentelemetry"] = "triton"
    trace_otel_url: str = "http://localhost:4318/v1/traces"  # OTLP/HTTP traces endpoint
    trace_otel_resource: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _config_owned_models_do_not_change(self) -> ServerAppArgs:
        if not self.deploy_models and self.model_control_mode != "none":
            raise ValueError(
                f"model_control_mode '{self.model_control_mode}' needs rayton to deploy the "
                "models itself ('rayton serve'); in a Serve config the config owns the model "
                "applications: change it and 'serve deploy' it again"
            )
        return self

    @model_validator(mode="after")
    def _traces_need_a_file(self) -> ServerAppArgs:
        tracing = [level for level in self.trace_level if level != "OFF"]
        if tracing and not self.trace_file and self.trace_mode == "triton":
            raise ValueError(
                "tracing needs a trace file: --trace-config triton,file=PATH (trace_file)"
            )
        if "OFF" in self.trace_level and tracing:
            raise ValueError("trace level OFF cannot be combined with other levels")
        return self


def parse_trace_config(values: list[str]) -> dict[str, Any]:
    """Triton's ``--trace-config`` values as :class:`ServerAppArgs` fields.

    ``rate=N``, ``count=N``, ``level=TIMESTAMPS|TENSORS|OFF`` (repeatable),
    ``mode=triton|opentelemetry``, ``triton,file=PATH``, ``triton,log-frequency=N``,
    ``opentelemetry,url=URL``, ``opentelemetry,resource=KEY=VALUE`` (repeatable).

    Raises:
        ValueError: a setting that is unknown, malformed, or not supported.
    """
    fields: dict[str, Any] = {}
    for value in values:
        mode, comma, setting = value.partition(",")
        if not comma or "=" in mode:  # no mode: a global setting (its value may hold commas)
            mode, setting = "", value
        name, equals, text = setting.partition("=")
        if not equals:
            raise ValueError(f"--trace-config expects [MODE,]SETTING=VALUE, got '{value}'")
        key = (mode, name)
        if key == ("", "level"):
            fields.setdefault("trace_level", []).append(text)
        elif key == ("", "mode"):
            if text not in ("triton", "opentelemetry"):
                raise ValueError(f"--trace-config: unknown trace mode '{text}'")
            fields["trace_mode"] = text
        elif key == ("opentelemetry", "url"):
            fields["trace_otel_url"] = text
        elif key == ("opentelemetry", "resource"):
            resource, equals, resource_value = text.partition("=")
            if not equals or not resource:
                raise ValueError(f"--trace-config: resource expects KEY=VALUE, got '{text}'")
            fields.setdefault("trace_otel_resource", {})[resource] = resource_value
        elif key in (("", "rate"), ("", "count"), ("triton", "log-frequency")):
            try:
                number = int(text)
            except ValueError:
                raise ValueError(
                    f"--trace-config: {name} must be an integer, got '{text}'"
                ) from None
            field = {"rate": "trace_rate", "count": "trace_count"}.get(name, "trace_log_frequency")
            fields[field] = number
        elif key == ("triton", "file"):
            fields["trace_file"] = text
        else:
            raise ValueError(f"--trace-config: unknown setting '{value}'")
    return fields
