"""A Triton repository as Serve applications: one per model, plus the server application.

Each model gets an application with route prefix ``/v2/models/<name>`` whose single
deployment is named after the model, so the proxy routes its requests straight to its
replicas and YAML ``deployments:`` overrides work by model name. With a gRPC port, the
``rayton-grpc`` application (no HTTP route) serves Triton's gRPC protocol. The builder
functions named by ``import_path`` are the targets of ``serve_config.yaml``.
"""

from __future__ import annotations

import importlib
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict
from ray.serve import Application

from cluster.placement import placement_for
from cluster.resources import cluster_gpu_ids
from deployments.apps.ensemble_deployment import EnsembleSpec, TritonEnsemble
from deployments.apps.grpc_deployment import TritonGrpcServer
from deployments.apps.model_deployment import ModelSpec, TritonModel
from deployments.apps.server_deployment import TritonServer
from deployments.core.server_core import ServerSpec
from deployments.grpc.server import GrpcSpec
from repo_adapter.ensemble import member_names, validate_ensemble
from repo_adapter.errors import InferenceServerError, ModelConfigError
from repo_adapter.repository import RepositoryModel, scan_model, scan_repository

logger = logging.getLogger(__name__)

SERVER_APP_NAME = "rayton-server"
SERVER_DEPLOYMENT_NAME = "server"
GRPC_APP_NAME = "rayton-grpc"
MODEL_APP_IMPORT_PATH = "deployments.apps.builders:build_model_app"
SERVER_APP_IMPORT_PATH = "deployments.apps.builders:build_server_app"
GRPC_APP_IMPORT_PATH = "deployments.apps.builders:build_grpc_app"
GRPC_DEPLOYMENT_NAME = "grpc"
DEFAULT_GRPC_PORT = 8001


class ModelAppArgs(BaseModel):
    """``args`` of a model application in ``serve_config.yaml``."""

    model_config = ConfigDict(extra="forbid", protected_namespaces=())
    model_repository: str
    model: str


class ServerAppArgs(BaseModel):
    """``args`` of the server application in ``serve_config.yaml``."""

    model_config = ConfigDict(extra="forbid", protected_namespaces=())
    model_repository: str
    models: list[str] | None = None  # None: every model of the repository
    model_control_mode: str = "none"
    strict_readiness: bool = True


class GrpcAppArgs(ServerAppArgs):
    """``args`` of the gRPC application: the server application's, plus where to listen."""

    grpc_host: str = "127.0.0.1"
    grpc_port: int = DEFAULT_GRPC_PORT


@dataclass
class AppPlan:
    """One Serve application to deploy.

    ``route_prefix`` None: no HTTP route (the gRPC application). ``deployment`` names the
    application's deployment when it is not the application name.
    """

    name: str
    route_prefix: str | None
    import_path: str
    args: dict[str, Any]
    deployment_options: dict[str, Any] = field(default_factory=dict)
    deployment: str = ""

    @property
    def deployment_name(self) -> str:
        return self.deployment or self.name

    def build(self) -> Application:
        """The application, from the builder ``import_path`` names (as ``serve run`` does)."""
        module, attribute = self.import_path.split(":")
        return getattr(importlib.import_module(module), attribute)(self.args)


def model_route_prefix(model: str) -> str:
    return f"/v2/models/{model}"


def scan_for_serving(
    repository: str | Path, models: list[str] | None = None
) -> dict[str, RepositoryModel]:
    """Scan the repository and check ensembles against their members."""
    scanned = scan_repository(repository, cluster_gpu_ids(), models)
    configs = {name: m.config if m.available else None for name, m in scanned.items()}
    for model in scanned.values():
        if model.available and model.is_ensemble:
            try:
                missing = [m for m in member_names(model.config) if m not in scanned]
                if missing and models is not None:  # members may be outside the selection
                    extra = scan_repository(repository, cluster_gpu_ids(), missing)
                    configs |= {n: m.config if m.available else None for n, m in extra.items()}
                validate_ensemble(model.config, configs)
            except ModelConfigError as err:
                model.error = err.message
    return scanned


def plan_applications(
    repository: str | Path,
    models: list[str] | None = None,
    model_control_mode: str = "none",
    grpc_port: int | None = None,
    grpc_host: str = "127.0.0.1",
) -> tuple[list[AppPlan], dict[str, RepositoryModel]]:
    """Applications for the servable models of ``repository`` (all, or ``models``).

    The server application comes first, then the gRPC application when ``grpc_port`` is
    given, then one application per model.
    """
    scanned = scan_for_serving(repository, models)
    plans = []
    for name, model in scanned.items():
        if not model.available:
            continue
        placement = placement_for(model.config)
        plans.append(
            AppPlan(
                name=name,
                route_prefix=model_route_prefix(name),
                import_path=MODEL_APP_IMPORT_PATH,
                args={"model_repository": str(repository), "model": name},
                deployment_options=placement.deployment_options(),
            )
        )
    server_args = ServerAppArgs(
        model_repository=str(repository), models=models, model_control_mode=model_control_mode
    )
    front = [
        AppPlan(
            name=SERVER_APP_NAME,
            route_prefix="/",
            import_path=SERVER_APP_IMPORT_PATH,
            args=server_args.model_dump(exclude_defaults=True),
            deployment_options={"num_replicas": 1, "ray_actor_options": {"num_cpus": 0}},
            deployment=SERVER_DEPLOYMENT_NAME,
        )
    ]
    if grpc_port is not None:
        # Host and port always written out (not left to defaults): readers look for them.
        grpc_args = GrpcAppArgs(
            **server_args.model_dump(), grpc_host=grpc_host, grpc_port=grpc_port
        ).model_dump(exclude_defaults=True) | {"grpc_host": grpc_host, "grpc_port": grpc_port}
        front.append(
            AppPlan(
                name=GRPC_APP_NAME,
                route_prefix=None,
                import_path=GRPC_APP_IMPORT_PATH,
                args=grpc_args,
                # One replica per cluster for now; see deployments/apps/grpc_deployment.py.
                deployment_options={"num_replicas": 1, "ray_actor_options": {"num_cpus": 0}},
                deployment=GRPC_DEPLOYMENT_NAME,
            )
        )
    return front + plans, scanned


def build_model_app(args: ModelAppArgs) -> Application:
    """Serve application of one model (``import_path`` target)."""
    if isinstance(args, dict):
        args = ModelAppArgs.model_validate(args)
    repository = Path(args.model_repository)
    model = scan_model(repository / args.model, cluster_gpu_ids())
    if model.available and model.is_ensemble:
        scanned = scan_for_serving(repository, [args.model])
        model = scanned[args.model]
    if not model.available:
        raise InferenceServerError(f"model '{args.model}' is unavailable: {model.error}")
    placement = placement_for(model.config)
    options = placement.deployment_options()
    if model.is_ensemble:
        spec = EnsembleSpec(
            args.model, model.config.SerializeToString(), model.versions, model.labels
        )
        return TritonEnsemble.options(name=args.model, **options).bind(spec)
    spec = ModelSpec.from_repository_model(model, placement.instance_kind, placement.group_name)
    return TritonModel.options(name=args.model, **options).bind(spec)


def server_spec(args: ServerAppArgs) -> ServerSpec:
    """The repository as the server-wide endpoints (HTTP and gRPC) see it."""
    scanned = scan_for_serving(args.model_repository, args.models)
    return ServerSpec(
        repository=args.model_repository,
        deployed=[name for name, m in scanned.items() if m.available],
        unavailable={name: m.error for name, m in scanned.items() if not m.available},
        model_control_mode=args.model_control_mode,
        strict_readiness=args.strict_readiness,
    )


def build_server_app(args: ServerAppArgs) -> Application:
    """The server application (``import_path`` target)."""
    if isinstance(args, dict):
        args = ServerAppArgs.model_validate(args)
    spec = server_spec(args)
    return TritonServer.options(
        name=SERVER_DEPLOYMENT_NAME, num_replicas=1, ray_actor_options={"num_cpus": 0}
    ).bind(spec)


def build_grpc_app(args: GrpcAppArgs) -> Application:
    """The gRPC application (``import_path`` target)."""
    if isinstance(args, dict):
        args = GrpcAppArgs.model_validate(args)
    spec = GrpcSpec(server_spec(args), host=args.grpc_host, port=args.grpc_port)
    return TritonGrpcServer.options(
        name=GRPC_DEPLOYMENT_NAME, num_replicas=1, ray_actor_options={"num_cpus": 0}
    ).bind(spec)
