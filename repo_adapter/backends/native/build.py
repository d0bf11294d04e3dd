"""Building rayton's backend host (``libtritonserver.so``) and C/C++ backends with the
machine's compiler (``CC``, default ``cc``; ``CXX``, default ``c++``, for C++ sources).

``python -m repo_adapter.backends.native.build`` (run by ``make setup``) builds the host into
:data:`HOST_DIR`; backends link against it as against Triton's ``libtritonserver.so``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

SOURCE_DIR = Path(__file__).parent
HOST_DIR = SOURCE_DIR / "build"
HOST_LIBRARY = "libtritonserver.so"
HOST_SOURCES = (SOURCE_DIR / "rayton_host.c",)


class BuildError(RuntimeError):
    """The compiler is missing or refused a source; the message carries its output."""


def compiler(cplusplus: bool = False) -> str:
    """The C (or C++) compiler to use; BuildError when the machine has none."""
    name = os.environ.get("CXX", "c++") if cplusplus else os.environ.get("CC", "cc")
    found = shutil.which(name)
    if found is None:
        raise BuildError(
            f"no {'C++' if cplusplus else 'C'} compiler '{name}' on this machine: native "
            "backends need one (install gcc or clang, or set CC / CXX)"
        )
    return found


def _run(command: list[str]) -> None:
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise BuildError(f"{' '.join(command)} failed:\n{done.stderr.strip()}")


def build_host(out_dir: Path = HOST_DIR) -> Path:
    """Compile the host library into ``out_dir``; its path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / HOST_LIBRARY
    _run(
        [
            compiler(),
            "-shared",
            "-fPIC",
            "-O2",
            "-std=c11",
            "-Wall",
            "-Wextra",
            "-fvisibility=hidden",
            f"-Wl,-soname,{HOST_LIBRARY}",
            "-o",
            str(target),
            *map(str, HOST_SOURCES),
            "-ldl",
            "-lpthread",
        ]
    )
    return target


def host_library() -> Path:
    """The built host library; BuildError naming the step that builds it when it is missing."""
    target = HOST_DIR / HOST_LIBRARY
    if not target.exists():
        raise BuildError(
            f"{target} is not built: run `make setup` (or `python -m "
            "repo_adapter.backends.native.build`)"
        )
    return target


def build_backend(
    sources: Sequence[Path], name: str, out_dir: Path, defines: Sequence[str] = ()
) -> Path:
    """Compile ``libtriton_<name>.so`` from ``sources`` against rayton's declarations
    (``triton_abi.h``) and link it to the host as a backend links to ``libtritonserver.so``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / f"libtriton_{name}.so"
    cplusplus = any(Path(s).suffix in (".cc", ".cpp", ".cxx") for s in sources)
    host = host_library()
    _run(
        [
            compiler(cplusplus),
            "-shared",
            "-fPIC",
            "-O2",
            "-Wall",
            *(f"-D{define}" for define in defines),
            f"-I{SOURCE_DIR}",
            "-o",
            str(target),
            *map(str, sources),
            f"-L{host.parent}",
            "-ltritonserver",
        ]
    )
    return target


def main() -> int:
    try:
        print(build_host())
    except BuildError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
