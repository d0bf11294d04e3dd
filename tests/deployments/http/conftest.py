"""The HTTP codec tests' JSON paths: a test module that uses ``json_backend`` (the codec
modules, through ``pytestmark``) runs each test with each path."""

from __future__ import annotations

import pytest

from deployments.http import wire

try:
    import orjson
except ImportError:  # the stdlib path is always tested; orjson only where installed
    orjson = None


@pytest.fixture(params=["stdlib"] + (["orjson"] if orjson else []))
def json_backend(request, monkeypatch):
    """Run every test with the stdlib JSON path and, where installed, the orjson one."""
    monkeypatch.setattr(wire, "_orjson", orjson if request.param == "orjson" else None)
    return request.param
