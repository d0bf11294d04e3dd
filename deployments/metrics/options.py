"""The metrics endpoint's settings: Triton's ``--allow-*-metrics``, ``--metrics-*`` flags."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator

DEFAULT_METRICS_PORT = 8002
DEFAULT_INTERVAL_MS = 2000  # Triton's --metrics-interval-ms
# Triton's --metrics-config keys rayton implements; others are refused, never ignored.
_BOOLEAN_KEYS = ("counter_latencies",)


class MetricsAppArgs(BaseModel):
    """``args`` of the metrics application in ``serve_config.yaml`` (``rayton serve``'s flags).

    ``metrics_config`` holds Triton's ``--metrics-config`` settings as ``key=value`` strings.
    """

    model_config = ConfigDict(extra="forbid")
    metrics_host: str = "127.0.0.1"
    metrics_port: int = Field(DEFAULT_METRICS_PORT, ge=0, le=65535)
    allow_gpu_metrics: bool = True
    allow_cpu_metrics: bool = True
    metrics_interval_ms: int = Field(DEFAULT_INTERVAL_MS, gt=0)
    metrics_config: list[str] = Field(default_factory=list)

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
                value = parsed
        return value


def parse_setting(setting: str) -> tuple[str, bool]:
    """``key=value`` of ``--metrics-config`` as (key, value); ValueError says what is wrong."""
    key, sep, value = setting.partition("=")
    if not sep or not key:
        raise ValueError(f"--metrics-config expects <setting>=<value>, got '{setting}'")
    if key not in _BOOLEAN_KEYS:
        raise ValueError(
            f"unknown --metrics-config setting '{key}' (supported: {', '.join(_BOOLEAN_KEYS)})"
        )
    if value.lower() not in ("true", "false", "1", "0"):
        raise ValueError(f"--metrics-config {key} must be true or false, got '{value}'")
    return key, value.lower() in ("true", "1")
