"""Replica recycling's parameters and when replicas are due (cluster/recycling.py), and how
placement treats a recycled model."""

from __future__ import annotations

import pytest

from cluster.placement import placement_for
from cluster.recycling import ReplicaRecycling, replica_recycling
from repo_adapter.config import normalize_config, parse_config_text


def config(parameters: dict[str, str], extra: str = ""):
    entries = " ".join(
        f'parameters {{ key: "{k}" value: {{ string_value: "{v}" }} }}'
        for k, v in parameters.items()
    )
    parsed = parse_config_text(f'name: "m" backend: "python" {extra} {entries}', "test")
    normalize_config(parsed)
    return parsed


def test_age_and_request_limits_from_the_parameters():
    assert replica_recycling(config({})) is None
    assert replica_recycling(config({"RECYCLE_AFTER_SECONDS": "30"})) == ReplicaRecycling(30.0)
    both = {"RECYCLE_AFTER_SECONDS": "0.5", "RECYCLE_AFTER_REQUESTS": "1000"}
    assert replica_recycling(config(both)) == ReplicaRecycling(0.5, 1000)


@pytest.mark.parametrize(
    "parameters, problem",
    [
        ({"RECYCLE_AFTER_SECONDS": "soon"}, "must be a number > 0"),
        ({"RECYCLE_AFTER_SECONDS": "0"}, "must be a number > 0"),
        ({"RECYCLE_AFTER_SECONDS": "inf"}, "must be a number > 0"),
        ({"RECYCLE_AFTER_REQUESTS": "1.5"}, "must be an integer >= 1"),
        ({"RECYCLE_AFTER_REQUESTS": "0"}, "must be an integer >= 1"),
    ],
)
def test_a_bad_value_is_refused_with_the_reason(parameters, problem):
    with pytest.raises(ValueError, match=problem):
        placement_for(config(parameters))


def test_due_on_either_limit():
    policy = ReplicaRecycling(max_age_s=30.0, max_requests=100)
    assert not policy.due(age_s=29.9, most_requests=99)
    assert policy.due(age_s=30.0, most_requests=0)
    assert policy.due(age_s=1.0, most_requests=100)
    assert not ReplicaRecycling(max_requests=100).due(age_s=1e9, most_requests=0)


def test_a_recycled_model_gets_an_application_of_its_own():
    placement = placement_for(config({"RECYCLE_AFTER_SECONDS": "30"}))
    assert placement.isolated and placement.recycling == ReplicaRecycling(30.0)
    assert not placement_for(config({})).isolated


def test_a_sequence_model_is_not_recycled_and_says_why():
    placement = placement_for(config({"RECYCLE_AFTER_SECONDS": "30"}, "sequence_batching { }"))
    assert placement.recycling is None
    assert any("not recycled" in note for note in placement.notes)
