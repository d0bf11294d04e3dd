"""Triton's Python backend API (``triton_python_backend_utils``) for in-process Python models.

Importing this package registers :mod:`repo_adapter.python_backend.pb_utils` in
``sys.modules`` as ``triton_python_backend_utils``, so that model files can
``import triton_python_backend_utils as pb_utils`` exactly as under Triton. An already
registered module of that name (e.g. a test double) is left in place.

The serving layer installs its hooks through :func:`set_bls_dispatcher` and
:func:`set_model_repository_hook`.
"""

from __future__ import annotations

import sys

from repo_adapter.python_backend import pb_utils
from repo_adapter.python_backend.metrics import clear_metrics, collect_metrics
from repo_adapter.python_backend.runtime import (
    BlsDispatcher,
    ModelRepositoryHook,
    bind_event_loop,
    get_bls_dispatcher,
    get_model_repository_hook,
    set_bls_dispatcher,
    set_model_repository_hook,
)

MODULE_NAME = "triton_python_backend_utils"

sys.modules.setdefault(MODULE_NAME, pb_utils)

__all__ = [
    "MODULE_NAME",
    "BlsDispatcher",
    "ModelRepositoryHook",
    "bind_event_loop",
    "clear_metrics",
    "collect_metrics",
    "get_bls_dispatcher",
    "get_model_repository_hook",
    "pb_utils",
    "set_bls_dispatcher",
    "set_model_repository_hook",
]
