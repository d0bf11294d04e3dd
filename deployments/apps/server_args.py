"""The server application's arguments: ``args`` in ``serve_config.yaml`` and ``rayton serve``'s.

Its own module because both the application builders and the repository controller (which
runs on them) read it.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

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
    # Triton's --log-* start-up settings (the logging extension changes all but the file).
    log_file: str = ""
    log_info: bool = True
    log_warning: bool = True
    log_error: bool = True
    log_verbose_level: int = Field(0, ge=0)
    log_format: Literal["default", "ISO8601"] = "default"

    @model_validator(mode="after")
    def _config_owned_models_do_not_change(self) -> ServerAppArgs:
        if not self.deploy_models and self.model_control_mode != "none":
            raise ValueError(
                f"model_control_mode '{self.model_control_mode}' needs rayton to deploy the "
                "models itself ('rayton serve'); in a Serve config the config owns the model "
                "applications: change it and 'serve deploy' it again"
            )
        return self
