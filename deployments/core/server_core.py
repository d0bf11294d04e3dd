"""Server-wide protocol logic, transport-neutral: what the HTTP server routes and gRPC share.

Server metadata, health and readiness, the repository index, load/unload refusals,
statistics of every model, and Triton's errors for models without a deployment. Models are
reached through :class:`ModelCalls` (Serve deployment handles in a cluster:
:class:`deployments.apps.handles.ModelHandles`), so this module is Ray-free.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any, Protocol

from deployments.core.statistics import merge_entries
from repo_adapter.errors import InferenceServerError, StatusCode
from repo_adapter.request_validation import model_not_found

logger = logging.getLogger(__name__)

SERVER_NAME = "rayton"
try:
    SERVER_VERSION = metadata.version("rayton")
except metadata.PackageNotFoundError:  # a source tree that was never installed
    SERVER_VERSION = "0+unknown"
# Extensions this server really implements (perf_analyzer reads "statistics").
EXTENSIONS = [
    "classification",
    "model_repository",
    "schedule_policy",
    "model_configuration",
    "binary_tensor_data",
    "parameters",
    "statistics",
]
_HANDLE_TIMEOUT_S = 5.0


class ModelCalls(Protocol):
    """How the server reaches a model's methods (those of ``ServedModel`` and statistics)."""

    async def call(
        self, model: str, method: str, *args: Any, timeout_s: float | None = None
    ) -> Any: ...


@dataclass
class ServerSpec:
    """The repository as scanned at build time."""

    repository: str
    deployed: list[str]  # model names with an application of their own
    unavailable: dict[str, str] = field(default_factory=dict)  # model -> scan error
    model_control_mode: str = "none"
    strict_readiness: bool = True


class ServerCore:
    """Server-wide protocol logic, transport-neutral: what both frontends answer.

    Errors are :class:`InferenceServerError` with Triton's codes.
    """

    def __init__(self, spec: ServerSpec, models: ModelCalls) -> None:
        self.spec = spec
        self.models = models

    async def call(self, model: str, method: str, *args: Any) -> Any:
        """``method`` of a deployed model (metadata, state, ...), with a timeout."""
        return await self.models.call(model, method, *args, timeout_s=_HANDLE_TIMEOUT_S)

    async def infer_wire(self, model: str, message: bytes, stream: bool = False) -> bytes:
        """A serialized ``ModelInferRequest`` run by ``model``; its serialized response."""
        return await self.models.call(model, "infer_grpc", message, stream)

    def is_deployed(self, model: str) -> bool:
        return model in self.spec.deployed

    def server_metadata(self) -> dict[str, Any]:
        return {"name": SERVER_NAME, "version": SERVER_VERSION, "extensions": EXTENSIONS}

    async def server_ready(self) -> bool:
        if self.spec.strict_readiness and self.spec.unavailable:
            return False
        try:
            states = await asyncio.gather(*(self.call(m, "is_ready") for m in self.spec.deployed))
        except Exception:  # a model app still deploying or failed: not ready
            return False
        return all(states)

    async def all_statistics(self) -> list[dict[str, Any]]:
        entries: list[dict[str, Any]] = []
        for model in self.spec.deployed:
            try:
                entries.extend(await self.call(model, "statistics"))
            except InferenceServerError:
                continue  # no ready version: Triton lists only ready versions
            except Exception:
                logger.warning("no statistics from model '%s'", model)
        return merge_entries(entries)

    async def repository_index(self, ready_only: bool = False) -> list[dict[str, Any]]:
        index: list[dict[str, Any]] = []
        for model in sorted({*self.spec.deployed, *self.spec.unavailable}):
            if model in self.spec.unavailable:
                if not ready_only:
                    index.append(
                        {
                            "name": model,
                            "state": "UNAVAILABLE",
                            "reason": self.spec.unavailable[model],
                        }
                    )
                continue
            try:
                states = await self.call(model, "state")
            except Exception as err:
                states = {"": {"state": "UNAVAILABLE", "reason": f"not deployed: {err}"}}
            for version, state in sorted(states.items()):
                if ready_only and state["state"] != "READY":
                    continue
                entry = {"name": model, "version": version} if version else {"name": model}
                entry["state"] = state["state"]
                if state["reason"]:  # Triton omits an empty reason
                    entry["reason"] = state["reason"]
                index.append(entry)
        return index

    def model_control_error(self) -> InferenceServerError:
        """Why a repository load / unload request is refused."""
        if self.spec.model_control_mode != "explicit":
            return InferenceServerError(
                "explicit model load / unload is not allowed if polling is enabled",
                StatusCode.UNAVAILABLE,
            )
        return InferenceServerError(
            "model load / unload through the repository API is not supported yet; "
            "redeploy with 'serve deploy' or 'rayton serve --load-model'",
            StatusCode.UNSUPPORTED,
        )

    def undeployed_model_error(
        self, model: str, version: str = "", action: str = ""
    ) -> InferenceServerError:
        """Triton's error for a request about a model without an application.

        ``action`` is the request kind (``"stats"``, ``"ready"``, ``"infer"``, ``""`` for
        metadata, ...). Readiness of a model that failed to load is not an error (the caller
        answers "not ready"); it gets the UNAVAILABLE error here like every other request.
        """
        if action == "stats":  # core: no ready version is INVALID_ARG here, not NOT_FOUND
            return InferenceServerError(f"requested model '{model}' is not available")
        if model in self.spec.unavailable:
            return InferenceServerError(
                f"Request for unknown model: '{model}' is not ready: "
                f"{self.spec.unavailable[model]}",
                StatusCode.UNAVAILABLE,
            )
        return model_not_found(model, version)
