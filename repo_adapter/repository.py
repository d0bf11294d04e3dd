"""Scan a Triton model repository: configs, auto-complete, version policies, labels.

Scanning reads files only; it never loads a model into a runtime. Each model comes back
either configured (normalised config, versions to serve, labels) or UNAVAILABLE with the
reason, so one broken model never stops the others.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tritonclient.grpc import model_config_pb2 as mc

from repo_adapter.backends import (
    backend_class,
    backend_for_platform,
    is_registered,
    probe_order,
    supported_backends,
)
from repo_adapter.backends.backend_files import (
    PYTHON_BASED_MODEL_FILE,
    BackendSettings,
    backend_file,
    is_python_based,
    library_name,
    search_paths,
)
from repo_adapter.backends.base import ModelVersion
from repo_adapter.backends.native.autocomplete import completed_config
from repo_adapter.config import (
    CONFIG_FILENAME,
    ENSEMBLE_PLATFORM,
    load_config_file,
    normalize_config,
    validate_config,
)
from repo_adapter.errors import InferenceServerError, ModelConfigError, NoDeviceError
from repo_adapter.version_dirs import available_versions

logger = logging.getLogger(__name__)


@dataclass
class RepositoryModel:
    """One model directory after scanning."""

    name: str
    path: Path
    config: mc.ModelConfig | None = None
    versions: list[int] = field(default_factory=list)
    labels: dict[str, list[str]] = field(default_factory=dict)
    error: str = ""
    needs_device: bool = False  # error is a device the cluster lacks, not a broken model
    # A backend rayton does not have: a Triton C/C++ library or a python-based backend's model.py
    backend_file: Path | None = None
    backend_config: dict[str, str] = field(default_factory=dict)  # a C/C++ library's settings

    @property
    def available(self) -> bool:
        return not self.error

    @property
    def is_ensemble(self) -> bool:
        return self.config is not None and self.config.platform == ENSEMBLE_PLATFORM

    def model_version(self, version: int) -> ModelVersion:
        assert self.config is not None
        return ModelVersion(
            self.name, version, self.config, self.path, self.backend_file, self.backend_config
        )


def scan_repository(
    repository: Path | str, gpu_ids: Sequence[int] = (), names: Sequence[str] | None = None
) -> dict[str, RepositoryModel]:
    """Scan every model directory (or only ``names``) of ``repository``, sorted by name."""
    root = Path(repository)
    if not root.is_dir():
        raise ModelConfigError(f"model repository '{root}' is not a directory")
    models: dict[str, RepositoryModel] = {}
    for model_dir in sorted(p for p in root.iterdir() if p.is_dir()):
        if model_dir.name.startswith("."):
            continue
        if names is not None and model_dir.name not in names:
            continue
        models[model_dir.name] = scan_model(model_dir, gpu_ids)
    _complete_ensembles(root, models, gpu_ids)
    return models


def _complete_ensembles(
    root: Path, models: dict[str, RepositoryModel], gpu_ids: Sequence[int]
) -> None:
    """Core's ensemble completion over a scan: an ensemble is decoupled when any step model
    is. Members outside ``models`` (a partial scan) are scanned from ``root`` for their flag."""

    outside: dict[str, RepositoryModel] = {}

    def member(name: str) -> RepositoryModel | None:
        if name in models:
            return models[name]
        if name not in outside and (root / name).is_dir():
            outside[name] = scan_model(root / name, gpu_ids)
        return outside.get(name)

    for model in list(models.values()):
        if model.available and model.is_ensemble:
            _mark(model, member, frozenset({model.name}))


def mark_decoupled_ensembles(
    ensemble: RepositoryModel, members: Mapping[str, RepositoryModel | None]
) -> None:
    """Core's ensemble completion for one ensemble and its scanned ``members`` (every
    member, nested ensembles' included): decoupled when any step model is."""
    _mark(ensemble, members.get, frozenset({ensemble.name}))


def _mark(
    model: RepositoryModel,
    member: Callable[[str], RepositoryModel | None],
    visiting: frozenset[str],
) -> bool:
    """Whether ``model`` is decoupled; an ensemble's flag is set from its steps' on the way."""
    config = model.config
    if config is None:
        return False
    if not model.is_ensemble:
        return config.model_transaction_policy.decoupled
    decoupled = False
    for step in config.ensemble_scheduling.step:
        found = member(step.model_name)
        if found is not None and step.model_name not in visiting:
            decoupled |= _mark(found, member, visiting | {step.model_name})
    config.model_transaction_policy.decoupled = decoupled
    return decoupled


def scan_model(
    model_dir: Path,
    gpu_ids: Sequence[int] = (),
    config_override: mc.ModelConfig | None = None,
    backends: BackendSettings | None = None,
) -> RepositoryModel:
    """Scan one model directory; failures are captured in ``RepositoryModel.error``.

    ``config_override`` replaces ``config.pbtxt`` (a repository ``load`` with a ``config``).
    ``backends``: where a backend rayton does not have is looked for last, and its settings.
    """
    backends = backends or BackendSettings()
    model = RepositoryModel(name=model_dir.name, path=model_dir)
    try:
        model.config = _complete_config(model_dir, gpu_ids, config_override)
        model.versions = select_versions(model.config, available_versions(model_dir))
        if not model.is_ensemble and not is_registered(model.config.backend):
            model.backend_file = _backend_file(model, backends.directory)
            if is_python_based(model.backend_file):
                if not model.config.runtime:
                    model.config.runtime = model.backend_file.name  # as Triton reports it
            else:
                model.backend_config = backends.cmdline(model.config.backend)
                if model.backend_config.get("auto-complete-config") == "true":
                    model.config = _auto_completed(model, gpu_ids)
        if not model.is_ensemble:
            for version in model.versions:
                _check_model_file(model.model_version(version))
        model.labels = _read_labels(model_dir, model.config)
        if model.is_ensemble:
            # Core always sets it for ensembles; scan_repository derives it from the steps.
            model.config.model_transaction_policy.decoupled = False
    except InferenceServerError as err:
        model.error = err.message
        model.needs_device = isinstance(err, NoDeviceError)
        logger.error("model '%s' is unavailable: %s", model.name, err.message)
    return model


def _backend_file(model: RepositoryModel, backend_directory: str) -> Path:
    """The C/C++ library or python-based backend of a backend rayton does not have itself,
    as Triton finds it."""
    assert model.config is not None
    backend, runtime = model.config.backend, model.config.runtime
    found = backend_file(backend, model.path, model.versions, backend_directory, runtime)
    if found is None:
        searched = search_paths(backend, model.path, model.versions, backend_directory, runtime)
        python_based = PYTHON_BASED_MODEL_FILE if not runtime.endswith(".py") else runtime
        raise ModelConfigError(
            f"unable to find backend library '{library_name(backend, runtime)}' or a "
            f"python-based backend '{backend}/{python_based}' for model '{model.name}' "
            f"(backend '{backend}' is none of rayton's: {', '.join(supported_backends())}), "
            f"searched: {', '.join(dict.fromkeys(str(p.parent) for p in searched))}"
        )
    return found


def _auto_completed(model: RepositoryModel, gpu_ids: Sequence[int]) -> mc.ModelConfig:
    """The config as the C/C++ backend completes it (Triton's auto-complete when it loads the
    model), normalised and checked again when the backend changed it."""
    assert model.config is not None
    completed = completed_config(model.model_version(model.versions[-1]))
    if completed == model.config:
        return model.config
    normalize_config(completed, gpu_ids)
    source = f"the config backend '{model.config.backend}' completed for '{model.name}'"
    validate_config(completed, source, gpu_ids)
    return completed


def select_versions(config: mc.ModelConfig, on_disk: Sequence[int]) -> list[int]:
    """Versions to serve under the config's ``version_policy``."""
    policy = config.version_policy
    if policy.HasField("all"):
        selected = list(on_disk)
    elif policy.HasField("specific"):
        selected = sorted(v for v in set(policy.specific.versions) if v in on_disk)
        for missing in set(policy.specific.versions) - set(on_disk):
            logger.error(
                "version %d is specified for model '%s', but the version directory is not present",
                missing,
                config.name,
            )
    else:
        selected = list(on_disk)[-max(policy.latest.num_versions, 1) :]
    if not selected:
        raise ModelConfigError(
            f"at least one version must be available under the version policy of model "
            f"'{config.name}'"
        )
    return selected


def _complete_config(
    model_dir: Path, gpu_ids: Sequence[int], override: mc.ModelConfig | None = None
) -> mc.ModelConfig:
    config_path = model_dir / CONFIG_FILENAME
    if override is not None:
        config = mc.ModelConfig()
        config.CopyFrom(override)
        source = f"the config of the load request for {model_dir.name}"
    elif config_path.exists():
        config = load_config_file(config_path)
        source = str(config_path)
    else:
        config = mc.ModelConfig()
        source = f"{model_dir} (no {CONFIG_FILENAME}, auto-completed)"
    if config.name and config.name != model_dir.name:
        raise ModelConfigError(
            f"unexpected 'name' \"{config.name}\" in {source}: it must match the model "
            f'directory name "{model_dir.name}"'
        )
    config.name = model_dir.name
    _fill_backend_fields(config, model_dir)
    if config.platform != ENSEMBLE_PLATFORM and is_registered(config.backend):
        backend_class(config.backend).auto_complete_config(config, model_dir)
    normalize_config(config, gpu_ids)
    validate_config(config, source, gpu_ids)
    return config


def _fill_backend_fields(config: mc.ModelConfig, model_dir: Path) -> None:
    """Core's ``AutoCompleteBackendFields``: backend/platform/filename from config or files,
    as each backend describes itself."""
    if config.platform == ENSEMBLE_PLATFORM:
        return
    if not config.backend:
        if config.platform:
            backend = backend_for_platform(config.platform)
            if backend is None:
                raise ModelConfigError(
                    f"unsupported platform '{config.platform}' for model '{config.name}'"
                )
            config.backend = backend
        else:
            config.backend = _probe_backend(config, model_dir)
    if not is_registered(config.backend):
        return  # a C/C++ backend's library, looked for once the versions are known
    backend = backend_class(config.backend)
    if backend.platforms and config.platform not in ("", *backend.platforms):
        raise ModelConfigError(
            f"unexpected 'platform' and 'backend' pair for model '{config.name}', got: "
            f"'{config.platform}', '{config.backend}'"
        )
    if backend.platforms and not config.platform:
        config.platform = backend.platforms[0]
    if not config.default_model_filename:
        config.default_model_filename = backend.default_model_filename


def _probe_backend(config: mc.ModelConfig, model_dir: Path) -> str:
    probed = probe_order()
    for backend in probed:
        if config.default_model_filename == backend.default_model_filename:
            return backend.name
    versions = available_versions(model_dir)
    if versions and not config.default_model_filename:
        contents = {p.name for p in (model_dir / str(versions[0])).iterdir()}
        for backend in probed:
            if backend.default_model_filename in contents:
                return backend.name
    raise ModelConfigError(
        f"Could not determine backend for model '{config.name}' with no backend in model "
        "configuration. Expected model name of the form 'model.<backend_name>'."
    )


def _check_model_file(model: ModelVersion) -> None:
    if not model.version_dir.is_dir():
        raise ModelConfigError(
            f"version directory '{model.version_dir}' of model '{model.name}' is missing"
        )
    if not model.model_path.exists():
        raise ModelConfigError(
            f"unable to find '{model.model_path}' for model '{model.name}' version "
            f"{model.version} (default_model_filename '{model.config.default_model_filename}')"
        )


def _read_labels(model_dir: Path, config: mc.ModelConfig) -> dict[str, list[str]]:
    labels: dict[str, list[str]] = {}
    for output in config.output:
        if not output.label_filename:
            continue
        path = model_dir / output.label_filename
        try:
            labels[output.name] = path.read_text().splitlines()
        except OSError as err:
            raise ModelConfigError(
                f"failed to read label file '{path}' of output '{output.name}' of model "
                f"'{config.name}': {err.strerror}"
            ) from None
    return labels
