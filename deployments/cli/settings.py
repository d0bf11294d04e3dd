"""Settings more than one command takes: where the server listens (``rayton build`` writes it
into the Serve config, ``rayton serve`` binds it) and which models to take."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from deployments.apps.builders import DEFAULT_GRPC_PORT
from deployments.command_flag import Flag
from deployments.metrics.options import MetricsAppArgs

ALL_MODELS = "*"
# How long a command waits for the running server (its controller or HTTP endpoint) to answer.
CONTROLLER_TIMEOUT_S = 60.0


class Endpoints(BaseModel):
    """HTTP, Triton's gRPC and Prometheus metrics endpoints, as Triton's flags set them."""

    model_config = ConfigDict(extra="forbid")
    http_host: Annotated[str, Flag()] = Field("127.0.0.1", description="HTTP bind address")
    http_port: Annotated[int, Flag()] = 8000
    grpc_port: Annotated[int, Flag()] = Field(
        DEFAULT_GRPC_PORT,
        description=f"Triton gRPC port (default {DEFAULT_GRPC_PORT}; 0 turns the gRPC endpoint "
        "off)",
    )
    grpc_host: Annotated[str | None, Flag()] = Field(
        None, description="gRPC bind address (default: the HTTP host)"
    )
    metrics_address: Annotated[str | None, Flag()] = Field(
        None, description="metrics bind address (default: the HTTP host)"
    )
    allow_metrics: Annotated[bool, Flag()] = Field(
        True, description="false turns off the metrics endpoint"
    )
    metrics: MetricsAppArgs = Field(default_factory=MetricsAppArgs)  # its fields' flags

    def metrics_app_args(self) -> MetricsAppArgs | None:
        """The metrics application's args (None with ``--allow-metrics false``)."""
        if not self.allow_metrics:
            return None
        return self.metrics.model_copy(
            update={"metrics_host": self.metrics_address or self.http_host}
        )

    def grpc_endpoint(self) -> dict[str, object]:
        """``plan_applications`` keywords for the gRPC endpoint (none with ``--grpc-port 0``)."""
        if not self.grpc_port:
            return {}
        return {"grpc_port": self.grpc_port, "grpc_host": self.grpc_host or self.http_host}


def selected_models(names: list[str] | None) -> list[str] | None:
    """The models ``--load-model`` names (None: every model, as when it names ``*``)."""
    if not names or ALL_MODELS in names:
        return None
    return names
