"""A Triton repository as Serve applications: one per model, plus the server application.

Each model gets an application with route prefix ``/v2/models/<name>`` whose ingress
deployment is named after the model, so YAML ``deployments:`` overrides work by model name:
its one deployment, which the proxy routes requests straight to, or (a model whose instance
groups need different resources) its router in front of a deployment per replica group
(``<model>.<group>[.gpu<i>]``, see :mod:`cluster.placement`). With a gRPC port, the
``rayton-grpc`` application (no HTTP route) serves Triton's gRPC protocol. The builder
functions named by ``import_path`` are the targets of ``serve_config.yaml``.
"""

from __future__ import annotations

import copy
import importlib
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from ray.serve import Application

from cluster.placement import (
    HEAD_NODE_ACTOR_OPTIONS,
    ModelPlacement,
    placement_for,
)
from cluster.resources import cluster_gpu_ids, node_resources
from deployments.apps.grpc_deployment import GRPC_APP_NAME, GRPC_DEPLOYMENT_NAME, TritonGrpcServer
from deployments.apps.metrics_deployment import (
    METRICS_APP_NAME,
    METRICS_DEPLOYMENT_NAME,
    TritonMetrics,
)
from deployments.apps.model_applications import SURGE_PERCENT, model_application
from deployments.apps.model_deployment import InstanceOptions
from deployments.apps.repository_access import CONTROLLER_APP_NAME, CONTROLLER_DEPLOYMENT_NAME
from deployments.apps.repository_controller import RepositoryController
from deployments.apps.server_args import (
    DEFAULT_BATCH_ADMISSION,
    DEFAULT_PYTHON_INSTANCES,
    BackendConfig,
    BackendDirectory,
    BatchAdmission,
    PythonInstances,
    ServerAppArgs,
)
from deployments.apps.server_deployment import SERVER_DEPLOYMENT_NAME, TritonServer
from deployments.grpc.server import GrpcSpec
from deployments.http.body_limit import DEFAULT_MAX_INPUT_SIZE
from deployments.metrics.options import MetricsAppArgs
from repo_adapter.backends.backend_files import DEFAULT_BACKEND_DIRECTORY, BackendSettings
from repo_adapter.errors import InferenceServerError
from repo_adapter.live_repository import LiveRepository
from repo_adapter.repository import RepositoryModel

logger = logging.getLogger(__name__)

SERVER_APP_NAME = CONTROLLER_APP_NAME  # the controller is a deployment of the server app
CONTROLLER_MAX_ONGOING_REQUESTS = 1024
MODEL_APP_IMPORT_PATH = "deployments.apps.builders:build_model_app"
SERVER_APP_IMPORT_PATH = "deployments.apps.builders:build_server_app"
GRPC_APP_IMPORT_PATH = "deployments.apps.builders:build_grpc_app"
METRICS_APP_IMPORT_PATH = "deployments.apps.builders:build_metrics_app"
DEFAULT_GRPC_PORT = 8001


class ModelAppArgs(BaseModel):
    """``args`` of a model application in ``serve_config.yaml``."""

    model_config = ConfigDict(extra="forbid", protected_namespaces=())
    model_repository: str
    model: str
    # Triton's --http-max-input-size: the largest inference request body this model takes
    http_max_input_size: int = Field(DEFAULT_MAX_INPUT_SIZE, gt=0)
    python_instances: PythonInstances = DEFAULT_PYTHON_INSTANCES
    batch_admission: BatchAdmission = DEFAULT_BATCH_ADMISSION
    backend_directory: BackendDirectory = DEFAULT_BACKEND_DIRECTORY
    backend_config: BackendConfig = None

    def backend_settings(self) -> BackendSettings:
        return BackendSettings.from_flags(self.backend_directory, self.backend_config)


class GrpcAppArgs(BaseModel):
    """``args`` of the gRPC application: where to listen."""

    model_config = ConfigDict(extra="forbid")
    grpc_host: str = "127.0.0.1"
    grpc_port: int = DEFAULT_GRPC_PORT


@dataclass
class AppPlan:
    """One Serve application to deploy.

    ``route_prefix`` None: no HTTP route (the gRPC application).
    """

    name: str
    route_prefix: str | None
    import_path: str
    args: dict[str, Any]
    # Each deployment's options, with its "name" (YAML ``deployments:`` entries)
    deployments: list[dict[str, Any]] = field(default_factory=list)

    def build(self) -> Application:
        """The application, from the builder ``import_path`` names (as ``serve run`` does)."""
        module, attribute = self.import_path.split(":")
        return getattr(importlib.import_module(module), attribute)(self.args)


def model_route_prefix(model: str) -> str:
    return f"/v2/models/{model}"


def scan_for_serving(
    repository: str | Path,
    models: list[str] | None = None,
    gpu_ids: list[int] | None = None,
    backends: BackendSettings | None = None,
) -> dict[str, RepositoryModel]:
    """Each model of the repository (or of ``models``) as a load would scan it, against the
    GPUs ``gpu_ids`` (None: those of the connected cluster)."""
    gpus = cluster_gpu_ids() if gpu_ids is None else gpu_ids
    live = LiveRepository(repository, gpus, backends=backends)
    names = [n for n in live.model_names() if models is None or n in models]
    return {name: live.plan_load(name).models[-1] for name in names}


def _front_deployment(name: str) -> dict[str, Any]:
    options = copy.deepcopy(HEAD_NODE_ACTOR_OPTIONS)
    return {"name": name, "num_replicas": 1, "ray_actor_options": options}


def model_deployments(placement: ModelPlacement) -> list[dict[str, Any]]:
    """A model application's deployments as YAML ``deployments:`` entries: its one
    deployment, or its router and then a deployment per replica group."""
    groups = [
        {"name": g.name, **g.deployment_options(), "max_surge_percent": SURGE_PERCENT}
        for g in placement.groups
    ]
    if not placement.routed:
        return groups
    router = {"name": placement.model, **placement.router_options()}
    return [router, *groups]


def front_applications(
    server_args: ServerAppArgs,
    grpc_port: int | None = None,
    grpc_host: str = "127.0.0.1",
    metrics: MetricsAppArgs | None = None,
) -> list[AppPlan]:
    """The server application, then the gRPC application when ``grpc_port`` is given and
    the metrics application when ``metrics`` is."""
    front = [
        AppPlan(
            name=SERVER_APP_NAME,
            route_prefix="/",
            import_path=SERVER_APP_IMPORT_PATH,
            args=server_args.model_dump(exclude_defaults=True),
            deployments=[_front_deployment(SERVER_DEPLOYMENT_NAME)],
        )
    ]
    if grpc_port is not None:
        # Host and port always written out (not left to defaults): readers look for them.
        front.append(
            AppPlan(
                name=GRPC_APP_NAME,
                route_prefix=None,
                import_path=GRPC_APP_IMPORT_PATH,
                args={"grpc_host": grpc_host, "grpc_port": grpc_port},
                # One replica per cluster for now; see deployments/apps/grpc_deployment.py.
                deployments=[_front_deployment(GRPC_DEPLOYMENT_NAME)],
            )
        )
    if metrics is not None:
        front.append(
            AppPlan(
                name=METRICS_APP_NAME,
                route_prefix=None,
                import_path=METRICS_APP_IMPORT_PATH,
                # Host and port always written out, as for gRPC.
                args=metrics.model_dump(exclude_defaults=True)
                | {"metrics_host": metrics.metrics_host, "metrics_port": metrics.metrics_port},
                deployments=[_front_deployment(METRICS_DEPLOYMENT_NAME)],
            )
        )
    return front


def plan_applications(
    repository: str | Path,
    models: list[str] | None = None,
    grpc_port: int | None = None,
    grpc_host: str = "127.0.0.1",
    metrics: MetricsAppArgs | None = None,
    http_max_input_size: int = DEFAULT_MAX_INPUT_SIZE,
    nodes: list[dict[str, float]] | None = None,
    python_instances: str = DEFAULT_PYTHON_INSTANCES,
    batch_admission: str = DEFAULT_BATCH_ADMISSION,
    backend_directory: str = DEFAULT_BACKEND_DIRECTORY,
    backend_config: list[str] | None = None,
) -> tuple[list[AppPlan], dict[str, RepositoryModel]]:
    """A Serve config's applications: the front ones, then one per available model.

    ``nodes``: the resources of the nodes it will run on (None: the connected cluster's, if
    any), for the models' placement and the GPUs their configs may name;
    ``python_instances``: where the python models' instances run (``--python-instances``);
    ``batch_admission``: how requests reach a model's batcher (``--batch-admission``).
    """
    if nodes is None:
        nodes = node_resources()
        gpu_ids = None
    else:
        gpu_ids = list(range(int(max((n.get("GPU", 0) for n in nodes), default=0))))
    backends = BackendSettings.from_flags(backend_directory, backend_config)
    scanned = scan_for_serving(repository, models, gpu_ids, backends)
    plans = []
    for name, model in scanned.items():
        if not model.available:
            continue
        try:
            placement = placement_for(model.config, nodes)
        except ValueError as err:  # a placement parameter Serve would refuse
            model.error = f"model '{name}': {err}"
            continue
        args: dict[str, Any] = {"model_repository": str(repository), "model": name}
        if http_max_input_size != DEFAULT_MAX_INPUT_SIZE:  # the default stays implicit
            args["http_max_input_size"] = http_max_input_size
        if python_instances != DEFAULT_PYTHON_INSTANCES:
            args["python_instances"] = python_instances
        if batch_admission != DEFAULT_BATCH_ADMISSION:
            args["batch_admission"] = batch_admission
        if backend_directory != DEFAULT_BACKEND_DIRECTORY:
            args["backend_directory"] = backend_directory
        if backend_config:
            args["backend_config"] = list(backend_config)
        plans.append(
            AppPlan(
                name=name,
                route_prefix=model_route_prefix(name),
                import_path=MODEL_APP_IMPORT_PATH,
                args=args,
                deployments=model_deployments(placement),
            )
        )
    server_args = ServerAppArgs(model_repository=str(repository), models=models)
    return front_applications(server_args, grpc_port, grpc_host, metrics) + plans, scanned


def build_model_app(args: ModelAppArgs) -> Application:
    """Serve application of one model (``import_path`` target)."""
    if isinstance(args, dict):
        args = ModelAppArgs.model_validate(args)
    repository = LiveRepository(
        args.model_repository, cluster_gpu_ids(), backends=args.backend_settings()
    )
    model = repository.plan_load(args.model).models[-1]
    if not model.available:
        raise InferenceServerError(f"model '{args.model}' is unavailable: {model.error}")
    return model_application(
        model,
        repository.fingerprint(args.model),
        args.http_max_input_size,
        instances=InstanceOptions.from_settings(args.python_instances, args.batch_admission),
    )


def build_server_app(args: ServerAppArgs) -> Application:
    """The server application (``import_path`` target): HTTP routes and the controller."""
    if isinstance(args, dict):
        args = ServerAppArgs.model_validate(args)
    controller = RepositoryController.options(
        name=CONTROLLER_DEPLOYMENT_NAME,
        # Requests waiting for a model loading on demand are calls in flight here; Serve's
        # default of 5 would queue every read behind them.
        max_ongoing_requests=CONTROLLER_MAX_ONGOING_REQUESTS,
        ray_actor_options=copy.deepcopy(HEAD_NODE_ACTOR_OPTIONS),
    ).bind(args)
    return TritonServer.options(
        name=SERVER_DEPLOYMENT_NAME,
        num_replicas=1,
        ray_actor_options=copy.deepcopy(HEAD_NODE_ACTOR_OPTIONS),
    ).bind(controller)


def build_metrics_app(args: MetricsAppArgs) -> Application:
    """The metrics application (``import_path`` target): Triton's ``/metrics`` endpoint."""
    if isinstance(args, dict):
        args = MetricsAppArgs.model_validate(args)
    return TritonMetrics.options(
        name=METRICS_DEPLOYMENT_NAME,
        num_replicas=1,
        ray_actor_options=copy.deepcopy(HEAD_NODE_ACTOR_OPTIONS),
    ).bind(args.model_dump())


def build_grpc_app(args: GrpcAppArgs) -> Application:
    """The gRPC application (``import_path`` target)."""
    if isinstance(args, dict):
        args = GrpcAppArgs.model_validate(args)
    spec = GrpcSpec(host=args.grpc_host, port=args.grpc_port)
    return TritonGrpcServer.options(
        name=GRPC_DEPLOYMENT_NAME,
        num_replicas=1,
        ray_actor_options=copy.deepcopy(HEAD_NODE_ACTOR_OPTIONS),
    ).bind(spec)
