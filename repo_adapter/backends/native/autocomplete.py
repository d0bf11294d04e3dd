"""Auto-complete for C/C++ backends, as Triton does it when it loads a model: the backend's
``TRITONBACKEND_ModelInitialize`` runs with ``TRITONBACKEND_ModelAutoCompleteConfig`` true and
may fill the config in with ``TRITONBACKEND_ModelSetConfig``.

rayton settles a model's config when it scans the repository (the index, metadata and
placement need it before any replica starts), so the scan runs that initialization once, in a
child process of its own: a backend that crashes there takes only the child, and its reason
makes the model UNAVAILABLE. The replicas then load the completed config. Results are kept
per library file, config and version, so rescans do not start the child again.

    python -m repo_adapter.backends.native.autocomplete   # an AutoCompleteRequest as JSON on
                                                          # stdin; the completed config out
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

from tritonclient.grpc import model_config_pb2 as mc

from repo_adapter.backends.base import ModelVersion
from repo_adapter.config import config_from_json, config_to_json_dict
from repo_adapter.errors import InferenceServerError, ModelConfigError

AUTO_COMPLETE_TIMEOUT_S = 120.0
_STDERR_TAIL = 2000  # characters of a failed child's output kept in the reason


@dataclasses.dataclass(frozen=True)
class AutoCompleteRequest:
    """What the child initializes: one model version on one backend library."""

    library: str
    backend: str
    model_name: str
    version: int
    model_dir: str
    config_json: str
    settings: dict[str, str]


_cache: dict[tuple, mc.ModelConfig] = {}
_cache_lock = threading.Lock()


def completed_config(version: ModelVersion) -> mc.ModelConfig:
    """``version``'s config as its backend completes it (unchanged when the backend leaves it).

    Raises:
        ModelConfigError: the backend failed to initialize the model, or left a config that
            is not one.
    """
    assert version.backend_file is not None
    library = version.backend_file
    key = (
        str(library),
        library.stat().st_mtime_ns,
        version.config.SerializeToString(deterministic=True),
        str(version.model_dir),
        version.version,
        tuple(sorted(version.backend_config.items())),
    )
    with _cache_lock:
        if key in _cache:
            return _copy(_cache[key])
    request = AutoCompleteRequest(
        library=str(library),
        backend=version.config.backend,
        model_name=version.name,
        version=version.version,
        model_dir=str(version.model_dir),
        config_json=json.dumps(config_to_json_dict(version.config)),
        settings=dict(version.backend_config),
    )
    completed = config_from_json(
        _run_child(request), f"the config backend '{request.backend}' completed"
    )
    with _cache_lock:
        _cache[key] = completed
    return _copy(completed)


def _copy(config: mc.ModelConfig) -> mc.ModelConfig:
    copied = mc.ModelConfig()
    copied.CopyFrom(config)
    return copied


def _run_child(request: AutoCompleteRequest) -> str:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)  # the child imports rayton
    try:
        done = subprocess.run(
            [sys.executable, "-m", __name__],
            input=json.dumps(dataclasses.asdict(request)),
            capture_output=True,
            text=True,
            timeout=AUTO_COMPLETE_TIMEOUT_S,
            env=env,
        )
    except subprocess.TimeoutExpired:
        raise ModelConfigError(
            f"backend '{request.backend}' did not initialize model '{request.model_name}' "
            f"within {AUTO_COMPLETE_TIMEOUT_S:g} s (auto-complete)"
        ) from None
    if done.returncode != 0:
        reason = done.stderr.strip()[-_STDERR_TAIL:] or f"exit code {done.returncode}"
        if done.returncode < 0:
            reason = f"the backend crashed (signal {-done.returncode}) {reason}".strip()
        raise ModelConfigError(reason)
    return done.stdout


def _initialize(request: AutoCompleteRequest) -> str:
    from repo_adapter.backends.native.host import NativeBackend, NativeModel

    settings = json.dumps({"cmdline": request.settings})
    backend = NativeBackend(Path(request.library), request.backend, settings)
    try:
        model = NativeModel(
            backend,
            request.model_name,
            request.version,
            Path(request.model_dir),
            request.config_json,
            auto_complete=True,
        )
        completed = model.config_json()
        model.finalize()
    finally:
        backend.unload()
    return completed


def main() -> int:
    request = AutoCompleteRequest(**json.loads(sys.stdin.read()))
    try:
        sys.stdout.write(_initialize(request))
    except InferenceServerError as err:
        sys.stderr.write(err.message)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
