"""The memory budget's arithmetic: sizes, the budget setting, declared footprints, and which
models go (least recently used, idle, unpinned) so the requested ones fit."""

from __future__ import annotations

import pytest
from tritonclient.grpc import model_config_pb2 as mc

from cluster.memory_budget import (
    FOOTPRINT_PARAMETER,
    HEAD_NODE_RESOURCE,
    NODE_ID_LABEL,
    BudgetNode,
    Resident,
    budget_bytes,
    budget_nodes,
    check_budget_setting,
    declared_footprint,
    node_for,
    parse_bytes,
    pin_to_node,
    plan_evictions,
)

MB = 10**6


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("1000", 1000),
        ("500MB", 500 * MB),
        ("500 mb", 500 * MB),
        ("2GiB", 2 * 2**30),
        ("1.5G", 1_500_000_000),
        ("64Ki", 65536),
        ("0", 0),
        ("3B", 3),
    ],
)
def test_sizes(text, size):
    assert parse_bytes(text) == size


@pytest.mark.parametrize("text", ["", "MB", "-1", "12 parsecs", "1e9", "5%"])
def test_sizes_refused(text):
    with pytest.raises(ValueError, match="not a size in bytes"):
        parse_bytes(text)


def test_a_percentage_of_the_smallest_node():
    nodes = [{"memory": 10e9, "CPU": 4}, {"memory": 4e9}]
    assert budget_bytes("25%", nodes) == 1_000_000_000
    assert budget_bytes("300MB", nodes) == 300 * MB


@pytest.mark.parametrize(
    ("setting", "reason"),
    [("0", "more than 0"), ("0%", "above 0%"), ("120%", "at most 100%"), ("x%", "percentage")],
)
def test_budget_settings_refused(setting, reason):
    with pytest.raises(ValueError, match=reason):
        check_budget_setting(setting)


def test_a_percentage_needs_a_node_that_reports_memory():
    with pytest.raises(ValueError, match="no node reports its memory"):
        budget_bytes("10%", [])


def _config(footprint: str | None) -> mc.ModelConfig:
    config = mc.ModelConfig(name="m")
    if footprint is not None:
        config.parameters[FOOTPRINT_PARAMETER].string_value = footprint
    return config


def test_declared_footprint():
    assert declared_footprint(_config("120MB")) == 120 * MB
    assert declared_footprint(_config(None)) is None
    with pytest.raises(ValueError, match=FOOTPRINT_PARAMETER):
        declared_footprint(_config("lots"))


def test_nothing_goes_while_the_requested_models_fit():
    residents = [Resident("a", 40, last_used=1), Resident("b", 40, last_used=2)]
    plan = plan_evictions(residents, needed=20, capacity=100)
    assert plan.evict == [] and plan.fits


def test_least_recently_used_go_first_and_only_as_many_as_needed():
    residents = [
        Resident("newest", 30, last_used=30),
        Resident("oldest", 30, last_used=10),
        Resident("middle", 30, last_used=20),
    ]
    plan = plan_evictions(residents, needed=40, capacity=100)
    assert plan.evict == ["oldest"] and plan.fits
    plan = plan_evictions(residents, needed=70, capacity=100)
    assert plan.evict == ["oldest", "middle"] and plan.fits


def test_pinned_models_stay():
    residents = [
        Resident("member", 50, last_used=1, pinned=True),
        Resident("other", 50, last_used=2),
    ]
    assert plan_evictions(residents, needed=50, capacity=100).evict == ["other"]


def test_an_idle_model_goes_before_an_older_busy_one():
    residents = [Resident("busy", 50, last_used=1, in_flight=2), Resident("idle", 50, 2)]
    plan = plan_evictions(residents, needed=50, capacity=100)
    assert plan.evict == ["idle"] and plan.fits


def test_a_busy_model_that_must_go_is_waited_for():
    residents = [Resident("busy", 50, last_used=1, in_flight=2), Resident("idle", 50, 2)]
    plan = plan_evictions(residents, needed=100, capacity=100)
    assert plan.busy == ["busy"] and not plan.fits and plan.evict == ["idle"]


def test_a_model_larger_than_the_budget_still_loads_after_every_idle_one_went():
    residents = [Resident("a", 10, 1), Resident("busy", 10, 2, in_flight=1)]
    plan = plan_evictions(residents, needed=500, capacity=100)
    assert plan.evict == ["a"] and plan.fits


def test_models_that_take_nothing_are_never_picked():
    residents = [Resident("ensemble", 0, 1), Resident("a", 60, 2)]
    assert plan_evictions(residents, needed=60, capacity=100).evict == ["a"]


def test_each_node_has_its_own_budget_and_workers_come_before_the_head():
    nodes = budget_nodes(
        "50%",
        [
            ("h", {"memory": 8e9, HEAD_NODE_RESOURCE: 1}),
            ("a", {"memory": 4e9}),
            ("b", {"memory": 2e9}),
        ],
    )
    assert nodes == [
        BudgetNode("h", 4_000_000_000, head=True),
        BudgetNode("a", 2_000_000_000),
        BudgetNode("b", 1_000_000_000),
    ]
    assert node_for(nodes, {}).node_id == "a"  # the most room among the workers
    assert node_for(nodes, {"a": 1_500_000_000}).node_id == "b"
    assert node_for(nodes[:1], {"h": 10**12}).node_id == "h"  # no worker: the head
    assert node_for([], {}) is None


def test_a_replica_is_pinned_by_the_node_id_label():
    options = {"num_cpus": 0}
    pin_to_node(options, "abc")
    assert options == {"num_cpus": 0, "label_selector": {NODE_ID_LABEL: "abc"}}
