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

from pydantic import BaseModel, ConfigDict, Field
from ray.serve import Application

from cluster.placement import GRACEFUL_SHUTDOWN_TIMEOUT_S, placement_for
from cluster.resources import cluster_gpu_ids
from deployments.apps.ensemble_deployment import EnsembleSpec, TritonEnsemble
from deployments.apps.grpc_deployment import GRPC_APP_NAME, GRPC_DEPLOYMENT_NAME, TritonGrpcServer
from deployments.apps.host_deployment import HOST_DEPLOYMENT_NAME, TritonModelHost, hosted_entry
from deployments.apps.metrics_deployment import (
    METRICS_APP_NAME,
    METRICS_DEPLOYMENT_NAME,
    TritonMetrics,
)
from deployments.apps.model_deployment import ModelSpec, TritonModel
from deployments.apps.repository_access import CONTROLLER_APP_NAME, CONTROLLER_DEPLOYMENT_NAME
from deployments.apps.repository_controller import RepositoryController
from deployments.apps.server_args import ServerAppArgs
from deployments.apps.server_deployment import SERVER_DEPLOYMENT_NAME, TritonServer
from deployments.core.server_core import SERVER_VERSION
from deployments.grpc.server import GrpcSpec
from deployments.http.body_limit import DEFAULT_MAX_INPUT_SIZE
from deployments.metrics.options import MetricsAppArgs
from repo_adapter.errors import InferenceServerError
from repo_adapter.live_repository import LiveRepository
from repo_adapter.repository import RepositoryModel

logger = logging.getLogger(__name__)

SERVER_APP_NAME = CONTROLLER_APP_NAME  # the controller is a deployment of the server app
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


class GrpcAppArgs(BaseModel):
    """``args`` of the gRPC application: where to listen."""

    model_config = ConfigDict(extra="forbid")
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
    """Each model of the repository (or of ``models``) as a load would scan it."""
    live = LiveRepository(repository, cluster_gpu_ids())
    names = [n for n in live.model_names() if models is None or n in models]
    return {name: live.plan_load(name).models[-1] for name in names}


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
            deployment_options={"num_replicas": 1, "ray_actor_options": {"num_cpus": 0}},
            deployment=SERVER_DEPLOYMENT_NAME,
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
                deployment_options={"num_replicas": 1, "ray_actor_options": {"num_cpus": 0}},
                deployment=GRPC_DEPLOYMENT_NAME,
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
                deployment_options={"num_replicas": 1, "ray_actor_options": {"num_cpus": 0}},
                deployment=METRICS_DEPLOYMENT_NAME,
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
) -> tuple[list[AppPlan], dict[str, RepositoryModel]]:
    """A Serve config's applications: the front ones, then one per available model."""
    scanned = scan_for_serving(repository, models)
    plans = []
    for name, model in scanned.items():
        if not model.available:
            continue
        placement = placement_for(model.config)
        args: dict[str, Any] = {"model_repository": str(repository), "model": name}
        if http_max_input_size != DEFAULT_MAX_INPUT_SIZE:  # the default stays implicit
            args["http_max_input_size"] = http_max_input_size
        plans.append(
            AppPlan(
                name=name,
                route_prefix=model_route_prefix(name),
                import_path=MODEL_APP_IMPORT_PATH,
                args=args,
                deployment_options=placement.deployment_options()
                | {"max_surge_percent": SURGE_PERCENT},
            )
        )
    server_args = ServerAppArgs(model_repository=str(repository), models=models)
    return front_applications(server_args, grpc_port, grpc_host, metrics) + plans, scanned


# Serve restarts replicas when a deployment's code version changes and reconfigures them in
# place when only ``user_config`` does. Imperative deploys get a random code version unless one
# is set, and the public option for it was removed; a model's replicas take everything that
# varies from ``user_config``, so a fixed version per rayton release makes a reload an in-place
# reconfigure and a count change a rescale (see deployments/core/model_slot.py).
MODEL_CODE_VERSION = f"rayton-model-{SERVER_VERSION}"
# A restart that does happen (new resources) starts the new replicas before the old stop.
SURGE_PERCENT = 100
# Requests one host replica holds at once, over all its models (each model's batcher has its
# own queue behind it).
HOST_MAX_ONGOING_REQUESTS = 1024


def model_application(
    model: RepositoryModel, generation: str = "", max_input_size: int = DEFAULT_MAX_INPUT_SIZE
) -> Application:
    """The Serve application of one scanned, available model (single model or ensemble)."""
    placement = placement_for(model.config)
    options = placement.deployment_options() | {"max_surge_percent": SURGE_PERCENT}
    spec = _spec(model, generation)
    deployment_class = TritonEnsemble if model.is_ensemble else TritonModel
    deployment = deployment_class.options(
        name=model.name, user_config=spec.to_user_config(), **options
    )
    if hasattr(deployment, "_version"):  # private: see MODEL_CODE_VERSION
        deployment._version = MODEL_CODE_VERSION
    return deployment.bind(model.name, max_input_size)


def _spec(model: RepositoryModel, generation: str) -> ModelSpec | EnsembleSpec:
    if model.is_ensemble:
        return EnsembleSpec(
            model.name, model.config.SerializeToString(), model.versions, model.labels, generation
        )
    placement = placement_for(model.config)
    return ModelSpec.from_repository_model(
        model, placement.instance_kind, placement.group_name, generation
    )


def hosted_model_entry(model: RepositoryModel, generation: str) -> dict[str, Any]:
    """One model of the shared host's ``user_config``."""
    return hosted_entry(_spec(model, generation))


def host_application(
    hosted: dict[str, dict[str, Any]], max_input_size: int = DEFAULT_MAX_INPUT_SIZE
) -> Application:
    """The shared host serving ``hosted`` (``hosted_model_entry`` by model name)."""
    deployment = TritonModelHost.options(
        name=HOST_DEPLOYMENT_NAME,
        user_config={"models": hosted},
        num_replicas=1,
        max_ongoing_requests=HOST_MAX_ONGOING_REQUESTS,
        graceful_shutdown_timeout_s=GRACEFUL_SHUTDOWN_TIMEOUT_S,
        max_surge_percent=SURGE_PERCENT,
        ray_actor_options={"num_cpus": 0},
    )
    if hasattr(deployment, "_version"):  # private: see MODEL_CODE_VERSION
        deployment._version = MODEL_CODE_VERSION
    return deployment.bind(max_input_size)


def build_model_app(args: ModelAppArgs) -> Application:
    """Serve application of one model (``import_path`` target)."""
    if isinstance(args, dict):
        args = ModelAppArgs.model_validate(args)
    repository = LiveRepository(args.model_repository, cluster_gpu_ids())
    model = repository.plan_load(args.model).models[-1]
    if not model.available:
        raise InferenceServerError(f"model '{args.model}' is unavailable: {model.error}")
    return model_application(model, repository.fingerprint(args.model), args.http_max_input_size)


def build_server_app(args: ServerAppArgs) -> Application:
    """The server application (``import_path`` target): HTTP routes and the controller."""
    if isinstance(args, dict):
        args = ServerAppArgs.model_validate(args)
    controller = RepositoryController.options(name=CONTROLLER_DEPLOYMENT_NAME).bind(args)
    return TritonServer.options(
        name=SERVER_DEPLOYMENT_NAME, num_replicas=1, ray_actor_options={"num_cpus": 0}
    ).bind(controller)


def build_metrics_app(args: MetricsAppArgs) -> Application:
    """The metrics application (``import_path`` target): Triton's ``/metrics`` endpoint."""
    if isinstance(args, dict):
        args = MetricsAppArgs.model_validate(args)
    return TritonMetrics.options(
        name=METRICS_DEPLOYMENT_NAME, num_replicas=1, ray_actor_options={"num_cpus": 0}
    ).bind(args.model_dump())


def build_grpc_app(args: GrpcAppArgs) -> Application:
    """The gRPC application (``import_path`` target)."""
    if isinstance(args, dict):
        args = GrpcAppArgs.model_validate(args)
    spec = GrpcSpec(host=args.grpc_host, port=args.grpc_port)
    return TritonGrpcServer.options(
        name=GRPC_DEPLOYMENT_NAME, num_replicas=1, ray_actor_options={"num_cpus": 0}
    ).bind(spec)
