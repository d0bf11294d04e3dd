"""The memory budget's arithmetic: sizes, the budget setting, declared footprints, and which
models go (least recently used, idle, unpinned) so the requested ones fit."""

from __future__ import annotations

import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from cluster.memory_budget import (
    FOOTPRINT_PARAMETER,
    GPU_FOOTPRINT_PARAMETER,
    HEAD_NODE_RESOURCE,
    NODE_ID_LABEL,
    BudgetNode,
    GpuSlot,
    Resident,
    budget_bytes,
    budget_nodes,
    check_budget_setting,
    declared_footprint,
    gpu_budget_bytes,
    gpu_instances,
    gpu_slots,
    node_for,
    on_one_gpu,
    parse_bytes,
    pin_to_node,
    plan_evictions,
    slot_for,
)
from cluster.placement import placement_for, share_gpus

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


# ---------------------------------------------------------------------- the GPU budget


def test_each_declared_gpu_of_each_node_is_a_slot():
    nodes = [
        ("head", {"CPU": 2, HEAD_NODE_RESOURCE: 1}),
        ("w1", {"GPU": 2, "rayton_gpu_0": 1, "rayton_gpu_1": 1}),
        ("w2", {"GPU": 1, "rayton_gpu_0": 1, "rayton_gpu_x": 1}),
    ]
    slots = gpu_slots("2GB", nodes)
    assert [s.key for s in slots] == ["w1/gpu0", "w1/gpu1", "w2/gpu0"]
    assert {s.capacity for s in slots} == {2 * 10**9}


@pytest.mark.parametrize(
    ("setting", "reason"), [("40%", "does not report a GPU's memory"), ("0", "more than 0")]
)
def test_a_gpu_budget_is_a_size(setting, reason):
    with pytest.raises(ValueError, match=reason):
        gpu_budget_bytes(setting)


def _gpu_resident(name, slot, size, last_used, in_flight=0, pinned=False):
    return Resident(name, size, last_used, in_flight, pinned, slot)


def test_a_gpu_model_goes_where_it_fits_with_the_most_room():
    slots = [GpuSlot("w1", 0, 10 * MB), GpuSlot("w1", 1, 10 * MB), GpuSlot("w2", 0, 10 * MB)]
    residents = [
        _gpu_resident("a", "w1/gpu0", 8 * MB, 1.0),
        _gpu_resident("b", "w1/gpu1", 3 * MB, 2.0),
        _gpu_resident("c", "w2/gpu0", 5 * MB, 3.0),
    ]
    assert slot_for(slots, residents, 4 * MB).key == "w1/gpu1"
    assert slot_for(slots, residents, 7 * MB).key == "w1/gpu1"
    # Bytes given to a GPU for a model loading in the same batch count there.
    assert slot_for(slots, residents, 4 * MB, {"w1/gpu1": 3 * MB}).key == "w2/gpu0"


def test_when_no_gpu_has_room_the_one_with_the_oldest_idle_model_makes_it():
    slots = [GpuSlot("w1", 0, 10 * MB), GpuSlot("w2", 0, 10 * MB), GpuSlot("w2", 1, 10 * MB)]
    residents = [
        _gpu_resident("busy", "w1/gpu0", 9 * MB, 1.0, in_flight=2),
        _gpu_resident("member", "w2/gpu0", 9 * MB, 2.0, pinned=True),
        _gpu_resident("old", "w2/gpu1", 9 * MB, 3.0),
    ]
    chosen = slot_for(slots, residents, 5 * MB)
    assert chosen.key == "w2/gpu1"
    here = [r for r in residents if r.node == chosen.key]
    assert plan_evictions(here, 5 * MB, chosen.capacity).evict == ["old"]


def test_without_an_idle_model_anywhere_the_gpu_with_the_most_room():
    slots = [GpuSlot("w1", 0, 10 * MB), GpuSlot("w2", 0, 10 * MB)]
    residents = [
        _gpu_resident("x", "w1/gpu0", 9 * MB, 1.0, in_flight=1),
        _gpu_resident("y", "w2/gpu0", 7 * MB, 2.0, in_flight=1),
    ]
    assert slot_for(slots, residents, 5 * MB).key == "w2/gpu0"
    assert slot_for([], residents, 5 * MB) is None


GPU_MODEL = """
name: "g"
backend: "python"
max_batch_size: 4
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] } ]
instance_group [
  { name: "gpu" count: 2 kind: KIND_GPU gpus: [ 0, 1 ] },
  { name: "cpu" count: 1 kind: KIND_CPU }
]
parameters { key: "GPU_MEMORY_FOOTPRINT" value: { string_value: "1.5GB" } }
"""


def test_a_gpu_model_under_the_budget_runs_its_instances_on_one_gpu():
    config = text_format.Parse(GPU_MODEL, mc.ModelConfig())
    assert declared_footprint(config, GPU_FOOTPRINT_PARAMETER) == 1_500_000_000
    assert gpu_instances(config) == 2
    nodes = [{"GPU": 2, "rayton_gpu_0": 1, "rayton_gpu_1": 1}]
    assert len(placement_for(config, nodes).groups) == 3  # a deployment per listed GPU, + CPU
    placed = on_one_gpu(config, 1)
    assert list(config.instance_group[0].gpus) == [0, 1]  # the model's own config is kept
    groups = {g.name: g for g in placement_for(placed, nodes).groups}
    assert set(groups) == {"g.gpu.gpu1", "g.cpu"}
    assert groups["g.gpu.gpu1"].num_replicas == 2
    assert groups["g.gpu.gpu1"].ray_actor_options["resources"] == {"rayton_gpu_1": 0.5}
    # Under the budget each instance asks Ray for its bytes' share of the GPU's budget.
    packed = placement_for(placed, nodes)
    share_gpus(packed, 1.5e9 / 2 / 20e9)
    options = {g.name: g.ray_actor_options for g in packed.groups}
    assert options["g.gpu.gpu1"] == {
        "num_cpus": 0,
        "num_gpus": 0.0375,
        "resources": {"rayton_gpu_1": 0.0375},
    }
    assert "num_gpus" not in options["g.cpu"]
