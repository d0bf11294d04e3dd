"""Instance groups -> Serve replicas and Ray resources."""

from __future__ import annotations

from cluster.placement import (
    DEFAULT_CPU_INSTANCE_NUM_CPUS,
    ENSEMBLE_MAX_ONGOING_REQUESTS,
    MIN_MAX_ONGOING_REQUESTS,
    placement_for,
)
from repo_adapter.config import normalize_config, parse_config_text


def config(text: str):
    parsed = parse_config_text('name: "m" backend: "python" ' + text, "test")
    normalize_config(parsed, gpu_ids=[0, 1])
    return parsed


def test_cpu_group_count_becomes_replicas():
    placement = placement_for(config("instance_group [ { kind: KIND_CPU count: 3 } ]"))
    assert placement.num_replicas == 3 and placement.instance_kind == "CPU"
    assert placement.ray_actor_options == {"num_cpus": DEFAULT_CPU_INSTANCE_NUM_CPUS}
    assert placement.max_ongoing_requests == MIN_MAX_ONGOING_REQUESTS


def test_gpu_group_packs_count_replicas_per_listed_gpu():
    placement = placement_for(
        config("instance_group [ { kind: KIND_GPU count: 4 gpus: [ 0, 1 ] } ]")
    )
    assert placement.num_replicas == 8 and placement.instance_kind == "GPU"
    assert placement.ray_actor_options == {"num_cpus": 0, "num_gpus": 0.25}


def test_large_batches_raise_the_in_flight_cap():
    placement = placement_for(config("max_batch_size: 64 instance_group [ { count: 1 } ]"))
    assert placement.max_ongoing_requests == 4 * 64


def test_ensembles_take_no_cpu():
    placement = placement_for(config('platform: "ensemble"'))
    assert placement.num_replicas == 1
    assert placement.ray_actor_options == {"num_cpus": 0}
    assert placement.max_ongoing_requests == ENSEMBLE_MAX_ONGOING_REQUESTS
    assert placement.deployment_options()["num_replicas"] == 1
