"""Skips for a missing component, which CI turns into failures.

A developer's machine may lack the reference tritonserver or a runtime: those tests skip with
the reason. In CI (``CI`` set to true, as ``.ci/run`` and CI services set it) the project's own
set-up installs them, so a missing one is a broken set-up and fails the run instead of passing
green without the tests. Skips that depend on the machine (a GPU present or absent) are plain
``pytest.skip``; every remaining skip is listed by reason at the end of a run (``-rs``).
"""

from __future__ import annotations

import os

import pytest


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def missing(reason: str) -> None:
    """Skip for ``reason``, or fail in CI, where the set-up must have provided it."""
    if in_ci():
        pytest.fail(f"required in CI, missing: {reason}", pytrace=False)
    pytest.skip(reason)
