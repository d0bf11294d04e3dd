"""The requests both servers receive for the response cache: a python model whose config
enables it, served with ``--cache-config local,size=1048576``: misses, hits, the outputs a
hit answers, the statistics and the cache's metrics."""

from __future__ import annotations

from typing import Any

import numpy as np

from tests.conformance.cases import scrape_metrics
from tests.conformance.driver import CaseRegistry, OutputSpec, Target, TensorSpec

CACHE_REGISTRY = CaseRegistry()
case = CACHE_REGISTRY.case

CACHED_MODEL = "cached_pair"
PARTIAL_MODEL = "cached_partial"  # the same model, for the case that runs again in rayton
CACHE_CONFIG = ["local,size=1048576"]
CACHED_CONFIG = """\
name: "cached_pair"
backend: "python"
max_batch_size: 8
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [
  { name: "DOUBLE" data_type: TYPE_FP32 dims: [ 4 ] },
  { name: "PLUS" data_type: TYPE_FP32 dims: [ 4 ] }
]
response_cache { enable: true }
"""
# Produces only the outputs a request names (all of them when it names none), as models
# that read requested_output_names() do.
CACHED_MODEL_PY = """\
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            value = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            wanted = request.requested_output_names() or ["DOUBLE", "PLUS"]
            made = {"DOUBLE": value * 2, "PLUS": value + 1}
            responses.append(
                pb_utils.InferenceResponse([pb_utils.Tensor(n, made[n]) for n in wanted])
            )
        return responses
"""


# An ensemble whose config enables the cache, over a member whose config does not: a hit on
# the ensemble runs no step.
ENSEMBLE_MODEL = "cached_chain"
MEMBER_MODEL = "plain_pair"
ENSEMBLE_CONFIG = """\
name: "cached_chain"
platform: "ensemble"
max_batch_size: 8
input [ { name: "X" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ 4 ] } ]
response_cache { enable: true }
ensemble_scheduling {
  step [
    { model_name: "plain_pair" model_version: -1
      input_map { key: "IN" value: "X" } output_map { key: "DOUBLE" value: "Y" } }
  ]
}
"""


def value(number: float) -> list[TensorSpec]:
    return [TensorSpec("IN", np.full((1, 4), number, np.float32), "FP32")]


def infer(t: Target, number: float, outputs: tuple[str, ...] = (), model=CACHED_MODEL) -> Any:
    requested = [OutputSpec(name) for name in outputs] or None
    return t.client.infer(model, value(number), requested)


@case("cache_config", "cache", "/config of a model with the response cache enabled")
def _(t: Target) -> Any:
    return t.client.model_config(CACHED_MODEL)


@case("cache_miss", "cache", "a first request: run, its response kept")
def _(t: Target) -> Any:
    return infer(t, 1.0)


@case("cache_hit", "cache", "the same request again: answered from the cache")
def _(t: Target) -> Any:
    return infer(t, 1.0)


@case("cache_hit_named", "cache", "the same input naming one output the entry holds")
def _(t: Target) -> Any:
    return infer(t, 1.0, ("PLUS",))


@case("cache_other_input", "cache", "another input: a miss")
def _(t: Target) -> Any:
    return infer(t, 2.0)


@case("cache_stats", "cache", "statistics: hits and misses, executions only for misses")
def _(t: Target) -> Any:
    return t.client.counted_statistics(CACHED_MODEL, 2)


@case("cache_ensemble", "cache", "an ensemble with the cache: a miss, then a hit")
def _(t: Target) -> Any:
    inputs = [TensorSpec("X", np.full((1, 4), 4.0, np.float32), "FP32")]
    return [t.client.infer(ENSEMBLE_MODEL, inputs), t.client.infer(ENSEMBLE_MODEL, inputs)]


@case("cache_ensemble_stats", "cache", "statistics of the ensemble and of its member")
def _(t: Target) -> Any:
    return [t.client.statistics(ENSEMBLE_MODEL), t.client.counted_statistics(MEMBER_MODEL, 1)]


@case("cache_metrics_families", "cache", "/metrics: the cache's families", raw=True)
def _(t: Target) -> Any:
    return {
        name: {"type": family["type"], "labels": family["labels"]}
        for name, family in scrape_metrics(t).items()
        if name.startswith("nv_cache")
    }


@case("cache_metrics_counts", "cache", "/metrics: the cache's counts", raw=True)
def _(t: Target) -> Any:
    observed: dict[str, Any] = {}
    for name, family in scrape_metrics(t).items():
        if not name.startswith("nv_cache"):
            continue
        for labels, number in family["samples"].items():
            if sample_model(labels) == PARTIAL_MODEL:
                continue  # its counts differ by design (cache_partial_entry)
            # Durations, summaries' quantiles and utilization vary run to run.
            timed = "duration" in name or "summary" in name or name == "nv_cache_util"
            observed[f"{name}{{{labels}}}"] = number > 0 if timed else number
    return observed


def sample_model(labels: str) -> str:
    return dict(part.split("=", 1) for part in labels.split(",") if "=" in part).get("model", "")


@case("cache_partial_entry", "cache", "an entry made for one output, then the other asked")
def _(t: Target) -> Any:
    return [
        infer(t, 3.0, ("DOUBLE",), PARTIAL_MODEL),
        infer(t, 3.0, ("PLUS",), PARTIAL_MODEL),
    ]
