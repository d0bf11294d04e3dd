"""Instance groups -> replica groups (Serve deployments) and Ray resources."""

from __future__ import annotations

import pytest

from cluster.placement import (
    DEFAULT_CPU_INSTANCE_NUM_CPUS,
    ENSEMBLE_MAX_ONGOING_REQUESTS,
    MIN_MAX_ONGOING_REQUESTS,
    declared_gpu_resources,
    gpu_resource,
    placement_for,
)
from repo_adapter.config import normalize_config, parse_config_text

# Two nodes with two GPUs each, declaring the per-GPU resources (as `rayton cluster` does).
PINNABLE = [
    {"CPU": 4, "GPU": 2, gpu_resource(0): 1, gpu_resource(1): 1},
    {"CPU": 4, "GPU": 2, gpu_resource(0): 1, gpu_resource(1): 1},
]
# The same GPUs without the per-GPU resources (a plain `ray start --num-gpus 2`).
UNPINNABLE = [{"CPU": 4, "GPU": 2}, {"CPU": 4, "GPU": 2}]


def config(text: str, name: str = "m"):
    parsed = parse_config_text(f'name: "{name}" backend: "python" ' + text, "test")
    normalize_config(parsed, gpu_ids=[0, 1])
    return parsed


def test_cpu_group_count_becomes_replicas():
    placement = placement_for(config("instance_group [ { kind: KIND_CPU count: 3 } ]"))
    assert not placement.routed and not placement.uses_gpu
    group = placement.only
    assert group.name == "m" and group.num_replicas == 3 and group.instance_kind == "CPU"
    assert group.ray_actor_options == {"num_cpus": DEFAULT_CPU_INSTANCE_NUM_CPUS}
    assert group.max_ongoing_requests == MIN_MAX_ONGOING_REQUESTS
    assert group.gpu_memory_fraction == 0 and group.pinned_gpu is None


def test_gpu_group_packs_count_replicas_per_gpu_when_gpus_cannot_be_pinned():
    placement = placement_for(
        config("instance_group [ { kind: KIND_GPU count: 4 gpus: [ 0, 1 ] } ]"), UNPINNABLE
    )
    group = placement.only
    assert group.num_replicas == 8 and group.instance_kind == "GPU"
    assert group.ray_actor_options == {"num_cpus": 0, "num_gpus": 0.25}
    assert group.gpu_memory_fraction == 0.25
    assert placement.notes == []  # every GPU of a node: nothing to pin


def test_gpu_group_is_a_deployment_per_pinned_gpu():
    placement = placement_for(
        config("instance_group [ { name: 'g' kind: KIND_GPU count: 2 gpus: [ 0, 1 ] } ]"),
        PINNABLE,
    )
    assert placement.routed and placement.notes == []
    assert [g.name for g in placement.groups] == ["m.g.gpu0", "m.g.gpu1"]
    for gpu, group in enumerate(placement.groups):
        assert group.pinned_gpu == gpu and group.num_replicas == 2
        assert group.group_name == "g"
        assert group.ray_actor_options == {
            "num_cpus": 0,
            "num_gpus": 0.5,
            "resources": {f"rayton_gpu_{gpu}": 0.5},
        }
        assert group.gpu_memory_fraction == 0.5


def test_one_pinned_gpu_is_one_deployment_named_after_the_model():
    placement = placement_for(
        config("instance_group [ { kind: KIND_GPU count: 3 gpus: [ 1 ] } ]"), PINNABLE
    )
    group = placement.only
    assert group.name == "m" and group.pinned_gpu == 1 and group.num_replicas == 3
    assert group.ray_actor_options["resources"] == {"rayton_gpu_1": 0.3333}


def test_a_subset_of_gpus_that_cannot_be_pinned_is_said():
    placement = placement_for(
        config("instance_group [ { name: 'g' kind: KIND_GPU count: 1 gpus: [ 1 ] } ]"),
        UNPINNABLE,
    )
    assert placement.only.pinned_gpu is None
    assert placement.notes == [
        "instance group 'g' lists GPUs [1], but the cluster declares no rayton_gpu_<i> "
        "resource for its GPUs: Ray picks the GPU of each of its 1 replicas"
    ]


def test_cpu_and_gpu_groups_are_routed_groups_of_their_own():
    placement = placement_for(
        config(
            "instance_group [ { name: 'c' kind: KIND_CPU count: 2 },"
            " { name: 'g' kind: KIND_GPU count: 1 gpus: [ 0 ] } ]"
        ),
        PINNABLE,
    )
    assert placement.routed and placement.uses_gpu
    cpu, gpu = placement.groups
    assert (cpu.name, cpu.instance_kind, cpu.num_replicas) == ("m.c", "CPU", 2)
    assert (gpu.name, gpu.instance_kind, gpu.pinned_gpu) == ("m.g.gpu0", "GPU", 0)
    assert placement.router_options()["ray_actor_options"] == {"num_cpus": 0}


def test_empty_gpus_means_every_gpu():
    placement = placement_for(config("instance_group [ { kind: KIND_GPU count: 1 } ]"), PINNABLE)
    assert [g.pinned_gpu for g in placement.groups] == [0, 1]


def test_cpu_groups_share_one_deployment():
    placement = placement_for(
        config(
            "instance_group [ { name: 'a' kind: KIND_CPU count: 2 },"
            " { name: 'b' kind: KIND_MODEL count: 3 } ]"
        )
    )
    assert placement.only.num_replicas == 5 and placement.only.group_name == "a"


def test_passive_groups_get_no_replicas():
    placement = placement_for(
        config(
            "instance_group [ { name: 'a' kind: KIND_CPU count: 2 },"
            " { name: 'p' kind: KIND_CPU count: 5 passive: true } ]"
        )
    )
    assert placement.only.num_replicas == 2


def test_declared_gpu_resources_are_read_from_every_node():
    nodes = [{"CPU": 1}, {"GPU": 1, gpu_resource(0): 1}, {"GPU": 2, gpu_resource(1): 1}]
    assert declared_gpu_resources(nodes) == {"rayton_gpu_0", "rayton_gpu_1"}


def test_large_batches_raise_the_in_flight_cap():
    placement = placement_for(config("max_batch_size: 64 instance_group [ { count: 1 } ]"))
    assert placement.only.max_ongoing_requests == 4 * 64


def test_ensembles_take_no_cpu():
    placement = placement_for(config('platform: "ensemble"'))
    group = placement.only
    assert group.num_replicas == 1
    assert group.ray_actor_options == {"num_cpus": 0}
    assert group.max_ongoing_requests == ENSEMBLE_MAX_ONGOING_REQUESTS
    assert group.deployment_options()["num_replicas"] == 1


AUTOSCALED = (
    'parameters { key: "AUTOSCALING_CONFIG" value: { string_value: '
    '\'{"min_replicas": 1, "max_replicas": 4, "target_ongoing_requests": 8}\' } } '
)


def test_autoscaling_config_parameter_replaces_the_fixed_count():
    placement = placement_for(config(AUTOSCALED + "instance_group [ { kind: KIND_CPU count: 2 } ]"))
    options = placement.only.deployment_options()
    assert "num_replicas" not in options
    assert options["autoscaling_config"] == {
        "initial_replicas": 2,
        "min_replicas": 1,
        "max_replicas": 4,
        "target_ongoing_requests": 8,
    }


def test_the_initial_count_stays_within_the_autoscaling_bounds():
    placement = placement_for(config(AUTOSCALED + "instance_group [ { kind: KIND_CPU count: 9 } ]"))
    assert placement.only.deployment_options()["autoscaling_config"]["initial_replicas"] == 4


def test_an_autoscaling_config_serve_refuses_is_a_clear_error():
    bad = (
        'parameters { key: "AUTOSCALING_CONFIG" value: { string_value: \'{"min_replicas": -1}\' } }'
    )
    with pytest.raises(ValueError, match="parameter 'AUTOSCALING_CONFIG': min_replicas"):
        placement_for(config(bad))
    not_json = 'parameters { key: "AUTOSCALING_CONFIG" value: { string_value: "{" } }'
    with pytest.raises(ValueError, match="is not JSON"):
        placement_for(config(not_json))


def test_a_runtime_env_parameter_reaches_every_group_and_isolates_the_model():
    text = (
        'parameters { key: "RAY_RUNTIME_ENV" value: { string_value: '
        '\'{"env_vars": {"MODE": "fast"}}\' } } instance_group [ { kind: KIND_CPU count: 2 } ]'
    )
    placement = placement_for(config(text))
    assert placement.isolated
    assert placement.only.ray_actor_options["runtime_env"] == {"env_vars": {"MODE": "fast"}}


def test_an_execution_env_isolates_the_model():
    text = (
        'parameters { key: "EXECUTION_ENV_PATH" value: { string_value: '
        '"$$TRITON_MODEL_DIRECTORY/env.tar.gz" } }'
    )
    assert placement_for(config(text)).isolated
    assert not placement_for(config("")).isolated


def test_a_runtime_env_ray_refuses_is_a_clear_error():
    bad = 'parameters { key: "RAY_RUNTIME_ENV" value: { string_value: \'{"pip": 5}\' } }'
    with pytest.raises(ValueError, match="parameter 'RAY_RUNTIME_ENV'"):
        placement_for(config(bad))


def test_a_sequence_model_runs_its_instances_without_autoscaling_and_says_why():
    placement = placement_for(
        config(
            "max_batch_size: 4 sequence_batching { } "
            "instance_group [ { kind: KIND_CPU count: 3 } ] "
            'parameters { key: "AUTOSCALING_CONFIG" value: { string_value: '
            '"{\\"min_replicas\\": 1, \\"max_replicas\\": 4}" } }'
        )
    )
    group = placement.only
    assert group.num_replicas == 3 and group.autoscaling_config is None
    assert placement.isolated  # never in the shared host, which may run several replicas
    assert placement.notes == [
        "a sequence model does not autoscale: a replica stopped by a scale-down would take "
        "its running sequences with it"
    ]
    single = placement_for(
        config("max_batch_size: 4 sequence_batching { } instance_group [ { kind: KIND_CPU } ]")
    )
    assert single.only.num_replicas == 1 and single.notes == []


def test_max_replicas_per_node_reaches_serve_and_isolates_the_model():
    placement = placement_for(
        config(
            "instance_group [ { count: 3 } ] "
            'parameters { key: "MAX_REPLICAS_PER_NODE" value: { string_value: "1" } }'
        )
    )
    assert placement.only.deployment_options()["max_replicas_per_node"] == 1
    assert placement.isolated
    assert "max_replicas_per_node" not in placement_for(config("")).only.deployment_options()
    for bad in ("0", "two", "-1"):
        with pytest.raises(ValueError, match="MAX_REPLICAS_PER_NODE' must be an integer >= 1"):
            value = f'value: {{ string_value: "{bad}" }}'
            placement_for(config(f'parameters {{ key: "MAX_REPLICAS_PER_NODE" {value} }}'))
