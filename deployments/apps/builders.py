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
    GRACEFUL_SHUTDOWN_TIMEOUT_S,
    HEAD_NODE_ACTOR_OPTIONS,
    ModelPlacement,
    ReplicaGroup,
    placement_for,
)
from cluster.resources import cluster_gpu_ids, node_resources
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
from deployments.apps.router_deployment import RouterSpec, TritonModelRouter
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
    repository: str | Path, models: list[str] | None = None, gpu_ids: list[int] | None = None
) -> dict[str, RepositoryModel]:
    """Each model of the repository (or of ``models``) as a load would scan it, against the
    GPUs ``gpu_ids`` (None: those of the connected cluster)."""
    live = LiveRepository(repository, cluster_gpu_ids() if gpu_ids is None else gpu_ids)
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
) -> tuple[list[AppPlan], dict[str, RepositoryModel]]:
    """A Serve config's applications: the front ones, then one per available model.

    ``nodes``: the resources of the nodes it will run on (None: the connected cluster's, if
    any), for the models' placement and the GPUs their configs may name.
    """
    if nodes is None:
        nodes = node_resources()
        gpu_ids = None
    else:
        gpu_ids = list(range(int(max((n.get("GPU", 0) for n in nodes), default=0))))
    scanned = scan_for_serving(repository, models, gpu_ids)
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
    model: RepositoryModel,
    generation: str = "",
    max_input_size: int = DEFAULT_MAX_INPUT_SIZE,
    nodes: list[dict[str, float]] | None = None,
) -> Application:
    """The Serve application of one scanned, available model (single model or ensemble) on a
    cluster of ``nodes`` (:func:`cluster.resources.node_resources`; None: ask Ray)."""
    try:
        placement = placement_for(model.config, node_resources() if nodes is None else nodes)
    except ValueError as err:
        raise InferenceServerError(f"model '{model.name}': {err}") from None
    if model.is_ensemble:
        spec = _spec(model, generation)
        return _versioned(
            TritonEnsemble.options(
                name=model.name, user_config=spec.to_user_config(), **_options(placement.only)
            )
        ).bind(model.name, max_input_size)
    groups = {
        group.name: _versioned(
            TritonModel.options(
                name=group.name,
                user_config=_model_spec(model, group, generation).to_user_config(),
                **_options(group),
            )
        ).bind(model.name, max_input_size)
        for group in placement.groups
    }
    if not placement.routed:
        return groups[model.name]
    assert model.config is not None
    router_spec = RouterSpec(
        model.name,
        model.config.SerializeToString(),
        list(model.versions),
        {g.name: g.num_replicas for g in placement.groups},
        generation,
    )
    router = TritonModelRouter.options(
        name=model.name, user_config=router_spec.to_user_config(), **placement.router_options()
    )
    # The groups are bound as arguments so Serve deploys them in this application.
    return _versioned(router).bind(model.name, max_input_size, *groups.values())


def _options(group: ReplicaGroup) -> dict[str, Any]:
    return group.deployment_options() | {"max_surge_percent": SURGE_PERCENT}


def _versioned(deployment: Any) -> Any:
    if hasattr(deployment, "_version"):  # private: see MODEL_CODE_VERSION
        deployment._version = MODEL_CODE_VERSION
    return deployment


def _model_spec(model: RepositoryModel, group: ReplicaGroup, generation: str) -> ModelSpec:
    return ModelSpec.from_repository_model(
        model,
        group.instance_kind,
        group.group_name,
        generation,
        pinned_gpu=group.pinned_gpu,
        gpu_memory_fraction=group.gpu_memory_fraction,
    )


def _spec(model: RepositoryModel, generation: str) -> ModelSpec | EnsembleSpec:
    if model.is_ensemble:
        return EnsembleSpec(
            model.name, model.config.SerializeToString(), model.versions, model.labels, generation
        )
    # Hosted models run on CPU in the host's process: their first group names the instances.
    return _model_spec(model, placement_for(model.config).groups[0], generation)


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
    return _versioned(deployment).bind(max_input_size)


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
    controller = RepositoryController.options(
        name=CONTROLLER_DEPLOYMENT_NAME, ray_actor_options=copy.deepcopy(HEAD_NODE_ACTOR_OPTIONS)
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
