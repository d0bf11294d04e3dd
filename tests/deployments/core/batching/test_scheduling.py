"""The scheduler's choice of where an instance runs a batch: inline on the loop or on its
thread, where it goes on with the batcher's next batches (real ONNX Runtime instances)."""

from __future__ import annotations

import threading

import numpy as np

from deployments.core.batching.scheduling import InstanceScheduler
from tests.repo_adapter.backends.test_base import recording
from tests.repo_adapter.backends.test_onnxruntime import request

SCHEDULER = InstanceScheduler()
ALWAYS_ON_THE_THREAD = InstanceScheduler(inline_max_execution_s=0.0)  # a long-running model


def one_row(offload: bool = False):
    item = request(INPUT0=("FP32", np.ones((1, 8), np.float32)))
    item.offload_execution = offload
    return item


class RecordingChain:
    """The batcher's side of a chain: hands out ``batches`` in turn, records results."""

    def __init__(self, *batches) -> None:
        self.batches = list(batches)
        self.reported: list[tuple[int, object, threading.Thread]] = []

    def next_batch(self):
        return self.batches.pop(0) if self.batches else []

    def finished(self, requests, outcome) -> None:
        self.reported.append((len(requests), outcome, threading.current_thread()))


async def run(backend, requests, chain=None, scheduler=SCHEDULER) -> RecordingChain:
    chain = chain or RecordingChain()
    await scheduler.run_threaded(backend, list(requests), chain)
    return chain


async def test_short_executions_run_inline_once_their_duration_is_known(tmp_path):
    backend = recording(tmp_path)
    loop_thread = threading.current_thread()
    await run(backend, [one_row()])  # duration unknown: the instance's thread
    await run(backend, [one_row()])
    assert backend.threads[0] is not loop_thread
    assert backend.threads[1] is loop_thread


async def test_a_request_marked_for_offloading_moves_its_whole_batch_off_the_loop(tmp_path):
    backend = recording(tmp_path)
    loop_thread = threading.current_thread()
    await run(backend, [one_row()])
    await run(backend, [one_row(), one_row(offload=True)])
    await run(backend, [one_row()])
    first, offloaded, inline = backend.threads
    assert offloaded is first and offloaded is not loop_thread  # the instance's one thread
    assert inline is loop_thread


async def test_a_full_batch_stays_inline_even_when_marked(tmp_path):
    backend = recording(tmp_path)
    loop_thread = threading.current_thread()
    full = backend.config.max_batch_size
    assert full > 1
    await run(backend, [one_row()])
    await run(backend, [one_row(offload=True) for _ in range(full)])
    await run(backend, [one_row(offload=True) for _ in range(full - 1)])
    _, full_batch, short_batch = backend.threads
    assert full_batch is loop_thread
    assert short_batch is not loop_thread


async def test_on_its_thread_an_instance_runs_the_chains_next_batches_there(tmp_path):
    backend = recording(tmp_path)
    loop_thread = threading.current_thread()
    chain = RecordingChain([one_row(), one_row()], [one_row()])
    await run(backend, [one_row()], chain, ALWAYS_ON_THE_THREAD)
    instance_thread = backend.threads[0]
    assert instance_thread is not loop_thread
    assert backend.threads == [instance_thread] * 3
    assert [size for size, _, _ in chain.reported] == [1, 2, 1]
    assert all(thread is instance_thread for _, _, thread in chain.reported)
    assert all(len(outcome) == size for size, outcome, _ in chain.reported)


async def test_an_inline_batch_is_reported_and_leaves_the_next_batch_to_the_loop(tmp_path):
    backend = recording(tmp_path)
    loop_thread = threading.current_thread()
    await backend.execute([one_row()])  # its duration is now known: short
    chain = RecordingChain([one_row()])
    await run(backend, [one_row()], chain)
    assert backend.threads[1] is loop_thread
    assert len(chain.batches) == 1  # not taken
    assert [(size, thread) for size, _, thread in chain.reported] == [(1, loop_thread)]


async def test_a_short_model_leaves_the_chain_once_its_duration_is_known(tmp_path):
    backend = recording(tmp_path)
    loop_thread = threading.current_thread()
    chain = RecordingChain([one_row()])
    await run(backend, [one_row()], chain)  # duration unknown: the instance's thread
    assert backend.threads[0] is not loop_thread
    assert len(chain.batches) == 1  # short: the next batch is left to the loop, to run inline


async def test_a_batch_marked_for_the_thread_keeps_the_chain_going(tmp_path):
    backend = recording(tmp_path)
    await backend.execute([one_row()])  # short
    chain = RecordingChain([one_row(offload=True)])
    await run(backend, [one_row(offload=True)], chain)
    assert backend.threads[1] is backend.threads[2] is not threading.current_thread()
    assert chain.batches == []


async def test_a_failing_batch_in_a_chain_is_reported_and_the_next_one_runs(tmp_path):
    backend = recording(tmp_path)
    wrong_shape = request(INPUT0=("FP32", np.ones((1, 3), np.float32)))
    chain = RecordingChain([one_row()])
    await run(backend, [wrong_shape], chain, ALWAYS_ON_THE_THREAD)
    (_, failed, _), (_, answered, _) = chain.reported
    assert isinstance(failed, Exception)
    assert answered[0].outputs[0].data.shape[0] == 1


async def test_a_function_instance_runs_one_batch_on_the_loop():
    loop_thread = threading.current_thread()
    seen = []

    class OnTheLoop:
        async def execute(self, requests):
            seen.append(threading.current_thread())
            raise RuntimeError("reported, not raised")

    chain = RecordingChain([one_row()])
    await SCHEDULER.runner_for(OnTheLoop())([one_row()], chain)
    assert seen == [loop_thread]
    assert len(chain.batches) == 1  # one batch per call
    ((size, outcome, _),) = chain.reported
    assert size == 1 and isinstance(outcome, RuntimeError)
