"""The requests both servers receive for models served by backends written here: the C test
backend ``tests/repo_adapter/backends/native_backends/scale.c`` and the example C++
pre-processing backend ``examples/custom_backend/imgprep.cc`` (built with CMake); the same
``.so`` files loaded by the reference tritonserver and by rayton's host of the backend API."""

from __future__ import annotations

from typing import Any

import numpy as np

from tests.conformance.driver import CaseRegistry, Target, TensorSpec
from tests.support.native_backends import SCALE_CONFIG

NATIVE_REGISTRY = CaseRegistry()
case = NATIVE_REGISTRY.case

MODEL = "doubler"
CONFIG = SCALE_CONFIG  # the model both servers load
IMGPREP = "imgprep"  # examples/custom_backend/models/imgprep


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


@case("native_infer", "native", "a batch of two rows, scaled by the backend config's factor")
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


def image(*shape: int) -> list[TensorSpec]:
    data = np.random.default_rng(sum(shape)).integers(0, 256, shape, dtype=np.uint8)
    return [TensorSpec("IMAGE", data, "UINT8", True)]


@case("native_imgprep_config", "native", "the C++ example backend's model: /config")
def _(t: Target) -> Any:
    return t.client.model_config(IMGPREP)


@case("native_imgprep_infer", "native", "a 5x7 image resized to 64x64 and normalised")
def _(t: Target) -> Any:
    return t.client.infer(IMGPREP, image(1, 5, 7, 3))


@case("native_imgprep_two_images", "native", "two 48x32 images in one request")
def _(t: Target) -> Any:
    return t.client.infer(IMGPREP, image(2, 48, 32, 3))


@case("native_imgprep_error", "native", "an image of height 0: the backend's error")
def _(t: Target) -> Any:
    return t.client.infer(IMGPREP, image(1, 0, 5, 3))


@case("native_imgprep_stats", "native", "its statistics after the requests above")
def _(t: Target) -> Any:
    return t.client.statistics(IMGPREP)


# A python-based backend (``<backend directory>/scaling/model.py``) serving two models, each
# scaling by the factor in its own version directory (tests.conformance.test_native_backends).
SCALING_MODELS = {"scaled_twice": "2", "scaled_thrice": "3"}


@case("python_based_config", "native", "a python-based backend's model: /config")
def _(t: Target) -> Any:
    return t.client.model_config("scaled_twice")


@case("python_based_infer", "native", "its model scaling by the factor in its own files")
def _(t: Target) -> Any:
    return t.client.infer("scaled_twice", rows(1.0, 2.5))


@case("python_based_other_model", "native", "another model of the same backend, its own factor")
def _(t: Target) -> Any:
    return t.client.infer("scaled_thrice", rows(1.0, 2.5))


@case("python_based_stats", "native", "statistics of a python-based backend's model")
def _(t: Target) -> Any:
    return t.client.counted_statistics("scaled_thrice", inferences=2)


# A model whose config.pbtxt names only the backend: scale.c built with AUTOCOMPLETE fills the
# rest in through TRITONBACKEND_ModelSetConfig (tests.conformance.test_native_backends).
AUTOCOMPLETED = "autocompleted"


@case("native_autocomplete_config", "native", "a config the backend completed: /config")
def _(t: Target) -> Any:
    return t.client.model_config(AUTOCOMPLETED)


@case("native_autocomplete_metadata", "native", "its metadata")
def _(t: Target) -> Any:
    return t.client.model_metadata(AUTOCOMPLETED)


@case("native_autocomplete_infer", "native", "an inference on the completed config")
def _(t: Target) -> Any:
    return t.client.infer(AUTOCOMPLETED, rows(4.0))
