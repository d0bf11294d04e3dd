"""The server application (route ``/``): server metadata, health, repository index, stats.

Everything under ``/v2/models/<name>`` for a deployed model goes straight to that model's
application; this one answers the server-wide routes and every model path the proxy could
not route (unknown models, models that failed to scan), with Triton's errors.

The protocol logic itself lives in :class:`ServerCore`, which the gRPC frontend
(:mod:`deployments.grpc`) shares, so both protocols give the same answers.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass, field
from typing import Any

from ray import serve
from starlette.requests import Request
from starlette.responses import Response

from deployments.http.model_routes import (
    METHOD_NOT_ALLOWED,
    NOT_FOUND,
    empty_response,
    error_response,
    json_response,
)
from deployments.statistics import merge_entries
from repo_adapter.errors import InferenceServerError, StatusCode
from repo_adapter.request_validation import model_not_found

logger = logging.getLogger(__name__)

SERVER_NAME = "rayton"
SERVER_VERSION = "0.1.0"
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

    Model calls go through each model's deployment handle (deployment name = application
    name = model name); errors are :class:`InferenceServerError` with Triton's codes.
    """

    def __init__(self, spec: ServerSpec) -> None:
        self.spec = spec
        self._methods: dict[tuple[str, str], Any] = {}

    def method(self, model: str, method: str):
        """A handle to one method of a deployed model's deployment (cached: hot path).

        Deployment name = application name = model name.
        """
        key = (model, method)
        if key not in self._methods:
            handle = serve.get_deployment_handle(model, app_name=model)
            self._methods[key] = getattr(handle, method)
        return self._methods[key]

    async def call(self, model: str, method: str, *args):
        """``method`` of a deployed model's deployment (metadata, state, ...), with a timeout."""
        return await asyncio.wait_for(self.method(model, method).remote(*args), _HANDLE_TIMEOUT_S)

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


@serve.deployment
class TritonServer(ServerCore):
    """Answers the server-wide part of Triton's HTTP protocol."""

    async def __call__(self, request: Request) -> Response:
        path = request.url.path.rstrip("/") or "/"
        method = request.method
        try:
            if path == "/v2":
                return self._get_only(method) or json_response(self.server_metadata())
            if path == "/v2/health/live":
                return self._get_only(method) or empty_response(200)
            if path == "/v2/health/ready":
                ready = await self.server_ready()
                return self._get_only(method) or empty_response(200 if ready else 400)
            if path == "/v2/models/stats":
                return self._get_only(method) or json_response(
                    {"model_stats": await self.all_statistics()}
                )
            if path.startswith("/v2/repository/"):
                return await self._repository(path, method, request)
            if path.startswith("/v2/models/"):
                return self._unrouted_model(path)
        except InferenceServerError as err:
            return error_response(err)
        return json_response(NOT_FOUND, 404)

    @staticmethod
    def _get_only(method: str) -> Response | None:
        return None if method == "GET" else json_response(METHOD_NOT_ALLOWED, 405)

    async def _repository(self, path: str, method: str, request: Request) -> Response:
        if method != "POST":
            return json_response(METHOD_NOT_ALLOWED, 405)
        if path == "/v2/repository/index" or (path.endswith("/index") and path.count("/") == 4):
            body = await request.body()
            ready_only = False
            if body:
                try:
                    ready_only = bool(json.loads(body).get("ready", False))
                except (ValueError, AttributeError):
                    raise InferenceServerError("failed to parse the request JSON buffer") from None
            return json_response(await self.repository_index(ready_only))
        parts = path.split("/")
        if len(parts) == 6 and parts[3] == "models" and parts[5] in ("load", "unload"):
            raise self.model_control_error()
        return json_response(NOT_FOUND, 404)

    def _unrouted_model(self, path: str) -> Response:
        parts = [p for p in path.split("/") if p]
        model = parts[2] if len(parts) > 2 else ""
        version = parts[4] if len(parts) > 4 and parts[3] == "versions" else ""
        action = parts[-1] if len(parts) in (4, 6) else ""
        if action == "ready" and model in self.spec.unavailable:
            return json_response({"error": "Model version not ready"}, 400)
        return error_response(self.undeployed_model_error(model, version, action))
