"""The metrics endpoint's settings: Triton's ``--allow-*-metrics``, ``--metrics-*`` flags."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, field_validator

from deployments.command_flag import Flag

DEFAULT_METRICS_PORT = 8002
DEFAULT_INTERVAL_MS = 2000  # Triton's --metrics-interval-ms
# Triton's --metrics-config keys rayton implements; others are refused, never ignored.
_BOOLEAN_KEYS = ("counter_latencies", "summary_latencies")
_QUANTILES_KEY = "summary_quantiles"
DEFAULT_QUANTILES = (0.5, 0.9, 0.95, 0.99, 0.999)  # Triton's default summary quantiles


class MetricsAppArgs(BaseModel):
    """``args`` of the metrics application in ``serve_config.yaml``; the fields marked
    :class:`Flag` are ``rayton serve``'s and ``rayton build``'s metrics flags as well.

    ``metrics_config`` holds Triton's ``--metrics-config`` settings as ``key=value`` strings.
    """

    model_config = ConfigDict(extra="forbid")
    metrics_host: str = "127.0.0.1"  # on the command line: --metrics-address
    metrics_port: Annotated[int, Flag()] = Field(
        DEFAULT_METRICS_PORT,
        ge=0,
        le=65535,
        description=f"Prometheus /metrics port (default {DEFAULT_METRICS_PORT})",
    )
    allow_gpu_metrics: Annotated[bool, Flag()] = Field(
        True, description="false turns off the GPU metrics"
    )
    allow_cpu_metrics: Annotated[bool, Flag()] = Field(
        True, description="false turns off the CPU metrics"
    )
    metrics_interval_ms: Annotated[int, Flag()] = Field(
        DEFAULT_INTERVAL_MS,
        gt=0,
        description=f"how often CPU and GPU gauges are sampled (default {DEFAULT_INTERVAL_MS})",
    )
    metrics_config: Annotated[list[str], Flag(metavar="SETTING=VALUE")] = Field(
        default_factory=list,
        description="Triton's metrics settings (counter_latencies=false; repeatable)",
    )

    @field_validator("metrics_config")
    @classmethod
    def _known_settings(cls, settings: list[str]) -> list[str]:
        for setting in settings:
            parse_setting(setting)
        return settings

    def setting(self, key: str, default: bool) -> bool:
        """A boolean ``--metrics-config`` key (the last occurrence wins, as in Triton)."""
        value = default
        for setting in self.metrics_config:
            found, parsed = parse_setting(setting)
            if found == key:
                value = bool(parsed)
        return value

    def quantiles(self) -> tuple[float, ...]:
        """``summary_quantiles`` (Triton's ``q:error`` pairs; the error is not used: rayton's
        quantiles are within ~2% of their value), or Triton's defaults."""
        value: tuple[float, ...] = DEFAULT_QUANTILES
        for setting in self.metrics_config:
            found, parsed = parse_setting(setting)
            if found == _QUANTILES_KEY:
                value = parsed
        return value


def parse_setting(setting: str) -> tuple[str, bool | tuple[float, ...]]:
    """``key=value`` of ``--metrics-config``; ValueError says what is wrong."""
    key, sep, value = setting.partition("=")
    if not sep or not key:
        raise ValueError(f"--metrics-config expects <setting>=<value>, got '{setting}'")
    if key == _QUANTILES_KEY:
        return key, _quantiles(value)
    if key not in _BOOLEAN_KEYS:
        supported = ", ".join((*_BOOLEAN_KEYS, _QUANTILES_KEY))
        raise ValueError(f"unknown --metrics-config setting '{key}' (supported: {supported})")
    if value.lower() not in ("true", "false", "1", "0"):
        raise ValueError(f"--metrics-config {key} must be true or false, got '{value}'")
    return key, value.lower() in ("true", "1")


def _quantiles(value: str) -> tuple[float, ...]:
    quantiles = []
    for pair in value.split(","):
        quantile, _, _error = pair.partition(":")
        try:
            number = float(quantile)
        except ValueError:
            number = -1.0
        if not 0.0 <= number <= 1.0:
            raise ValueError(
                f"--metrics-config summary_quantiles expects <quantile>:<error> pairs with "
                f"quantiles in [0, 1], got '{pair}'"
            )
        quantiles.append(number)
    return tuple(quantiles)
