"""DynamicBatcher without Ray: queue policy, batch formation, failures, statistics, close."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading

import numpy as np
import pytest

from deployments.core.batching import BatchPolicy, DynamicBatcher
from deployments.observability.statistics import VersionStatistics
from repo_adapter.backends.base import Execution, PreparedBatch
from repo_adapter.errors import InferenceServerError, ModelResponseError, StatusCode
from repo_adapter.inference_types import ComputeTimes, InferRequest, InferResponse, InferTensor
from tests.deployments.core.batching.test_queue import make_policy


def policy(batching: str = "dynamic_batching { }") -> BatchPolicy:
    return make_policy("max_batch_size: 8 " + batching)


def request(rows: int, **parameters) -> InferRequest:
    data = np.arange(rows, dtype=np.float32).reshape(rows, 1)
    return InferRequest("m", [InferTensor("X", "FP32", data)], parameters=parameters)


class Model:
    """An execute function that records the rows of every execution and answers Y = X."""

    def __init__(self, delay_s: float = 0.0) -> None:
        self.executions: list[list[int]] = []
        self.delay_s = delay_s
        self.release = asyncio.Event()
        self.release.set()

    async def execute(self, requests):
        self.executions.append([r.inputs[0].data.shape[0] for r in requests])
        await self.release.wait()
        await asyncio.sleep(self.delay_s)
        return Execution(
            [
                InferResponse("m", "1", [InferTensor("Y", "FP32", r.inputs[0].data)])
                for r in requests
            ]
        )


def batcher(model: Model, batch_policy: BatchPolicy) -> tuple[DynamicBatcher, VersionStatistics]:
    statistics = VersionStatistics("m", "1")
    return DynamicBatcher("m_1", batch_policy, model.execute, statistics), statistics


async def test_requests_queued_behind_a_busy_instance_are_merged_up_to_the_row_budget():
    model = Model()
    model.release.clear()
    run, statistics = batcher(model, policy())
    first = asyncio.ensure_future(run.submit(request(1), 1))
    await asyncio.sleep(0.01)  # the instance is now busy with the first request
    rest = [asyncio.ensure_future(run.submit(request(r), r)) for r in (3, 4, 2)]
    await asyncio.sleep(0.01)
    model.release.set()
    responses = await asyncio.gather(first, *rest)
    assert model.executions == [[1], [3, 4], [2]]  # 3 + 4 + 2 would exceed 8 rows
    for rows, response in zip((1, 3, 4, 2), responses, strict=True):
        assert response.outputs[0].data.shape == (rows, 1)
        assert response.compute is not None and response.compute.infer_ns > 0
    stats = statistics.to_json()
    assert stats["execution_count"] == 3 and stats["inference_count"] == 10
    assert stats["inference_stats"]["success"]["count"] == 4
    await run.close()


async def test_models_without_dynamic_batching_run_one_request_at_a_time():
    model = Model()
    model.release.clear()
    run, _ = batcher(model, policy(batching=""))
    tasks = [asyncio.ensure_future(run.submit(request(1), 1)) for _ in range(3)]
    await asyncio.sleep(0.01)
    model.release.set()
    await asyncio.gather(*tasks)
    assert model.executions == [[1], [1], [1]]
    await run.close()


async def test_a_full_queue_rejects_with_unavailable():
    model = Model()
    model.release.clear()
    run, statistics = batcher(
        model, policy("dynamic_batching { default_queue_policy { max_queue_size: 1 } }")
    )
    busy = asyncio.ensure_future(run.submit(request(1), 1))
    await asyncio.sleep(0.01)
    queued = asyncio.ensure_future(run.submit(request(1), 1))
    await asyncio.sleep(0)
    with pytest.raises(InferenceServerError, match="Exceeds maximum queue size") as err:
        await run.submit(request(1), 1)
    assert err.value.code == StatusCode.UNAVAILABLE
    model.release.set()
    await asyncio.gather(busy, queued)
    # Never queued: Triton 2.51 counts a full-queue rejection in neither statistics nor metrics.
    assert statistics.to_json()["inference_stats"]["fail"]["count"] == 0
    await run.close()


async def test_a_failing_execution_fails_its_batch_and_not_the_next():
    calls = []

    async def execute(requests):
        calls.append(len(requests))
        if len(calls) == 1:
            raise RuntimeError("backend bug")
        return Execution([InferResponse("m", "1", []) for _ in requests])

    statistics = VersionStatistics("m", "1")
    run = DynamicBatcher("m_1", policy(), execute, statistics)
    with pytest.raises(InferenceServerError, match="backend bug") as err:
        await run.submit(request(1), 1)
    assert err.value.code == StatusCode.INTERNAL
    await run.submit(request(1), 1)
    stats = statistics.to_json()["inference_stats"]
    assert stats["fail"]["count"] == 1 and stats["success"]["count"] == 1
    await run.close()


async def test_a_model_error_response_fails_the_request_but_counts_as_success():
    async def execute(requests):
        error = ModelResponseError("negative input", StatusCode.INVALID_ARG)
        return Execution([error for _ in requests])

    statistics = VersionStatistics("m", "1")
    run = DynamicBatcher("m_1", policy(), execute, statistics)
    with pytest.raises(ModelResponseError, match="negative input"):
        await run.submit(request(1), 1)
    assert statistics.to_json()["inference_stats"]["success"]["count"] == 1
    await run.close()


async def test_queue_timeouts_reject_waiting_requests():
    model = Model()
    model.release.clear()
    run, _ = batcher(
        model,
        policy(
            "dynamic_batching { default_queue_policy { default_timeout_microseconds: 1000 "
            "timeout_action: REJECT } }"
        ),
    )
    busy = asyncio.ensure_future(run.submit(request(1), 1))
    await asyncio.sleep(0.01)
    waiting = asyncio.ensure_future(run.submit(request(1), 1))
    await asyncio.sleep(0.01)  # past its 1 ms queue timeout while the instance is busy
    model.release.set()
    await busy
    with pytest.raises(InferenceServerError, match="timeout"):
        await waiting
    await run.close()


async def test_admission_stage_sees_every_request_before_the_queue():
    admitted = []

    def admission(name, batch_policy, enqueue):
        async def admit(item):
            admitted.append((name, item.rows))
            enqueue([item])

        return admit

    model = Model()
    statistics = VersionStatistics("m", "1")
    run = DynamicBatcher("m_1", policy(), model.execute, statistics, admission)
    await run.submit(request(2), 2)
    assert admitted == [("m_1", 2)]
    await run.close()


async def test_close_fails_what_is_still_queued():
    model = Model()
    model.release.clear()
    run, _ = batcher(model, policy())
    busy = asyncio.ensure_future(run.submit(request(1), 1))
    await asyncio.sleep(0.01)
    queued = asyncio.ensure_future(run.submit(request(1), 1))
    await asyncio.sleep(0.01)
    await run.close()
    with pytest.raises(InferenceServerError, match="unloading") as err:
        await queued
    assert err.value.code == StatusCode.UNAVAILABLE
    busy.cancel()


async def test_several_instances_run_batches_in_parallel():
    first, second = Model(), Model()
    first.release.clear()
    second.release.clear()
    statistics = VersionStatistics("m", "1")
    run = DynamicBatcher("m_1", policy(), [first.execute, second.execute], statistics)
    one = asyncio.ensure_future(run.submit(request(1), 1))
    await asyncio.sleep(0.01)  # the first free instance holds it
    two = asyncio.ensure_future(run.submit(request(2), 2))
    await asyncio.sleep(0.01)
    assert sorted(first.executions + second.executions) == [[1], [2]]  # both busy at once
    assert first.executions and second.executions
    first.release.set()
    second.release.set()
    assert [r.outputs[0].data.shape[0] for r in await asyncio.gather(one, two)] == [1, 2]
    await run.close()


async def test_failures_are_counted_by_reason_and_pending_requests_are_counted():
    model = Model()
    model.release.clear()
    run, statistics = batcher(
        model,
        policy(
            "dynamic_batching { default_queue_policy "
            "{ timeout_action: REJECT default_timeout_microseconds: 20000 } }"
        ),
    )
    busy = asyncio.ensure_future(run.submit(request(1), 1))
    await asyncio.sleep(0.01)  # the instance is busy; the next ones wait in the queue
    timed_out = asyncio.ensure_future(run.submit(request(1), 1))
    cancelled = asyncio.ensure_future(
        run.submit(
            request(1),
            1,
        )
    )
    await asyncio.sleep(0)
    assert run.pending_count == 2
    cancelled.cancel()  # the client went away while its request was queued
    await asyncio.sleep(0.05)  # past the 20 ms queue timeout
    model.release.set()
    await busy
    with pytest.raises(InferenceServerError, match="Request timeout expired"):
        await timed_out
    await asyncio.sleep(0.01)
    entry = statistics.metrics_entry()
    assert entry["failures"] == {"REJECTED": 1, "CANCELED": 1, "BACKEND": 0, "OTHER": 0}
    assert entry["success"] == 1
    assert statistics.to_json()["inference_stats"]["fail"]["count"] == 2  # the same records
    assert run.pending_count == 0
    await run.close()


async def test_a_request_cancelled_in_the_queue_is_left_out_of_its_batch_and_counted():
    model = Model()
    model.release.clear()
    run, statistics = batcher(model, policy())
    busy = asyncio.ensure_future(run.submit(request(1), 1))
    await asyncio.sleep(0.01)  # the instance is busy; the next ones wait in the queue
    cancelled = asyncio.ensure_future(run.submit(request(2), 2))
    kept = asyncio.ensure_future(run.submit(request(3), 3))
    await asyncio.sleep(0.01)
    cancelled.cancel()
    model.release.set()
    await asyncio.gather(busy, kept)
    assert model.executions == [[1], [3]]
    assert statistics.metrics_entry()["failures"]["CANCELED"] == 1
    await run.close()


async def test_a_failing_execution_is_a_backend_failure():
    async def broken(requests):
        raise RuntimeError("boom")

    statistics = VersionStatistics("m", "1")
    run = DynamicBatcher("m_1", policy(), broken, statistics)
    with pytest.raises(InferenceServerError, match="boom"):
        await run.submit(request(2), 2)
    assert statistics.metrics_entry()["failures"]["BACKEND"] == 1
    assert statistics.metrics_entry()["execution_count"] == 1
    await run.close()


async def test_the_backends_phases_split_compute_input_infer_and_output():
    async def reporting(requests):
        await asyncio.sleep(0.02)
        failed = InferenceServerError("a per-request failure", StatusCode.INTERNAL)
        return Execution([failed], ComputeTimes(input_ns=3_000_000, infer_ns=10_000_000))

    statistics = VersionStatistics("m", "1")
    run = DynamicBatcher("m_1", policy(), reporting, statistics)
    with pytest.raises(InferenceServerError):
        await run.submit(request(1), 1)
    batch = statistics.to_json()["batch_stats"][0]  # failed requests' executions count too
    assert batch["compute_input"]["ns"] == 3_000_000
    assert batch["compute_infer"]["ns"] == 10_000_000
    assert batch["compute_output"]["ns"] >= 7_000_000  # the rest of the 20 ms execution
    await run.close()


class CountingThread(concurrent.futures.ThreadPoolExecutor):
    """An instance's one thread, counting the batches the event loop hands it."""

    def __init__(self) -> None:
        super().__init__(max_workers=1)
        self.handed_over = 0

    def submit(self, *args, **kwargs):
        self.handed_over += 1
        return super().submit(*args, **kwargs)


class ThreadedInstance:
    """An instance with a thread of its own and no known duration, so the scheduler runs its
    batches there and goes on there with the next ones; ``gate`` holds each execution until
    it is set."""

    max_batch_size = 8
    mean_execution_s = None

    def __init__(self) -> None:
        self.executions: list[tuple[list[int], threading.Thread]] = []
        self.gate = threading.Event()
        self.started = threading.Event()
        self.thread = CountingThread()

    @property
    def calls(self) -> int:
        """Batches handed over by the event loop."""
        return self.thread.handed_over

    def prepare(self, requests) -> PreparedBatch:
        return PreparedBatch([r.inputs[0].data.shape[0] for r in requests], {}, None, 0)

    def run_prepared(self, requests, prepared) -> Execution:
        self.started.set()
        self.gate.wait(10)
        self.executions.append((prepared.rows, threading.current_thread()))
        if any(r.parameters.get("fail") for r in requests):
            raise RuntimeError("boom")
        return Execution(
            [
                InferResponse("m", "1", [InferTensor("Y", "FP32", r.inputs[0].data)])
                for r in requests
            ]
        )


async def wait_for(event: threading.Event) -> None:
    for _ in range(500):
        if event.is_set():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the instance never started")


async def test_an_instance_thread_takes_the_next_batch_itself_by_the_same_rule():
    instance = ThreadedInstance()
    statistics = VersionStatistics("m", "1")
    run = DynamicBatcher("m_1", policy(), [instance], statistics)
    first = asyncio.ensure_future(run.submit(request(1), 1))
    await wait_for(instance.started)  # the instance's thread is busy with the first request
    rest = [asyncio.ensure_future(run.submit(request(r), r)) for r in (3, 4, 2)]
    await asyncio.sleep(0.01)
    assert run.pending_count == 3
    instance.gate.set()
    responses = await asyncio.gather(first, *rest)
    assert [rows for rows, _ in instance.executions] == [[1], [3, 4], [2]]
    assert instance.calls == 1  # the thread went on by itself, the loop handed over one batch
    assert [r.outputs[0].data.shape[0] for r in responses] == [1, 3, 4, 2]
    stats = statistics.to_json()
    assert stats["execution_count"] == 3
    assert stats["inference_stats"]["success"]["count"] == 4
    assert run.pending_count == 0
    await run.close()


class ChainedInstance:
    """An instance that runs its batches itself (as the python backend does): on a thread of
    its own, going on with the chain's next batches there."""

    def __init__(self) -> None:
        self.inner = ThreadedInstance()
        self.calls = 0

    async def run_batches(self, requests, chain) -> None:
        self.calls += 1
        await asyncio.get_running_loop().run_in_executor(None, self._run, requests, chain)

    def _run(self, requests, chain) -> None:
        while requests:
            outcome = self.inner.run_prepared(requests, self.inner.prepare(requests))
            following = list(chain.next_batch())
            chain.finished(requests, outcome)
            requests = following


async def test_an_instance_that_runs_its_own_batches_gets_the_chain():
    instance = ChainedInstance()
    statistics = VersionStatistics("m", "1")
    run = DynamicBatcher("m_1", policy(), [instance], statistics)
    first = asyncio.ensure_future(run.submit(request(1), 1))
    await wait_for(instance.inner.started)
    rest = [asyncio.ensure_future(run.submit(request(r), r)) for r in (3, 4, 2)]
    await asyncio.sleep(0.01)
    instance.inner.gate.set()
    responses = await asyncio.gather(first, *rest)
    assert [rows for rows, _ in instance.inner.executions] == [[1], [3, 4], [2]]
    assert instance.calls == 1
    assert [r.outputs[0].data.shape[0] for r in responses] == [1, 3, 4, 2]
    assert statistics.to_json()["execution_count"] == 3
    await run.close()


async def test_a_failing_batch_on_the_instance_thread_fails_only_its_own_requests():
    instance = ThreadedInstance()
    statistics = VersionStatistics("m", "1")
    run = DynamicBatcher("m_1", policy(), [instance], statistics)
    first = asyncio.ensure_future(run.submit(request(8, fail=True), 8))
    await wait_for(instance.started)
    second = asyncio.ensure_future(run.submit(request(2), 2))
    await asyncio.sleep(0.01)
    instance.gate.set()
    with pytest.raises(InferenceServerError, match="boom") as failed:
        await first
    assert failed.value.code is StatusCode.INTERNAL
    assert (await second).outputs[0].data.shape == (2, 1)
    assert statistics.metrics_entry()["failures"]["BACKEND"] == 1
    assert instance.calls == 1
    await run.close()


async def test_requests_cancelled_or_timed_out_while_the_thread_was_busy_never_execute():
    instance = ThreadedInstance()
    statistics = VersionStatistics("m", "1")
    timeouts = policy(
        "dynamic_batching { default_queue_policy { default_timeout_microseconds: 10000000 "
        "allow_timeout_override: true timeout_action: REJECT } }"
    )
    run = DynamicBatcher("m_1", timeouts, [instance], statistics)
    first = asyncio.ensure_future(run.submit(request(1), 1))
    await wait_for(instance.started)
    cancelled = asyncio.ensure_future(run.submit(request(2), 2))
    # 1 ms: past while the instance's thread is busy
    timed_out = asyncio.ensure_future(run.submit(request(3, timeout=1000), 3))
    kept = asyncio.ensure_future(run.submit(request(4), 4))
    await asyncio.sleep(0.02)
    cancelled.cancel()
    await asyncio.sleep(0.01)
    instance.gate.set()
    await first
    assert (await kept).outputs[0].data.shape == (4, 1)
    with pytest.raises(InferenceServerError, match="timeout"):
        await timed_out
    assert [rows for rows, _ in instance.executions] == [[1], [4]]
    failures = statistics.metrics_entry()["failures"]
    assert failures["CANCELED"] == 1 and failures["REJECTED"] == 1
    await run.close()


async def test_a_batch_that_fills_up_runs_before_its_delay_ends():
    model = Model()
    run, _ = batcher(model, policy("dynamic_batching { max_queue_delay_microseconds: 5000000 }"))
    started = asyncio.get_running_loop().time()
    first = [asyncio.ensure_future(run.submit(request(1), 1)) for _ in range(3)]
    await asyncio.sleep(0.05)
    assert model.executions == []  # 3 of 8 rows: waiting for the 5 s delay
    await asyncio.gather(*first, run.submit(request(5), 5))
    assert model.executions == [[1, 1, 1, 5]]
    assert asyncio.get_running_loop().time() - started < 1.0
    await run.close()


async def test_a_request_of_another_shape_closes_the_waiting_batch():
    model = Model()
    run, _ = batcher(model, policy("dynamic_batching { max_queue_delay_microseconds: 5000000 }"))
    waiting = asyncio.ensure_future(run.submit(request(2), 2))
    await asyncio.sleep(0.05)
    # "IN" has a variable dimension in the test config: its shape keys the batch
    wide = InferRequest("m", [InferTensor("IN", "FP32", np.zeros((1, 3), np.float32))])
    other = asyncio.ensure_future(run.submit(wide, 1))
    await asyncio.wait_for(waiting, 1.0)
    assert model.executions[0] == [2]
    other.cancel()
    await run.close()
