"""A model served by several groups of replicas (mixed instance kinds, GPUs pinned one by one).

Triton's instances of one model all take batches from one scheduler queue, so a faster
instance takes more of the work. Here each group of replicas batches on its own; the router
sends each request to the group with the fewest requests in flight per replica (the shortest
queue), which gives a faster group more of the work in the same way. The groups' own
states make the model's: a version is ready when it is ready in every replica that reports
it, as a Triton version is ready once all its instances loaded.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from tritonclient.grpc import model_config_pb2 as mc

from deployments.core.served_model import ModelMetadata, model_metadata
from deployments.observability.statistics import ModelStatistics, VersionMetrics
from repo_adapter.config import ConfigDocument, config_to_json_dict
from repo_adapter.errors import InferenceServerError, StatusCode
from repo_adapter.inference_types import InferRequest, InferResponse
from repo_adapter.model_state import ModelState, VersionState, VersionStates
from repo_adapter.request_validation import model_not_found


@dataclass
class GroupRoute:
    """One group of replicas: how to send it a request, and how many replicas share them."""

    name: str
    replicas: int
    infer: Callable[[InferRequest], Awaitable[InferResponse]]
    in_flight: int = 0

    @property
    def load(self) -> float:
        return self.in_flight / max(self.replicas, 1)


GROUPS_LOADING = VersionState(ModelState.UNAVAILABLE, "its instance groups are loading")


class RoutedModel:
    """A ``ServedModel`` whose inference runs in the replica groups behind ``routes``."""

    def __init__(
        self, config: mc.ModelConfig, versions: Sequence[int], routes: Sequence[GroupRoute]
    ) -> None:
        if not routes:
            raise ValueError(f"model '{config.name}' has no replica group to route to")
        self.config = config
        self.name = config.name
        self.versions = list(versions)
        self.routes = list(routes)
        self._config_json = config_to_json_dict(config)
        self._states: VersionStates = {str(v): GROUPS_LOADING for v in self.versions}

    # ------------------------------------------------------------------ the groups' states

    def update_states(self, replica_versions: Sequence[VersionStates]) -> None:
        """Take the version states every group replica reported (its ``slot_status``)."""
        states: VersionStates = {}
        for version in map(str, self.versions):
            reported = [r[version] for r in replica_versions if version in r]
            failed = [s for s in reported if not s.ready]
            if not reported:
                states[version] = GROUPS_LOADING
            elif failed:
                states[version] = VersionState(ModelState.UNAVAILABLE, failed[0].reason)
            else:
                states[version] = VersionState(ModelState.READY)
        self._states = states

    def state(self) -> VersionStates:
        return dict(self._states)

    def _ready(self) -> list[str]:
        return [v for v, s in self._states.items() if s.ready]

    def is_ready(self, version: str = "") -> bool:
        return version in self._ready() if version else bool(self._ready())

    def _check_version(self, version: str) -> None:
        if version and version not in self._states:
            raise model_not_found(self.name, version)
        if not self.is_ready(version):
            reasons = sorted({s.reason for s in self._states.values() if s.reason})
            raise InferenceServerError(
                f"Request for unknown model: '{self.name}' is not ready: "
                + ("; ".join(reasons) or "no version is loaded"),
                StatusCode.UNAVAILABLE,
            )

    # ------------------------------------------------------------------ protocol API

    def metadata(self, version: str = "") -> ModelMetadata:
        self._check_version(version)
        return model_metadata(self.config, [version] if version else self._ready())

    def model_config(self, version: str = "") -> ConfigDocument:
        self._check_version(version)
        return self._config_json

    def statistics(self, version: str = "") -> list[ModelStatistics]:
        """Nothing runs here: the groups count (their deployments are asked instead). Raises
        Triton's error for a version that is unknown or not ready."""
        if version and version not in self._states:
            raise model_not_found(self.name, version)
        if not self.is_ready(version):
            raise InferenceServerError(
                f"requested model '{self.name}' is not available", StatusCode.INVALID_ARG
            )
        return []

    def metrics(self) -> list[VersionMetrics]:
        return []

    def pick(self) -> GroupRoute:
        """The group with the fewest requests in flight per replica (first on a tie)."""
        return min(self.routes, key=lambda route: route.load)

    async def infer(self, request: InferRequest) -> InferResponse:
        route = self.pick()
        route.in_flight += 1
        try:
            return await route.infer(request)
        finally:
            route.in_flight -= 1

    async def close(self) -> None:
        """Nothing to release: the groups own the model instances."""
