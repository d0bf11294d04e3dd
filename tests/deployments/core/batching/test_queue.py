"""Triton's batch formation (PendingQueue) without Ray: pure decisions on a clock."""

from __future__ import annotations

import numpy as np
import pytest
from tritonclient.grpc import model_config_pb2 as mc

from deployments.core.batching.policy import BatchPolicy
from deployments.core.batching.queue import PendingQueue, PendingRequest
from repo_adapter.config import normalize_config, parse_config_text
from repo_adapter.inference_types import InferRequest, InferTensor


def make_policy(text: str) -> BatchPolicy:
    config = parse_config_text(
        'name: "m" backend: "python" '
        'input [{name: "IN" data_type: TYPE_FP32 dims: [-1]}] '
        'output [{name: "OUT" data_type: TYPE_FP32 dims: [-1]}] ' + text,
        "test",
    )
    normalize_config(config)
    return BatchPolicy.from_config(config)


def item(policy: BatchPolicy, rows: int, width: int = 4, at: float = 0.0, **kw) -> PendingRequest:
    request = InferRequest("m", [InferTensor("IN", "FP32", np.zeros((rows, width), np.float32))])
    return PendingRequest(request, rows, policy.batch_key(request), arrival=at, **kw)


def rows_of(batch: list[PendingRequest]) -> list[int]:
    return [p.rows for p in batch]


def test_rows_are_counted_and_requests_never_split():
    policy = make_policy("max_batch_size: 8 dynamic_batching {}")
    queue = PendingQueue(policy)
    for rows in (1, 3, 8, 2):
        queue.add(item(policy, rows))
    assert rows_of(queue.next_batch(0).batch) == [1, 3]  # 8 more would exceed 8 rows
    assert rows_of(queue.next_batch(0).batch) == [8]
    assert rows_of(queue.next_batch(0).batch) == [2]
    assert queue.next_batch(0).batch == []


def test_different_shapes_on_variable_dims_are_never_mixed():
    policy = make_policy("max_batch_size: 8 dynamic_batching {}")
    queue = PendingQueue(policy)
    queue.add(item(policy, 1, width=4))
    queue.add(item(policy, 1, width=4))
    queue.add(item(policy, 1, width=5))
    queue.add(item(policy, 1, width=4))
    assert rows_of(queue.next_batch(0).batch) == [1, 1]
    assert [p.request.inputs[0].data.shape[1] for p in queue.next_batch(0).batch] == [5]
    assert rows_of(queue.next_batch(0).batch) == [1]


def test_queue_delay_waits_for_oldest_request_then_sends():
    policy = make_policy(
        "max_batch_size: 8 dynamic_batching { max_queue_delay_microseconds: 2000 }"
    )
    queue = PendingQueue(policy)
    queue.add(item(policy, 2, at=10.0))
    decision = queue.next_batch(10.0005)
    assert decision.batch == [] and decision.wait_until == pytest.approx(10.002)
    queue.add(item(policy, 6, at=10.001))
    assert rows_of(queue.next_batch(10.001).batch) == [2, 6]  # full: no more waiting


def test_zero_delay_sends_whatever_is_pending():
    policy = make_policy("max_batch_size: 8 dynamic_batching {}")
    queue = PendingQueue(policy)
    queue.add(item(policy, 1))
    assert rows_of(queue.next_batch(0).batch) == [1]


def test_preferred_batch_size_cut_before_the_delay_expires():
    policy = make_policy(
        "max_batch_size: 16 dynamic_batching { preferred_batch_size: [4, 8] "
        "max_queue_delay_microseconds: 100000 }"
    )
    queue = PendingQueue(policy)
    for _ in range(5):
        queue.add(item(policy, 1, at=0.0))
    assert rows_of(queue.next_batch(0.001).batch) == [1, 1, 1, 1]
    decision = queue.next_batch(0.001)
    assert decision.batch == [] and decision.wait_until == pytest.approx(0.1)
    assert rows_of(queue.next_batch(0.2).batch) == [1]


def test_models_without_dynamic_batching_run_one_request_at_a_time():
    policy = make_policy("max_batch_size: 8")
    queue = PendingQueue(policy)
    queue.add(item(policy, 2))
    queue.add(item(policy, 2))
    assert rows_of(queue.next_batch(0).batch) == [2]
    assert rows_of(queue.next_batch(0).batch) == [2]


def test_priority_levels_serve_level_one_first():
    policy = make_policy(
        "max_batch_size: 2 dynamic_batching { priority_levels: 2 default_priority_level: 2 }"
    )
    queue = PendingQueue(policy)
    low = item(policy, 1, level=2)
    high = item(policy, 1, level=1)
    low2 = item(policy, 1, level=2)
    for p in (low, high, low2):
        queue.add(p)
    assert queue.next_batch(0).batch == [high, low]


def test_timeouts_reject_or_delay():
    policy = make_policy("max_batch_size: 4 dynamic_batching {}")
    queue = PendingQueue(policy)
    rejected = item(policy, 1, at=0.0, deadline=1.0)
    delayed = item(policy, 1, at=0.0, deadline=1.0, delay_on_timeout=True)
    fresh = item(policy, 1, at=0.5, deadline=5.0)
    for p in (rejected, delayed, fresh):
        queue.add(p)
    decision = queue.next_batch(2.0)
    assert decision.rejected == [rejected]
    assert decision.batch == [fresh, delayed]  # the delayed request goes behind unexpired ones


def test_queue_policy_timeout_override_only_lowers_a_default():
    policy = make_policy(
        "max_batch_size: 4 dynamic_batching { default_queue_policy { "
        "default_timeout_microseconds: 1000 allow_timeout_override: true max_queue_size: 3 } }"
    )
    queue_policy = policy.queue_policy(0)
    assert queue_policy.max_queue_size == 3
    assert queue_policy.timeout_us(500) == 500
    assert queue_policy.timeout_us(5000) == 1000
    assert queue_policy.timeout_us(0) == 1000


def test_max_batch_size_zero_means_one_request_per_execution():
    config = mc.ModelConfig(name="m", max_batch_size=0)
    config.dynamic_batching.SetInParent()
    policy = BatchPolicy.from_config(config)
    assert not policy.batches_rows


def test_an_arrival_says_whether_a_batch_may_be_ready_sooner():
    policy = make_policy(
        "max_batch_size: 8 dynamic_batching "
        "{ max_queue_delay_microseconds: 2000 preferred_batch_size: [4] }"
    )
    queue = PendingQueue(policy)
    assert queue.add(item(policy, 1))  # the first request starts the delay
    assert not queue.add(item(policy, 1))  # 2 rows: nothing can close the batch yet
    assert not queue.add(item(policy, 1))
    assert queue.add(item(policy, 1))  # 4 rows: the preferred size
    assert rows_of(queue.next_batch(0).batch) == [1, 1, 1, 1]
    assert queue.add(item(policy, 1))  # empty again
    assert queue.add(item(policy, 1, width=5))  # another shape closes the batch
    assert rows_of(queue.next_batch(0).batch) == [1]
    assert queue.add(item(policy, 1, deadline=0.5))  # its own timeout may come first


def test_without_a_delay_every_arrival_may_make_a_batch():
    policy = make_policy("max_batch_size: 8 dynamic_batching { }")
    queue = PendingQueue(policy)
    assert queue.add(item(policy, 1)) and queue.add(item(policy, 1))
