"""The requests both servers receive for a model served by a C backend written here
(``tests/repo_adapter/backends/native_backends/scale.c``): the same ``libtriton_scale.so``
loaded by the reference tritonserver and by rayton's host of the backend API."""

from __future__ import annotations

from typing import Any

import numpy as np

from tests.conformance.driver import CaseRegistry, Target, TensorSpec
from tests.support.native_backends import SCALE_CONFIG

NATIVE_REGISTRY = CaseRegistry()
case = NATIVE_REGISTRY.case

MODEL = "doubler"
CONFIG = SCALE_CONFIG  # the model both servers load


def rows(*values: float, binary: bool = True) -> list[TensorSpec]:
    data = np.array(values, np.float32).reshape(-1, 1)
    return [TensorSpec("IN", data, "FP32", binary)]


@case("native_ready", "native", "model readiness of a C-backend model")
def _(t: Target) -> Any:
    return t.client.model_ready(MODEL)


@case("native_metadata", "native", "its metadata")
def _(t: Target) -> Any:
    return t.client.model_metadata(MODEL)


@case("native_config", "native", "its /config (the backend's own fields included)")
def _(t: Target) -> Any:
    return t.client.model_config(MODEL)


@case("native_infer", "native", "a batch of two rows through the backend")
def _(t: Target) -> Any:
    return t.client.infer(MODEL, rows(1.0, 2.0))


@case("native_infer_json", "native", "one row as JSON")
def _(t: Target) -> Any:
    return t.client.infer(MODEL, rows(3.5, binary=False))


@case("native_error", "native", "the backend's error for one request (its code and message)")
def _(t: Target) -> Any:
    return t.client.infer(MODEL, rows(-1.0))


@case("native_stats", "native", "statistics after the requests above")
def _(t: Target) -> Any:
    return t.client.statistics(MODEL)
