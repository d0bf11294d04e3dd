"""Stand-ins for backend modules that may not exist yet, so scanning tests stay runnable.

Repository scanning only asks a backend for ``auto_complete_config``. The python backend
completes nothing for a ``model.py`` without an ``auto_complete_config`` hook (as in every
test model here), so a stub whose hook is a no-op scans such models exactly like the real one.
The real module is always preferred when it is importable.
"""

from __future__ import annotations

import contextlib
import importlib
import sys
import types
from collections.abc import Iterator

from repo_adapter.backends.base import Backend

PYTHON_BACKEND_MODULE = "repo_adapter.backends.python"


def _module_missing(name: str) -> bool:
    try:
        importlib.import_module(name)
    except ModuleNotFoundError as err:
        if err.name != name:
            raise
        return True
    return False


def _python_stub_module() -> types.ModuleType:
    module = types.ModuleType(PYTHON_BACKEND_MODULE, "test stand-in for the python backend")

    class PythonBackend(Backend):
        """Scan-only stand-in: loading or executing it is a test bug."""

        name = "python"

        def load(self) -> None:
            raise NotImplementedError("python backend stub cannot load models")

        async def execute(self, requests):
            raise NotImplementedError("python backend stub cannot execute")

    module.PythonBackend = PythonBackend
    return module


@contextlib.contextmanager
def python_backend_or_stub() -> Iterator[bool]:
    """Make ``repo_adapter.backends.python`` importable; yields True when it is the stub."""
    if not _module_missing(PYTHON_BACKEND_MODULE):
        yield False
        return
    sys.modules[PYTHON_BACKEND_MODULE] = _python_stub_module()
    try:
        yield True
    finally:
        sys.modules.pop(PYTHON_BACKEND_MODULE, None)
