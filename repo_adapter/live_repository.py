"""The live state of a served repository, Ray-free: what is loaded, loading, failed, unloaded.

:class:`LiveRepository` is the one owner of the repository's state. It scans model directories
(with fingerprints, so a poll sees what changed), resolves what a ``load`` or ``unload`` means
with Triton's semantics (ensembles load their members first; ``unload_dependents`` takes the
ensembles that use a model with it), records each model's state as the changes are applied,
and renders Triton's repository index. Applying a change (deploying replicas) is the caller's
job: :mod:`deployments.apps.repository_controller` does it on Serve.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypedDict

from tritonclient.grpc import model_config_pb2 as mc
from typing_extensions import NotRequired

from repo_adapter.backends.backend_files import BackendSettings
from repo_adapter.config import config_from_json
from repo_adapter.ensemble import member_names, validate_ensemble
from repo_adapter.errors import InferenceServerError, ModelConfigError, StatusCode
from repo_adapter.model_state import ModelState, VersionState, VersionStates
from repo_adapter.repository import RepositoryModel, mark_decoupled_ensembles, scan_model

logger = logging.getLogger(__name__)

READY, UNAVAILABLE = ModelState.READY, ModelState.UNAVAILABLE
LOADING, UNLOADING = ModelState.LOADING, ModelState.UNLOADING
UNLOADED_REASON = "unloaded"


def model_fingerprint(model_dir: Path, config_override: str = "") -> str:
    """A digest of every file under ``model_dir`` (path, size, mtime) and the override.

    Triton's poll reloads a model when a file of its directory changes; this is that test.
    """
    digest = hashlib.sha256(config_override.encode())
    try:
        files = sorted(p for p in model_dir.rglob("*") if p.is_file())
    except OSError:
        files = []
    for path in files:
        if "__pycache__" in path.parts:
            continue
        try:
            stat = path.stat()
        except OSError:
            continue
        digest.update(
            f"{path.relative_to(model_dir)}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode()
        )
    return digest.hexdigest()[:16]


class IndexEntry(TypedDict):
    """One line of Triton's repository index: a model (version), its state and why."""

    name: str
    version: NotRequired[str]
    state: NotRequired[str]  # a ModelState's name; absent for a model never loaded
    reason: NotRequired[str]


@dataclass
class ModelRecord:
    """One model of the repository and where it stands.

    ``served`` is the scan the model's replicas run (None: no replicas); ``pending`` the
    change being applied (LOADING or UNLOADING, with ``loading`` the scan being loaded);
    ``error`` why the last load failed; ``unloaded`` the versions an unload took away.
    """

    name: str
    served: RepositoryModel | None = None
    generation: str = ""
    pending: ModelState | None = None
    loading: RepositoryModel | None = None
    error: str = ""
    unloaded: list[int] = field(default_factory=list)
    override: str = ""  # the config JSON of the last load request, kept across polls
    awaits_members: bool = False  # an ensemble unloaded with its member, back with it
    attempted: str = ""  # fingerprint of the last load that failed (poll retries on change)
    files_dir: Path | None = None  # the files of a load with file: parameters
    versions: VersionStates = field(default_factory=dict)  # from the replicas
    failed_versions: VersionStates = field(default_factory=dict)  # the last failure's
    # What last happened to a serving model's replicas (one stopped unexpectedly), shown as
    # the reason of its ready versions until it is loaded again
    incident: str = ""

    def index_entries(self, ready_only: bool = False) -> list[IndexEntry]:
        """This model's lines of Triton's repository index."""
        entries: list[IndexEntry] = []

        def add(version: int | str | None, state: ModelState, reason: str = "") -> None:
            if ready_only and state is not READY:
                return
            entry = IndexEntry(name=self.name)
            if version is not None and version != "":
                entry["version"] = str(version)
            entry["state"] = state.value
            if reason:
                entry["reason"] = reason
            entries.append(entry)

        if self.pending is UNLOADING and self.served is not None:
            for version in self.served.versions:
                add(version, UNLOADING)
            return entries
        shown: set[str] = set()
        if self.served is not None:
            states = self.versions or {str(v): VersionState(READY) for v in self.served.versions}
            for version, state in sorted(states.items(), key=lambda item: _version_key(item[0])):
                reason = state.reason or (self.incident if state.state is READY else "")
                add(version, state.state, reason)
                shown.add(version)
        if self.pending is LOADING and self.loading is not None:
            for version in self.loading.versions or [None]:
                if str(version) not in shown:
                    add(version, LOADING)
                    shown.add(str(version))
        elif self.error and self.served is None:
            if self.failed_versions:
                for version, state in self.failed_versions.items():
                    add(version, UNAVAILABLE, state.reason or self.error)
                    shown.add(version)
            else:
                versions = self.loading.versions if self.loading is not None else []
                for version in versions or [None]:
                    add(version, UNAVAILABLE, self.error)
                    shown.add(str(version))
        for version in self.unloaded:
            if str(version) not in shown:
                add(version, UNAVAILABLE, UNLOADED_REASON)
        if not entries and not ready_only and not shown and not self.unloaded:
            entries.append({"name": self.name})  # in the repository, never loaded
        return sorted(entries, key=lambda entry: _version_key(entry.get("version", "")))


def _version_key(version: str) -> tuple[int, str]:
    return (int(version), "") if version.isdigit() else (0, version)


@dataclass
class LoadPlan:
    """The models a ``load`` request loads, in order (members before the ensembles using them)."""

    models: list[RepositoryModel]


class LiveRepository:
    """Scans and owns the state of one model repository (see the module docstring)."""

    def __init__(
        self,
        root: Path | str,
        gpu_ids: Sequence[int] = (),
        file_override_dir: Path | str | None = None,
        backends: BackendSettings | None = None,
    ) -> None:
        """``file_override_dir``: where ``load`` may write model files clients send
        (``file:`` parameters); None refuses them. ``backends``: where backends rayton does
        not have are looked for last (after a model's own directories), and their settings."""
        self.root = Path(root)
        if not self.root.is_dir():
            raise ModelConfigError(f"model repository '{self.root}' is not a directory")
        self.gpu_ids = list(gpu_ids)
        self.file_override_dir = Path(file_override_dir) if file_override_dir else None
        self.backends = backends or BackendSettings()
        self._override_loads = 0
        self.records: dict[str, ModelRecord] = {}
        self.refresh_names()

    # ------------------------------------------------------------------ scanning

    def model_names(self) -> list[str]:
        """Model directories of the repository, sorted."""
        return sorted(
            p.name for p in self.root.iterdir() if p.is_dir() and not p.name.startswith(".")
        )

    def refresh_names(self) -> None:
        """Add records for new model directories (removed ones stay until unloaded)."""
        for name in self.model_names():
            self.records.setdefault(name, ModelRecord(name))

    def record(self, name: str) -> ModelRecord:
        record = self.records.get(name)
        if record is None:
            raise model_not_in_repository(name)
        return record

    def model_dir(self, name: str) -> Path:
        """Where ``name``'s files are: the repository, or the files of a ``file:`` load."""
        record = self.records.get(name)
        if record is not None and record.files_dir is not None:
            return record.files_dir
        return self.root / name

    def fingerprint(self, name: str) -> str:
        record = self.records.get(name)
        return model_fingerprint(self.model_dir(name), record.override if record else "")

    def scan(self, name: str, config_override: str = "") -> RepositoryModel:
        """Scan one model (with its ``load`` config override); errors land in ``.error``."""
        override = None
        if config_override:
            try:
                override = config_from_json(config_override, f"the config override of '{name}'")
            except ModelConfigError as err:
                raise not_polled(name, err.message) from None
            if override.name and override.name != name:
                raise not_polled(name, f"the config override names model '{override.name}'")
        return scan_model(self.model_dir(name), self.gpu_ids, override, self.backends)

    # ------------------------------------------------------------------ dependencies

    def members_of(self, model: RepositoryModel) -> list[str]:
        return member_names(model.config) if model.available and model.is_ensemble else []

    def dependents_of(self, name: str) -> list[str]:
        """Served ensembles that (directly or through nested ensembles) use ``name``."""
        found: list[str] = []
        frontier = [name]
        while frontier:
            target = frontier.pop()
            for record in self.records.values():
                served = record.served
                if served is None or record.name in found or record.name == name:
                    continue
                if target in self.members_of(served):
                    found.append(record.name)
                    frontier.append(record.name)
        return found

    def uses_of(self, name: str) -> list[str]:
        """Served models ``name`` (an ensemble) uses, directly or through nested ensembles."""
        record = self.records.get(name)
        if record is None or record.served is None:
            return []
        found: list[str] = []
        frontier = self.members_of(record.served)
        while frontier:
            member = frontier.pop()
            member_record = self.records.get(member)
            if member in found or member_record is None or member_record.served is None:
                continue
            found.append(member)
            frontier.extend(self.members_of(member_record.served))
        return found

    def plan_load(
        self,
        name: str,
        config_override: str | None = None,
        files: Mapping[str, bytes] | None = None,
    ) -> LoadPlan:
        """Scan ``name`` (and the members an ensemble needs that are not served yet).

        Raises for a model the repository does not have. ``config_override`` None keeps the
        override of an earlier load; "" drops it. ``files`` (``{"file:1/model.py": bytes}``,
        with a config) are the model's files for this load, as in Triton; a load without them
        reads the repository again.
        """
        self.refresh_names()
        if files:
            self._write_files(name, config_override, files)
        else:
            record = self.records.get(name)
            if record is not None:
                record.files_dir = None
        record = self.record(name)
        if not self.model_dir(name).is_dir():
            raise model_not_in_repository(name)
        override = record.override if config_override is None else config_override
        model = self.scan(name, override)
        record.override = override  # Triton: the override replaces config.pbtxt from now on
        plan: list[RepositoryModel] = []
        if model.available and model.is_ensemble:
            configs: dict[str, mc.ModelConfig | None] = {}
            closure = self._member_closure(model)
            for member, found in closure.items():
                member_record = self.records.get(member)
                served = member_record is not None and member_record.served is found
                configs[member] = found.config if found is not None and found.available else None
                if found is not None and not served:
                    plan.append(found)  # scanned: the member loads before the ensemble
            try:
                validate_ensemble(model.config, configs)
            except ModelConfigError as err:
                model.error = err.message
            mark_decoupled_ensembles(model, closure)
        plan.append(model)
        return LoadPlan(plan)

    def _write_files(self, name: str, config: str | None, files: Mapping[str, bytes]) -> None:
        """Triton's model file override: the files become the model's directory."""
        if self.file_override_dir is None:
            raise InferenceServerError(FILE_OVERRIDE_REFUSED, StatusCode.UNSUPPORTED)
        if not config:
            raise not_polled(
                name, "load parameter 'config' must be specified for model file override"
            )
        self._override_loads += 1
        target = self.file_override_dir / f"load-{self._override_loads}" / name
        for key, contents in files.items():
            relative = Path(key.removeprefix("file:"))
            if relative.is_absolute() or ".." in relative.parts or not relative.parts:
                raise InferenceServerError(f"invalid file path '{key}' for model '{name}'")
            path = target / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(contents)
        target.mkdir(parents=True, exist_ok=True)
        self.records.setdefault(name, ModelRecord(name)).files_dir = target

    def _member_closure(self, ensemble: RepositoryModel) -> dict[str, RepositoryModel | None]:
        """Members of ``ensemble`` in load order (nested ensembles' members first): the
        served scan of each served member, a fresh scan of the others, None when missing."""
        found: dict[str, RepositoryModel | None] = {}

        def visit(model: RepositoryModel, seen: frozenset[str]) -> None:
            for member in self.members_of(model):
                if member in found or member in seen:
                    continue
                record = self.records.get(member)
                if record is not None and record.served is not None:
                    scanned: RepositoryModel | None = record.served
                elif self.model_dir(member).is_dir():
                    scanned = self.scan(member, record.override if record else "")
                else:
                    scanned = None
                if scanned is not None:
                    visit(scanned, seen | {member})
                found[member] = scanned

        visit(ensemble, frozenset({ensemble.name}))
        return found

    # ------------------------------------------------------------------ transitions

    def begin_load(self, model: RepositoryModel) -> str:
        """Mark ``model`` LOADING; returns the generation (fingerprint) being loaded."""
        record = self.records.setdefault(model.name, ModelRecord(model.name))
        record.pending, record.loading, record.error = LOADING, model, ""
        record.failed_versions, record.awaits_members = {}, False
        record.attempted = self.fingerprint(model.name)
        return record.attempted

    def load_succeeded(
        self, name: str, generation: str, versions: Mapping[str, VersionState]
    ) -> None:
        record = self.records[name]
        if record.served is not None and record.loading is not None:  # versions it dropped
            dropped = set(record.served.versions) - set(record.loading.versions)
            record.unloaded = sorted({*record.unloaded, *dropped})
        record.served, record.generation = record.loading, generation
        record.pending, record.loading, record.error = None, None, ""
        record.versions, record.failed_versions = dict(versions), {}
        record.incident = ""
        served = set(record.served.versions) if record.served else set()
        record.unloaded = [v for v in record.unloaded if v not in served]

    def load_failed(
        self, name: str, reason: str, failed_versions: Mapping[str, VersionState] | None = None
    ) -> None:
        """The load did not take: a served model keeps serving; the reason is kept.

        ``failed_versions`` are the versions' own states when they failed one by one.
        """
        record = self.records[name]
        record.pending, record.error = None, reason
        record.failed_versions = dict(failed_versions or {})
        if record.served is None:
            return  # the index shows the versions that failed with the reason
        record.loading = None

    def replica_stopped(self, name: str, what: str) -> None:
        """A replica of serving model ``name`` stopped unexpectedly (``what`` says how); the
        index shows it until the model is loaded again. Ignored while a change of the model
        is under way (its own deploy replaces replicas)."""
        record = self.records.get(name)
        if record is not None and record.served is not None and record.pending is None:
            record.incident = what

    def begin_unload(self, name: str) -> None:
        self.records[name].pending = UNLOADING

    def unload_finished(self, name: str, with_member: bool = False) -> None:
        """``name`` serves nothing any more. Unloaded by itself, it forgets its config
        override (Triton's next load reads config.pbtxt). ``with_member``: an ensemble that
        went with the unload of a model it uses; as in Triton, it keeps its config and loads
        again once its members serve again (:meth:`returning_ensembles`)."""
        record = self.records[name]
        if record.served is not None:
            record.unloaded = sorted({*record.unloaded, *record.served.versions})
        record.served, record.generation, record.pending = None, "", None
        record.loading, record.error, record.versions = None, "", {}
        record.incident = ""
        record.awaits_members = with_member
        if not with_member:
            record.override, record.files_dir = "", None

    def returning_ensembles(self) -> list[str]:
        """Ensembles unloaded with a member whose members all serve again: Triton loads them
        back (nested ones come back one level per call)."""
        returning = []
        for record in self.records.values():
            if not record.awaits_members or record.served is not None or record.pending:
                continue
            try:
                members = self.members_of(self.scan(record.name, record.override))
            except InferenceServerError:
                continue
            if members and all(
                (member := self.records.get(name)) is not None and member.served is not None
                for name in members
            ):
                returning.append(record.name)
        return sorted(returning)

    def forget_removed(self) -> list[str]:
        """Drop records of directories gone from disk that nothing serves; their names."""
        on_disk = set(self.model_names())
        gone = [
            name
            for name, record in self.records.items()
            if name not in on_disk and record.served is None and not record.pending
        ]
        for name in gone:
            del self.records[name]
        return gone

    # ------------------------------------------------------------------ views

    def served_names(self) -> list[str]:
        return sorted(n for n, r in self.records.items() if r.served is not None)

    def index(self, ready_only: bool = False) -> list[IndexEntry]:
        entries: list[IndexEntry] = []
        for name in sorted(self.records):
            entries.extend(self.records[name].index_entries(ready_only))
        return entries

    def unavailable_reason(self, name: str) -> str | None:
        """Why ``name`` serves nothing ("unloaded", a load error), or None when it serves."""
        record = self.records.get(name)
        if record is None or record.served is not None:
            return None
        if record.pending is LOADING:
            return "the model is loading"
        if record.error:
            return record.error
        if record.unloaded:
            return UNLOADED_REASON
        return None

    def changed_since_served(self, names: Iterable[str] | None = None) -> dict[str, str]:
        """Poll: models whose files differ from what serves -> "load" or "unload"."""
        self.refresh_names()
        on_disk = set(self.model_names())
        changes: dict[str, str] = {}
        for name in sorted(names if names is not None else self.records):
            record = self.records.get(name)
            if record is None or record.pending:
                continue
            if name not in on_disk:
                if record.served is not None:
                    changes[name] = "unload"
                continue
            fingerprint = self.fingerprint(name)
            if record.served is None:
                if fingerprint != record.attempted:
                    changes[name] = "load"
            elif fingerprint != record.generation:
                changes[name] = "load"
        return changes


FILE_OVERRIDE_REFUSED = (
    "load parameters 'file:<version>/<name>' are refused: this server was started without "
    "--model-file-override-dir, so it does not write model files clients send to disk"
)


def not_polled(name: str, detail: str = "") -> InferenceServerError:
    """Triton's answer to a ``load`` it cannot even scan (unknown model, bad override).

    Triton logs the detail and answers only the first sentence; rayton appends it.
    """
    message = f"failed to load '{name}', failed to poll from model repository"
    return InferenceServerError(f"{message}: {detail}" if detail else message, StatusCode.INTERNAL)


def model_not_in_repository(name: str) -> InferenceServerError:
    return not_polled(name)


def load_failed_error(
    name: str, versions: Mapping[str, VersionState], reason: str
) -> InferenceServerError:
    """Triton's answer to a ``load`` whose model failed: each failed version's reason."""
    failed = sorted(
        ((v, s.reason) for v, s in versions.items() if not s.ready),
        key=lambda item: _version_key(item[0]),
        reverse=True,
    )
    if failed:
        detail = "".join(f"version {v} is at {UNAVAILABLE} state: {r};\n" for v, r in failed)
    else:
        detail = reason if reason.endswith("\n") else f"{reason}\n"
    return InferenceServerError(f"load failed for model '{name}': {detail}", StatusCode.INVALID_ARG)
