"""Version traffic policies without Ray: parsing the config's parameters and the API's JSON,
what a model may not use, and the splitter's exact shares."""

from __future__ import annotations

import itertools
from collections import Counter

import pytest
from tritonclient.grpc import model_config_pb2 as mc

from repo_adapter.config import parse_config_text, validate_config
from repo_adapter.errors import ModelConfigError, StatusCode
from repo_adapter.version_traffic import (
    ShadowShare,
    TrafficPolicy,
    TrafficPolicyError,
    VersionSplitter,
)

BASE = """
name: "m"
backend: "python"
max_batch_size: 8
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] } ]
"""


def config(parameters: dict[str, str], extra: str = "") -> mc.ModelConfig:
    entries = "\n".join(
        f'parameters {{ key: "{k}" value: {{ string_value: "{v}" }} }}'
        for k, v in parameters.items()
    )
    return parse_config_text(BASE + extra + entries, "config.pbtxt")


def test_the_config_parameters_set_weights_and_a_shadow():
    policy = TrafficPolicy.from_config(
        config(
            {
                "VERSION_WEIGHTS": "1:90, 2:10",
                "SHADOW_VERSION": "3",
                "SHADOW_PERCENT": "5",
            }
        )
    )
    assert policy == TrafficPolicy({1: 90.0, 2: 10.0}, ShadowShare(3, 5.0))
    assert TrafficPolicy.from_config(config({})).is_default


@pytest.mark.parametrize(
    "parameters, problem",
    [
        ({"VERSION_WEIGHTS": "1=90"}, "is not VERSION:WEIGHT"),
        ({"VERSION_WEIGHTS": "x:90"}, "is not a model version"),
        ({"VERSION_WEIGHTS": "1:ninety"}, "is not a number"),
        ({"VERSION_WEIGHTS": "1:-1,2:3"}, "must be >= 0"),
        ({"VERSION_WEIGHTS": "1:0,2:0"}, "at least one version weight"),
        ({"SHADOW_VERSION": "2"}, "go together"),
        ({"SHADOW_VERSION": "2", "SHADOW_PERCENT": "150"}, r"\(0, 100\]"),
    ],
)
def test_a_bad_parameter_fails_the_config_with_its_reason(parameters, problem):
    with pytest.raises(ModelConfigError, match=problem):
        validate_config(config(parameters), "config.pbtxt")


def test_sequence_decoupled_and_ensemble_models_refuse_what_they_cannot_follow():
    weights = {"VERSION_WEIGHTS": "1:1,2:1"}
    sequence = "sequence_batching { }\n"
    with pytest.raises(ModelConfigError, match="not supported for sequence models"):
        validate_config(config(weights, sequence), "config.pbtxt")
    decoupled = "model_transaction_policy { decoupled: true }\n"
    validate_config(config(weights, decoupled), "config.pbtxt")  # a split is fine
    shadow = {"SHADOW_VERSION": "2", "SHADOW_PERCENT": "10"}
    with pytest.raises(ModelConfigError, match="not supported for decoupled models"):
        validate_config(config(shadow, decoupled), "config.pbtxt")
    ensemble = mc.ModelConfig(name="e", platform="ensemble")
    with pytest.raises(TrafficPolicyError, match="not supported for ensembles"):
        TrafficPolicy({1: 1.0}).check(ensemble)


def test_the_api_json_round_trips_and_names_only_ready_versions():
    document = {"weights": {"1": 0, "2": 100}, "shadow": {"version": "3", "percent": 10}}
    policy = TrafficPolicy.from_json(document)
    assert policy == TrafficPolicy({1: 0.0, 2: 100.0}, ShadowShare(3, 10.0))
    assert TrafficPolicy.from_json(policy.to_json()) == policy
    policy.check(config({}), ready=[1, 2, 3])
    with pytest.raises(TrafficPolicyError, match="version 3 is not ready") as err:
        policy.check(config({}), ready=[1, 2])
    assert err.value.code == StatusCode.INVALID_ARG
    assert TrafficPolicy.from_json({}).is_default  # back to Triton's default


@pytest.mark.parametrize(
    "document",
    [
        [],
        {"weight": {}},
        {"weights": [1, 2]},
        {"weights": {"one": 1}},
        {"weights": {"1": True}},
        {"weights": {"1": "NaN"}},
        {"shadow": {"version": 2}},
        {"shadow": {"version": 2, "percent": 0}},
    ],
)
def test_the_api_refuses_a_malformed_policy(document):
    with pytest.raises(TrafficPolicyError):
        TrafficPolicy.from_json(document)


def test_the_split_is_exact_and_evenly_spread():
    splitter = VersionSplitter(TrafficPolicy({1: 90.0, 2: 10.0}), ready=[1, 2])
    picks = [splitter.pick() for _ in range(10_000)]
    assert Counter(picks) == {1: 9000, 2: 1000}
    # Version 2's turns come one in every ten, never bunched.
    positions = [i for i, v in enumerate(picks) if v == 2]
    assert {b - a for a, b in itertools.pairwise(positions)} == {10}


def test_versions_not_ready_are_left_out_and_none_ready_means_triton_default():
    splitter = VersionSplitter(TrafficPolicy({1: 50.0, 4: 50.0}), ready=[1, 2])
    assert {splitter.pick() for _ in range(10)} == {1}
    assert VersionSplitter(TrafficPolicy({4: 1.0}), ready=[1, 2]).pick() is None
    assert VersionSplitter(TrafficPolicy(), ready=[1, 2]).pick() is None


def test_the_shadow_gets_its_share_exactly():
    splitter = VersionSplitter(TrafficPolicy({1: 1.0}, ShadowShare(2, 12.5)), ready=[1, 2])
    copies = [splitter.shadow() for _ in range(800)]
    assert copies.count(2) == 100 and copies.count(None) == 700
    no_shadow = VersionSplitter(TrafficPolicy({1: 1.0}, ShadowShare(3, 50.0)), ready=[1, 2])
    assert {no_shadow.shadow() for _ in range(10)} == {None}  # version 3 is not ready here
