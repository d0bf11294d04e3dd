"""A repository served in this process: real models, the real repository state, no Ray.

:class:`InProcessRepository` implements the three protocols :class:`ServerCore` needs
(``Repository``, ``RuntimeSettings`` and ``ModelCalls``) over a :class:`LiveRepository` and real
:class:`SingleModel` objects, so the server-wide protocol logic runs in unit tests exactly as
it runs over the repository controller and deployment handles in a cluster.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

from deployments.core.served_model import ModelMetadata
from deployments.core.server_core import RepositoryView
from deployments.core.single_model import SingleModel
from deployments.grpc.model_infer import RoutedCalls, infer_serialized
from deployments.observability.log_settings import LogSettings, LogSettingsDocument
from deployments.observability.statistics import ModelStatistics
from deployments.observability.status import StatusDocument, status_document
from repo_adapter.backends import InstanceSpec
from repo_adapter.config import ConfigDocument
from repo_adapter.errors import InferenceServerError, StatusCode
from repo_adapter.inference_types import JsonObject
from repo_adapter.live_repository import IndexEntry, LiveRepository, load_failed_error
from repo_adapter.request_validation import model_not_found
from repo_adapter.version_traffic import TrafficPolicy


class InProcessRepository:
    """Loads models into this process on ``load`` (every mode's control is allowed), and
    on a request's demand when ``on_demand``."""

    def __init__(self, root: Path | str, on_demand: bool = False) -> None:
        self.repository = LiveRepository(root)
        self.on_demand = on_demand
        self.models: dict[str, SingleModel] = {}
        self._log_settings = LogSettings()  # kept, not applied: models run in the test process
        self._routed = RoutedCalls()  # no region hop: one process

    # ------------------------------------------------------------------ Repository

    async def view(self) -> RepositoryView:
        repository = self.repository
        unavailable = {
            name: reason
            for name in repository.records
            if (reason := repository.unavailable_reason(name)) is not None
        }
        failed = [n for n, r in repository.records.items() if r.served is None and r.error]
        return RepositoryView(
            repository.served_names(), unavailable, ready=not failed, on_demand=self.on_demand
        )

    async def index(self, ready_only: bool) -> list[IndexEntry]:
        return self.repository.index(ready_only)

    async def log_settings(self) -> LogSettingsDocument:
        return self._log_settings.to_json()

    async def update_log_settings(self, changes: JsonObject) -> LogSettingsDocument:
        self._log_settings = self._log_settings.updated(changes)
        return self._log_settings.to_json()

    async def status(self) -> StatusDocument:
        # Models run in this test process: there are no replicas to list.
        return status_document(str(self.repository.root), "explicit", self.repository.index(), [])

    async def load(
        self, model: str, config: str | None = None, files: dict[str, bytes] | None = None
    ) -> None:
        for scanned in self.repository.plan_load(model, config).models:
            generation = self.repository.begin_load(scanned)
            if not scanned.available:
                self.repository.load_failed(scanned.name, scanned.error)
                continue
            loaded = SingleModel(
                scanned.config,
                scanned.path,
                scanned.versions,
                scanned.labels,
                InstanceSpec.cpu(scanned.name),
            )
            if not loaded.ready_versions:
                self.repository.load_failed(
                    scanned.name, "no version could be loaded", loaded.state()
                )
                await loaded.close()
                continue
            previous = self.models.pop(scanned.name, None)
            if previous is not None:
                await previous.close()
            self.models[scanned.name] = loaded
            self.repository.load_succeeded(scanned.name, generation, loaded.state())
        record = self.repository.records[model]
        if record.error:
            raise load_failed_error(model, record.failed_versions, record.error)

    async def unload(self, model: str, unload_dependents: bool = False) -> None:
        dependents = self.repository.dependents_of(model)
        for name in [*dependents, model]:
            loaded = self.models.pop(name, None)
            if loaded is not None:
                self.repository.begin_unload(name)
                await loaded.close()
                self.repository.unload_finished(name, with_member=name in dependents)

    async def ensure_loaded(self, model: str) -> bool:
        if model not in self.repository.model_names():
            raise InferenceServerError(
                f"Request for unknown model: '{model}' is not found", StatusCode.NOT_FOUND
            )
        if model not in self.models:
            with contextlib.suppress(InferenceServerError):  # the view says why it failed
                await self.load(model)
        return model in self.models

    async def version_traffic(self, model: str) -> TrafficPolicy:
        return self._loaded(model).traffic

    async def set_version_traffic(self, model: str, policy: TrafficPolicy) -> TrafficPolicy:
        loaded = self._loaded(model)
        policy.check(loaded.config, loaded.ready_versions)
        loaded.steer(policy)
        return policy

    # ------------------------------------------------------------------ ModelCalls

    def _loaded(self, model: str) -> SingleModel:
        loaded = self.models.get(model)
        if loaded is None:
            raise model_not_found(model)
        return loaded

    async def infer_wire(self, model: str, message: bytes) -> bytes:
        return await infer_serialized(self._loaded(model).infer, message)

    async def infer_wire_stream(self, model: str, message: bytes) -> AsyncIterator[bytes]:
        async for reply in self._routed.stream_wire(self._loaded(model), message):
            yield reply

    async def metadata(
        self, model: str, version: str = "", timeout_s: float | None = None
    ) -> ModelMetadata:
        return self._loaded(model).metadata(version)

    async def model_config(
        self, model: str, version: str = "", timeout_s: float | None = None
    ) -> ConfigDocument:
        return self._loaded(model).model_config(version)

    async def is_ready(self, model: str, version: str = "", timeout_s: float | None = None) -> bool:
        return self._loaded(model).is_ready(version)

    async def statistics(
        self, model: str, version: str = "", timeout_s: float | None = None
    ) -> list[ModelStatistics]:
        return self._loaded(model).statistics(version)

    def forget(self, model: str) -> None:
        pass  # nothing cached

    async def close(self) -> None:
        for model in self.models.values():
            await model.close()
        self.models.clear()
