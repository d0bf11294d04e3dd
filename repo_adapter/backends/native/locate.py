"""Where a model's C/C++ backend library is, found as Triton finds it.

For ``backend: "<name>"`` that names no backend rayton has, Triton loads
``libtriton_<name>.so`` from the model's version directory, else the model's directory, else
``<backend directory>/<name>/`` (``--backend-directory``, ``/opt/tritonserver/backends`` by
default).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

# Triton's default --backend-directory.
DEFAULT_BACKEND_DIRECTORY = "/opt/tritonserver/backends"


def library_name(backend: str) -> str:
    return f"libtriton_{backend}.so"


def search_paths(
    backend: str, model_dir: Path, versions: Sequence[int], backend_directory: str
) -> list[Path]:
    """Where ``libtriton_<backend>.so`` is looked for, in Triton's order."""
    name = library_name(backend)
    paths = [model_dir / str(version) / name for version in versions]
    paths.append(model_dir / name)
    if backend_directory:
        paths.append(Path(backend_directory) / backend / name)
    return paths


def backend_library(
    backend: str, model_dir: Path, versions: Sequence[int], backend_directory: str
) -> Path | None:
    """The first library found on :func:`search_paths` (resolved), or None."""
    for path in search_paths(backend, model_dir, versions, backend_directory):
        if path.is_file():
            return path.resolve()
    return None
