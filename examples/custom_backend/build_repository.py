"""Build the example C++ backend with CMake and lay out a repository that serves it.

Usage::

    python -m examples.custom_backend.build_repository [--output DIR] [--build-dir DIR]

The article's flow, scripted: configure and build ``imgprep.cc`` with CMake against rayton's
backend API (``make setup`` builds ``libtritonserver.so`` first), then write a repository
holding the ``imgprep`` model (``backend: "imgprep"``, its library installed into the model's
directory), the ``imgprep_pipeline`` ensemble and the example ``image_classifier_onnx`` it
feeds (``make examples`` generates it). Each command is printed as it runs.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from examples.generate_repository import DEFAULT_OUTPUT as EXAMPLE_REPOSITORY
from repo_adapter.backends.native.build import BuildError, host_library

SOURCE_DIR = Path(__file__).resolve().parent
MODELS_DIR = SOURCE_DIR / "models"
CLASSIFIER = "image_classifier_onnx"
DEFAULT_OUTPUT = Path("custom_backend_repository")
DEFAULT_BUILD_DIR = Path("build") / "imgprep"


def _run(command: list[str]) -> None:
    print("+ " + " ".join(command), flush=True)
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise BuildError(f"{' '.join(command)} failed:\n{done.stdout}{done.stderr}".strip())


def build_library(build_dir: Path) -> Path:
    """Configure and build ``libtriton_imgprep.so`` with CMake in ``build_dir``; its path."""
    host_library()  # a clear error naming `make setup` when the host is not built
    if shutil.which("cmake") is None:
        raise BuildError("cmake is not installed: the example backend is built with CMake")
    _run(["cmake", "-S", str(SOURCE_DIR), "-B", str(build_dir)])
    _run(["cmake", "--build", str(build_dir)])
    return build_dir / "libtriton_imgprep.so"


def build_repository(output: Path, build_dir: Path) -> Path:
    """Build the backend and write the repository at ``output``; the library's path."""
    classifier = EXAMPLE_REPOSITORY / CLASSIFIER
    if not (classifier / "1" / "model.onnx").exists():
        raise BuildError(f"{classifier} is missing: run `make examples` first")
    build_library(build_dir)
    for model in MODELS_DIR.iterdir():
        shutil.copytree(model, output / model.name, dirs_exist_ok=True)
        (output / model.name / "1").mkdir(exist_ok=True)  # Triton needs a version directory
    shutil.copytree(classifier, output / CLASSIFIER, dirs_exist_ok=True)
    _run(["cmake", "--install", str(build_dir), "--prefix", str(output)])
    return output / "imgprep" / "libtriton_imgprep.so"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help="repository to write")
    parser.add_argument("--build-dir", type=Path, default=DEFAULT_BUILD_DIR, help="CMake's")
    args = parser.parse_args(argv)
    try:
        library = build_repository(args.output, args.build_dir)
    except BuildError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print(f"built {library}\nserve it: rayton serve --model-repository {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
