"""Import a model's ``model.py`` as its own module, with its directory importable.

Triton runs every model instance in a separate stub process. Here every instance imports
``model.py`` under a unique module name, so instances and versions never share module state.
Sibling modules (``from helpers import x`` next to model.py) are importable while the model
file runs, because the version directory is on ``sys.path`` for the duration of the call. Such
siblings are cached in ``sys.modules`` under their plain names, so two models shipping
different ``helpers.py`` in one process see the first one imported.
"""

from __future__ import annotations

import contextlib
import importlib.util
import itertools
import re
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

MODEL_CLASS_NAME = "TritonPythonModel"

_counter = itertools.count()
_path_lock = threading.Lock()


class ModelFileError(Exception):
    """model.py cannot be read, compiled or imported, or defines no ``TritonPythonModel``."""


@contextlib.contextmanager
def model_search_path(directory: Path) -> Iterator[None]:
    """Put ``directory`` first on ``sys.path`` for the duration of the block."""
    entry = str(directory)
    with _path_lock:
        sys.path.insert(0, entry)
    try:
        yield
    finally:
        with _path_lock, contextlib.suppress(ValueError):
            sys.path.remove(entry)


def unique_module_name(*parts: object) -> str:
    """A module name no other import uses: ``_rayton_python_model_<parts>_<n>``."""
    tag = re.sub(r"\W", "_", "_".join(str(p) for p in parts))
    return f"_rayton_python_model_{tag}_{next(_counter)}"


def check_syntax(path: Path) -> str:
    """Read and compile model.py without running it; returns the source.

    Raises:
        ModelFileError: when the file cannot be read or has a syntax error.
    """
    try:
        source = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise ModelFileError(f"failed to read Python model file '{path}': {err}") from None
    try:
        compile(source, str(path), "exec")
    except SyntaxError as err:
        raise ModelFileError(
            f"failed to load Python model file '{path}': {type(err).__name__}: {err}"
        ) from None
    return source


def import_model_file(path: Path, module_name: str) -> ModuleType:
    """Execute ``path`` as module ``module_name`` (registered in ``sys.modules``).

    Raises:
        ModelFileError: with the exception type and message when the import fails.
    """
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise ModelFileError(f"failed to load Python model file '{path}': not importable")
    module = importlib.util.module_from_spec(spec)
    # Registered before running, as a regular import does: dataclasses, pickle and typing
    # look the defining module up by name while the file executes.
    sys.modules[module_name] = module
    try:
        with model_search_path(path.parent):
            spec.loader.exec_module(module)
    except (Exception, SystemExit) as err:
        sys.modules.pop(module_name, None)
        raise ModelFileError(
            f"failed to load Python model file '{path}': {type(err).__name__}: {err}"
        ) from err
    return module


def model_class(module: ModuleType, path: Path) -> type:
    """The ``TritonPythonModel`` class of an imported model file."""
    cls = getattr(module, MODEL_CLASS_NAME, None)
    if not isinstance(cls, type):
        raise ModelFileError(
            f"Python model file '{path}' does not define class '{MODEL_CLASS_NAME}'"
        )
    return cls


def forget_module(module_name: str) -> None:
    """Drop a model module from ``sys.modules`` (unload, or a throwaway auto-complete import)."""
    sys.modules.pop(module_name, None)
