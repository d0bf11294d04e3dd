"""TensorBackend's execution in two steps, and its instance's one thread."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from repo_adapter.backends.onnxruntime import OnnxRuntimeBackend
from tests.repo_adapter.backends.test_onnxruntime import loaded, make_model, mlp, request


class ThreadRecordingBackend(OnnxRuntimeBackend):
    """ONNX Runtime, noting the thread each forward pass ran on."""

    def run(self, inputs):
        self.threads.append(threading.current_thread())
        return super().run(inputs)


def recording(tmp_path) -> ThreadRecordingBackend:
    backend = loaded(make_model(tmp_path, "mlp", mlp))
    backend.__class__ = ThreadRecordingBackend
    backend.threads = []
    return backend


def rows(count: int):
    return request(INPUT0=("FP32", np.ones((count, 8), np.float32)))


async def test_execute_runs_every_batch_on_the_instances_one_thread(tmp_path):
    backend = recording(tmp_path)
    assert backend.mean_execution_s is None
    await backend.execute([rows(1)])
    await backend.execute([rows(2), rows(1)])
    first, second = backend.threads
    assert first is second is not threading.current_thread()
    assert backend.mean_execution_s is not None and backend.mean_execution_s > 0


def test_a_prepared_batch_runs_with_its_rows_and_reports_its_phases(tmp_path):
    backend = recording(tmp_path)
    requests = [rows(2), rows(3)]
    prepared = backend.prepare(requests)
    assert prepared.rows == [2, 3] and prepared.error is None
    assert prepared.inputs["INPUT0"].shape == (5, 8)
    execution = backend.run_prepared(requests, prepared)
    assert [r.outputs[0].data.shape[0] for r in execution] == [2, 3]
    assert execution.compute is not None and execution.compute.infer_ns > 0


def test_a_batch_that_cannot_be_gathered_fails_when_it_runs(tmp_path):
    backend = recording(tmp_path)
    wrong = [request(INPUT0=("FP32", np.ones((1, 3), np.float32))), rows(1)]
    prepared = backend.prepare(wrong)
    assert prepared.error is not None
    with pytest.raises(Exception) as raised:
        backend.run_prepared(wrong, prepared)
    assert raised.value is prepared.error
