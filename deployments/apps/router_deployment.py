"""The front of a model whose instances are several Serve deployments (one per replica group).

A Serve deployment has one set of resources for all its replicas, so a model with a CPU and a
GPU group, or with GPU instances pinned to different devices, runs as one deployment per group
(see :mod:`cluster.placement`). This router, named after the model, takes the model's route and
handle calls (HTTP, gRPC, ensembles, BLS) and sends each request to a group
(:class:`~deployments.core.routed_model.RoutedModel`); the groups batch and run it. It follows
the groups' states in the background, and sums their statistics.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ray import serve
from ray.exceptions import RayActorError
from ray.serve.handle import DeploymentHandle
from tritonclient.grpc import model_config_pb2 as mc

from deployments.apps.handles import broadcast
from deployments.apps.model_deployment import (
    ServedModelDeployment,
    spec_from_user_config,
    spec_to_user_config,
)
from deployments.apps.replica_api import ModelReplicaApi
from deployments.core.routed_model import GroupRoute, RoutedModel
from deployments.core.served_model import ServedModel
from deployments.http.body_limit import DEFAULT_MAX_INPUT_SIZE
from deployments.observability.statistics import ModelStatistics, merge_entries
from repo_adapter.errors import InferenceServerError, StatusCode
from repo_adapter.inference_types import InferRequest, InferResponse

logger = logging.getLogger(__name__)

# How often the router reads its groups' states: often while they load, seldom after.
_REFRESH_LOADING_S = 0.5
_REFRESH_SERVING_S = 5.0


@dataclass
class RouterSpec:
    """What a router replica needs (Serve's ``user_config``): the model and its groups."""

    name: str
    config_bytes: bytes
    versions: list[int]
    groups: dict[str, int] = field(default_factory=dict)  # deployment name -> replicas
    generation: str = ""

    def to_user_config(self) -> dict[str, Any]:
        return spec_to_user_config(self)

    @classmethod
    def from_user_config(cls, data: dict[str, Any]) -> RouterSpec:
        return spec_from_user_config(cls, data)


def _group_infer(model: str, handle: DeploymentHandle) -> Callable[[InferRequest], Any]:
    deployment = handle.deployment_name
    infer = handle.infer  # ModelReplicaApi.infer of the group's replicas

    async def call(request: InferRequest) -> InferResponse:
        try:
            return await infer.remote(model, request)
        except RayActorError as err:  # the group's replica went (a crash, a lost node)
            raise InferenceServerError(
                f"model '{model}' is unavailable: the replica of '{deployment}' serving it "
                f"stopped before answering ({type(err).__name__}); Serve is starting a new one",
                StatusCode.UNAVAILABLE,
            ) from None

    return call


@serve.deployment
class TritonModelRouter(ServedModelDeployment):
    """Serves one model by sending its requests to its replica groups."""

    def __init__(
        self, name: str, max_input_size: int = DEFAULT_MAX_INPUT_SIZE, *groups: DeploymentHandle
    ) -> None:
        """``groups``: the handles of the model's group deployments (bound by the builder)."""
        super().__init__(name, max_input_size)
        self._handles = {handle.deployment_name: handle for handle in groups}
        self._groups: list[str] = []
        self._following: asyncio.Task | None = None

    def build(self, user_config: dict[str, Any]) -> Callable[[], ServedModel]:
        spec = RouterSpec.from_user_config(user_config)
        config = mc.ModelConfig()
        config.ParseFromString(spec.config_bytes)
        routes = [
            GroupRoute(group, replicas, _group_infer(spec.name, self._handles[group]))
            for group, replicas in spec.groups.items()
        ]
        self._groups = list(spec.groups)

        def load() -> ServedModel:
            return RoutedModel(config, spec.versions, routes)

        return load

    def held_models(self) -> list[str]:
        """None: ``rayton status`` lists the groups' replicas, which hold the instances."""
        return []

    async def reconfigure(self, user_config: dict[str, Any]) -> None:
        await super().reconfigure(user_config)
        if self._following is None:
            self._following = asyncio.get_running_loop().create_task(self._follow_groups())

    async def _follow_groups(self) -> None:
        while True:
            model = self.slot.serving
            if isinstance(model, RoutedModel):
                statuses = await broadcast(
                    self._targets(), ModelReplicaApi.slot_status, self.slot.name
                )
                model.update_states([status.versions for status in statuses])
                loading = not model.is_ready() or len(statuses) < sum(
                    route.replicas for route in model.routes
                )
            else:
                loading = True
            await asyncio.sleep(_REFRESH_LOADING_S if loading else _REFRESH_SERVING_S)

    def _targets(self) -> list[tuple[str, str]]:
        return [(group, self.slot.name) for group in self._groups]

    async def _statistics_here(self, version: str = "") -> list[ModelStatistics]:
        """The model's statistics summed over every replica of every group."""
        self.slot.statistics(version)  # Triton's error for a version not served
        per_replica = await broadcast(
            self._targets(), ModelReplicaApi.local_statistics, self.slot.name, version
        )
        return merge_entries([entry for entries in per_replica for entry in entries])

    async def __del__(self) -> None:
        if self._following is not None:
            self._following.cancel()
            with contextlib.suppress(BaseException):
                await self._following
        await super().__del__()
