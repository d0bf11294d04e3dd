"""The sequences of the repository API both servers receive under explicit model control
(``--model-control-mode explicit --load-model '*'``), in order, over the conformance repository.

Each sequence leaves every model loaded as it found it, so the gRPC pass replays them from the
same state as the HTTP pass.

1. A member of an ensemble unloaded: the member and the ensemble are unknown models.
2. The member loaded again: the ensemble is back with it.
3. A load with a config override, a load without one, an unload and a load: the last load
   serves the repository's config.pbtxt again (the override is forgotten).
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from tests.conformance.driver import CaseRegistry, Target, TensorSpec

EXPLICIT_REGISTRY = CaseRegistry()
case = EXPLICIT_REGISTRY.case

MEMBER = "request_error"  # the second step of `pipeline`
PIPELINE_INPUT = [TensorSpec("IN", np.array([1.0, 2.0, 3.0], np.float32), "FP32")]
# `versioned` as its config.pbtxt has it, limited to version 1.
VERSION_1_ONLY = json.dumps(
    {
        "backend": "python",
        "max_batch_size": 0,
        "version_policy": {"specific": {"versions": [1]}},
        "input": [{"name": "IN", "data_type": "TYPE_FP32", "dims": [-1]}],
        "output": [{"name": "OUT", "data_type": "TYPE_FP32", "dims": [-1]}],
        "instance_group": [{"kind": "KIND_CPU", "count": 1}],
    }
)


def readiness(t: Target, model: str, versions: tuple[str, ...] = ("",)) -> dict[str, Any]:
    return {version or "default": t.client.model_ready(model, version) for version in versions}


# ------------------------------------------------------------------ 1. a member unloaded


@case("member_unload", "explicit", f"unload_model('{MEMBER}'), a step of the ensemble")
def _(t: Target) -> Any:
    return t.client.unload_model(MEMBER)


@case("member_unloaded[member]", "explicit", "the unloaded member: infer, metadata, config")
def _(t: Target) -> Any:
    return {
        "infer": t.client.infer(MEMBER, PIPELINE_INPUT),
        "metadata": t.client.model_metadata(MEMBER),
        "config": t.client.model_config(MEMBER),
        "ready": t.client.model_ready(MEMBER),
    }


@case("member_unloaded[ensemble]", "explicit", "the ensemble whose member is unloaded")
def _(t: Target) -> Any:
    return {
        "infer": t.client.infer("pipeline", PIPELINE_INPUT),
        "ready": t.client.model_ready("pipeline"),
    }


@case("member_unloaded[index]", "explicit", "the index after the member's unload")
def _(t: Target) -> Any:
    return t.client.repository_index()


# ------------------------------------------------------------------ 2. the member back


@case("member_load", "explicit", f"load_model('{MEMBER}') again")
def _(t: Target) -> Any:
    return t.client.load_model(MEMBER)


@case("member_loaded[ensemble]", "explicit", "the ensemble after its member's load")
def _(t: Target) -> Any:
    return {
        "ready": t.client.model_ready("pipeline"),
        "infer": t.client.infer("pipeline", PIPELINE_INPUT),
    }


@case("member_loaded[index]", "explicit", "the index after the member's load")
def _(t: Target) -> Any:
    return t.client.repository_index()


# ------------------------------------------------------------------ 3. an override forgotten


@case("override_load", "explicit", "load_model('versioned', config=<version 1 only>)")
def _(t: Target) -> Any:
    return {
        "load": t.client.load_model("versioned", config=VERSION_1_ONLY),
        "ready": readiness(t, "versioned", ("1", "2")),
    }


@case("override_then_plain_load", "explicit", "load_model('versioned') with no override")
def _(t: Target) -> Any:
    return {
        "load": t.client.load_model("versioned"),
        "ready": readiness(t, "versioned", ("1", "2")),
    }


@case("override_unload", "explicit", "unload_model('versioned'), then the index")
def _(t: Target) -> Any:
    return {"unload": t.client.unload_model("versioned"), "index": t.client.repository_index()}


@case("override_forgotten", "explicit", "load_model('versioned') after the unload")
def _(t: Target) -> Any:
    return {
        "load": t.client.load_model("versioned"),
        "ready": readiness(t, "versioned", ("1", "2")),
        "pipeline_ready": t.client.model_ready("pipeline"),
        "index": t.client.repository_index(),
    }


@case(
    "override_forgotten[ready index]",
    "explicit",
    "POST /v2/repository/index {ready: true}",
    raw=True,
)
def _(t: Target) -> Any:
    return t.raw("POST", "/v2/repository/index", {"ready": True})
