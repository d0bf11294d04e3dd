"""Where a backend rayton does not have itself is, found as Triton finds it, and the settings
it is started with.

For ``backend: "<name>"`` that names none of rayton's backends, Triton loads the C/C++
library ``libtriton_<name>.so`` (or the config's ``runtime`` library) from the model's
version directory, else the model's directory, else ``<backend directory>/<name>/``
(``--backend-directory``, ``/opt/tritonserver/backends`` by default); failing those, a
python-based backend, ``<backend directory>/<name>/model.py`` (``runtime: "model.py"`` asks
for it directly), served by the python backend for every model that names it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

# Triton's default --backend-directory.
DEFAULT_BACKEND_DIRECTORY = "/opt/tritonserver/backends"
# The file a python-based backend implements TritonPythonModel in.
PYTHON_BASED_MODEL_FILE = "model.py"
# What Triton's server puts in every backend's config beside --backend-config's settings.
_SERVER_SETTINGS = {"auto-complete-config": "true", "default-max-batch-size": "4"}


def parse_backend_configs(entries: Sequence[str]) -> dict[str, dict[str, str]]:
    """``--backend-config=<backend>,<setting>=<value>`` entries, by backend; ValueError for
    one not in that form."""
    configs: dict[str, dict[str, str]] = {}
    for entry in entries:
        backend, comma, setting = entry.partition(",")
        key, equals, value = setting.partition("=")
        if not (backend and comma and key and equals):
            raise ValueError(
                f"--backend-config option format is '<backend name>,<setting>=<value>', got "
                f"'{entry}'"
            )
        configs.setdefault(backend, {})[key] = value
    return configs


@dataclass(frozen=True)
class BackendSettings:
    """Where the backends rayton does not have are looked for last (``--backend-directory``)
    and the settings each is started with (``--backend-config``)."""

    directory: str = DEFAULT_BACKEND_DIRECTORY
    configs: Mapping[str, Mapping[str, str]] = field(default_factory=dict)

    @classmethod
    def from_flags(cls, directory: str, backend_config: Sequence[str] | None) -> BackendSettings:
        return cls(directory, parse_backend_configs(backend_config or ()))

    def cmdline(self, backend: str) -> dict[str, str]:
        """The ``cmdline`` object of ``backend``'s config (``TRITONBACKEND_BackendConfig``),
        as Triton's server fills it."""
        return {
            **_SERVER_SETTINGS,
            "backend-directory": self.directory,
            **self.configs.get(backend, {}),
        }


def is_python_based(path: Path) -> bool:
    """Whether a found backend file is a python-based backend's model file."""
    return path.suffix == ".py"


def library_name(backend: str, runtime: str = "") -> str:
    """The C/C++ library's file name: the config's ``runtime``, else ``libtriton_<name>.so``."""
    return runtime if runtime and not runtime.endswith(".py") else f"libtriton_{backend}.so"


def search_paths(
    backend: str,
    model_dir: Path,
    versions: Sequence[int],
    backend_directory: str,
    runtime: str = "",
) -> list[Path]:
    """Where the backend's file is looked for, in Triton's order."""
    backend_dir = Path(backend_directory) / backend if backend_directory else None
    if runtime.endswith(".py"):
        return [backend_dir / runtime] if backend_dir else []
    name = library_name(backend, runtime)
    paths = [model_dir / str(version) / name for version in versions]
    paths.append(model_dir / name)
    if backend_dir is not None:
        paths.append(backend_dir / name)
        if not runtime:
            paths.append(backend_dir / PYTHON_BASED_MODEL_FILE)
    return paths


def backend_file(
    backend: str,
    model_dir: Path,
    versions: Sequence[int],
    backend_directory: str,
    runtime: str = "",
) -> Path | None:
    """The first file found on :func:`search_paths` (resolved), or None."""
    for path in search_paths(backend, model_dir, versions, backend_directory, runtime):
        if path.is_file():
            return path.resolve()
    return None
