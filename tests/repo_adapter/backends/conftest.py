"""Fixtures shared by the backend tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from repo_adapter.backends.base import InstanceSpec
from repo_adapter.backends.python import PythonBackend
from repo_adapter.backends.python_stub import PythonStubBackend
from tests.repo_adapter.backends.test_python_stub import MODELS, model_version


@pytest.fixture
def load():
    """Load a model in a stub process; everything loaded is unloaded afterwards."""
    loaded: list[PythonStubBackend] = []

    def _load(name: str, repo: Path = MODELS) -> PythonStubBackend:
        instance = InstanceSpec(f"{name}_0", own_process=True)
        backend = PythonBackend.for_instance(model_version(name, repo), instance)
        assert isinstance(backend, PythonStubBackend)
        backend.load()
        loaded.append(backend)
        return backend

    yield _load
    for backend in loaded:
        backend.unload()
