"""Autoscaling on Triton's queue signals: the targets, the policy's answer, Serve's config."""

from __future__ import annotations

import pytest
from ray.serve.config import AutoscalingConfig, AutoscalingContext

from cluster.placement import placement_for
from cluster.queue_autoscaling import (
    PENDING_METRIC,
    POLICY_FUNCTION,
    QUEUE_TIME_METRIC,
    QueueSignalPolicy,
    QueueTargets,
    desired_replicas,
    queue_targets,
)
from tests.cluster.test_placement import AUTOSCALED, config


def parameter(key: str, value: str) -> str:
    return f'parameters {{ key: "{key}" value: {{ string_value: "{value}" }} }} '


QUEUE_TIME_5MS = parameter("AUTOSCALING_TARGET_QUEUE_TIME_US", "5000")
PENDING_4 = parameter("AUTOSCALING_TARGET_PENDING_REQUESTS", "4")


def test_targets_come_from_the_parameters():
    assert queue_targets(config("")) is None
    assert queue_targets(config(QUEUE_TIME_5MS)) == QueueTargets(queue_time_us=5000.0)
    assert queue_targets(config(QUEUE_TIME_5MS + PENDING_4)) == QueueTargets(5000.0, 4.0)


@pytest.mark.parametrize("value", ["0", "-2", "soon", "nan", "inf"])
def test_a_target_that_is_not_a_positive_number_is_refused(value):
    with pytest.raises(ValueError, match="AUTOSCALING_TARGET_PENDING_REQUESTS' must be a positive"):
        queue_targets(config(parameter("AUTOSCALING_TARGET_PENDING_REQUESTS", value)))


def test_pending_requests_ask_for_their_total_over_the_target():
    targets = QueueTargets(pending_requests=4)
    assert desired_replicas(targets, 2, {"a": 10.0, "b": 6.0}, {}, 20) == 4.0
    assert desired_replicas(targets, 2, {"a": 1.0, "b": 1.0}, {}, 5) == 1.0  # never below 1
    assert desired_replicas(targets, 2, {"a": 0.0, "b": 0.0}, {}, 0) == 0.0  # idle


def test_queue_time_scales_todays_replicas_by_its_ratio_to_the_target():
    targets = QueueTargets(queue_time_us=5000)
    assert desired_replicas(targets, 2, {}, {"a": 15000.0, "b": 5000.0}, 30) == 4.0
    assert desired_replicas(targets, 5, {}, {"a": 1000.0}, 8) == 1.0
    assert desired_replicas(targets, 4, {}, {"a": 1000.0}, 8) == 1.0  # 0.8, but requests run


def test_the_larger_of_two_targets_wins():
    targets = QueueTargets(queue_time_us=5000, pending_requests=4)
    assert desired_replicas(targets, 1, {"a": 12.0}, {"a": 10000.0}, 12) == 3.0
    assert desired_replicas(targets, 1, {"a": 4.0}, {"a": 20000.0}, 12) == 4.0


def test_a_replica_without_reports_yet_counts_for_nothing():
    assert desired_replicas(QueueTargets(queue_time_us=5000), 3, {}, {}, 0) == 0.0


def context(replicas: int, held: float, pending: dict, queue_time: dict) -> AutoscalingContext:
    return AutoscalingContext(
        deployment_id=None,
        deployment_name="m",
        app_name="m",
        current_num_replicas=replicas,
        target_num_replicas=replicas,
        running_replicas=list(pending),
        total_num_requests=held,
        total_queued_requests=0,
        aggregated_metrics={PENDING_METRIC: pending, QUEUE_TIME_METRIC: queue_time},
        raw_metrics={},
        capacity_adjusted_min_replicas=0,
        capacity_adjusted_max_replicas=8,
        policy_state={},
        last_scale_up_time=None,
        last_scale_down_time=None,
        current_time=None,
        config=AutoscalingConfig(min_replicas=0, max_replicas=8),
    )


def test_the_policy_reads_the_replicas_reports_from_serves_context():
    policy = QueueSignalPolicy(queue_time_us=2000, pending_requests=None)
    busy = context(2, 16, {"a": 8.0, "b": 8.0}, {"a": 6000.0, "b": 2000.0})
    assert policy(busy) == (4.0, {})
    idle = context(2, 0, {"a": 0.0, "b": 0.0}, {"a": 0.0, "b": 0.0})
    assert policy(idle) == (0.0, {})


def test_the_targets_become_serves_policy_in_the_models_autoscaling_config():
    placement = placement_for(config(AUTOSCALED + QUEUE_TIME_5MS))
    scaling = placement.only.deployment_options()["autoscaling_config"]
    assert scaling["policy"] == {
        "policy_function": POLICY_FUNCTION,
        "policy_kwargs": {"queue_time_us": 5000.0, "pending_requests": None},
    }
    checked = AutoscalingConfig.model_validate(scaling)  # Serve takes it as it is
    assert isinstance(
        checked.policy.get_policy()(**scaling["policy"]["policy_kwargs"]), QueueSignalPolicy
    )


def test_targets_without_bounds_or_beside_another_policy_are_refused():
    with pytest.raises(ValueError, match="need 'AUTOSCALING_CONFIG'"):
        placement_for(config(PENDING_4))
    own_policy = (
        'parameters { key: "AUTOSCALING_CONFIG" value: { string_value: '
        '\'{"max_replicas": 2, "policy": {"policy_function": "a.b:c"}}\' } } '
    )
    with pytest.raises(ValueError, match="names a policy of its own"):
        placement_for(config(own_policy + PENDING_4))
