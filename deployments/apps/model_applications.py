"""The Serve applications the repository controller deploys for a model: its own application
(one deployment, or a router in front of a deployment per replica group), or its entry in the
shared host's application.

Used by the controller (``rayton serve``) and by :mod:`deployments.apps.builders` (the
``import_path`` targets of a Serve config), so both deploy a model the same way.
"""

from __future__ import annotations

from typing import Any

from ray.serve import Application

from cluster.memory_budget import pin_to_node
from cluster.placement import (
    GRACEFUL_SHUTDOWN_TIMEOUT_S,
    ModelPlacement,
    ReplicaGroup,
    placement_for,
)
from cluster.recycling import ONE_AT_A_TIME_SURGE_PERCENT
from cluster.resources import node_resources
from cluster.serve_internals import set_code_version
from deployments.apps.ensemble_deployment import EnsembleSpec, TritonEnsemble
from deployments.apps.host_deployment import HOST_DEPLOYMENT_NAME, TritonModelHost, hosted_entry
from deployments.apps.model_deployment import (
    DEFAULT_INSTANCES,
    InstanceOptions,
    ModelSpec,
    TritonModel,
)
from deployments.apps.router_deployment import RouterSpec, TritonModelRouter
from deployments.apps.sequence_directory import routes_sequences, sequence_deployment_options
from deployments.core.server_core import SERVER_VERSION
from deployments.http.body_limit import DEFAULT_MAX_INPUT_SIZE
from repo_adapter.errors import InferenceServerError
from repo_adapter.repository import RepositoryModel
from repo_adapter.version_traffic import TrafficPolicy

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
    instances: InstanceOptions = DEFAULT_INSTANCES,
    traffic: TrafficPolicy | None = None,
    recycle_round: int = 0,
    measure_footprint: bool = False,
    placement: ModelPlacement | None = None,
) -> Application:
    """The Serve application of one scanned, available model (single model or ensemble) on a
    cluster of ``nodes`` (:func:`cluster.resources.node_resources`; None: ask Ray);
    ``instances``: how its replicas run the model's instances;
    ``traffic``: the repository API's traffic policy (None: the config's); ``recycle_round``:
    how many times its replicas were recycled (each round is a new code version, which Serve
    rolls out replica by replica: :mod:`cluster.recycling`); ``measure_footprint``: its replicas
    measure the memory its load adds (a memory budget counts it); ``placement``: where its
    replicas go as the controller decided it (None: :func:`placement_for` the nodes)."""
    if placement is None:
        try:
            placement = placement_for(model.config, node_resources() if nodes is None else nodes)
        except ValueError as err:
            raise InferenceServerError(f"model '{model.name}': {err}") from None
    surge = SURGE_PERCENT if placement.recycling is None else ONE_AT_A_TIME_SURGE_PERCENT

    def versioned(deployment: Any) -> Any:
        return _versioned(deployment, recycle_round)

    if model.is_ensemble:
        spec = _spec(model, generation)
        return versioned(
            TritonEnsemble.options(
                name=model.name,
                user_config=spec.to_user_config(),
                **_options(placement.only, surge),
            )
        ).bind(model.name, max_input_size)
    assert model.config is not None
    # A sequence model's replicas share a directory of their sequences and route by it.
    sequences = sequence_deployment_options() if routes_sequences(model.config) else {}
    groups = {
        group.name: versioned(
            TritonModel.options(
                name=group.name,
                user_config=_model_spec(
                    model, group, generation, instances, traffic, measure_footprint
                ).to_user_config(),
                **_options(group, surge),
                **sequences,
            )
        ).bind(model.name, max_input_size)
        for group in placement.groups
    }
    if not placement.routed:
        return groups[model.name]
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
    return versioned(router).bind(model.name, max_input_size, *groups.values())


def _options(group: ReplicaGroup, surge_percent: int = SURGE_PERCENT) -> dict[str, Any]:
    return group.deployment_options() | {"max_surge_percent": surge_percent}


def _versioned(deployment: Any, recycle_round: int = 0) -> Any:
    suffix = f"-recycled-{recycle_round}" if recycle_round else ""
    return set_code_version(deployment, MODEL_CODE_VERSION + suffix)


def _model_spec(
    model: RepositoryModel,
    group: ReplicaGroup,
    generation: str,
    instances: InstanceOptions,
    traffic: TrafficPolicy | None = None,
    measure_footprint: bool = False,
) -> ModelSpec:
    return ModelSpec.from_repository_model(
        model,
        group.instance_kind,
        group.group_name,
        generation,
        pinned_gpu=group.pinned_gpu,
        gpu_memory_fraction=group.gpu_memory_fraction,
        instances=instances,
        traffic=traffic,
        measure_footprint=measure_footprint,
    )


def _spec(
    model: RepositoryModel,
    generation: str,
    instances: InstanceOptions = DEFAULT_INSTANCES,
    traffic: TrafficPolicy | None = None,
    measure_footprint: bool = False,
) -> ModelSpec | EnsembleSpec:
    if model.is_ensemble:
        return EnsembleSpec(
            model.name, model.config.SerializeToString(), model.versions, model.labels, generation
        )
    # Hosted models run on CPU in the host's process: their first group names the instances.
    group = placement_for(model.config).groups[0]
    return _model_spec(model, group, generation, instances, traffic, measure_footprint)


def hosted_model_entry(
    model: RepositoryModel,
    generation: str,
    instances: InstanceOptions = DEFAULT_INSTANCES,
    traffic: TrafficPolicy | None = None,
    measure_footprint: bool = False,
) -> dict[str, Any]:
    """One model of the shared host's ``user_config``."""
    return hosted_entry(_spec(model, generation, instances, traffic, measure_footprint))


def host_application(
    max_input_size: int = DEFAULT_MAX_INPUT_SIZE, replicas: int = 1, node: str | None = None
) -> Application:
    """The shared host on ``replicas`` replicas (on node ``node``; None: Serve's choice); the
    controller sends them the models to serve
    (:class:`~deployments.core.model_host.HostedSet`)."""
    options: dict[str, Any] = {"num_cpus": 0}
    if node is not None:
        pin_to_node(options, node)
    deployment = TritonModelHost.options(
        name=HOST_DEPLOYMENT_NAME,
        # Constant: Serve calls reconfigure as a replica starts, which then asks the
        # controller for its models.
        user_config={"hosted_by": "repository controller"},
        num_replicas=replicas,
        max_ongoing_requests=HOST_MAX_ONGOING_REQUESTS,
        graceful_shutdown_timeout_s=GRACEFUL_SHUTDOWN_TIMEOUT_S,
        max_surge_percent=SURGE_PERCENT,
        ray_actor_options=options,
    )
    return _versioned(deployment).bind(max_input_size)
