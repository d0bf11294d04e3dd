"""rayton's host of Triton's C backend API (Ray-free): backends written here in C, built with
the project's build module, loaded, initialized, executed; their errors as Triton's."""

from __future__ import annotations

import json
import select
from pathlib import Path

import numpy as np
import pytest

from repo_adapter.backends.native.host import (
    BatchReport,
    CompletionQueue,
    NativeBackend,
    NativeInstance,
    NativeModel,
    NativeRequest,
    ReleaseEvent,
    RequestReport,
    ResponseEvent,
)
from repo_adapter.errors import InferenceServerError, StatusCode
from tests.support.native_backends import build_scale_variants

CONFIG = json.dumps(
    {
        "name": "doubler",
        "backend": "scale",
        "max_batch_size": 8,
        "input": [{"name": "IN", "data_type": "TYPE_FP32", "dims": ["1"]}],
        "output": [{"name": "OUT", "data_type": "TYPE_FP32", "dims": ["1"]}],
    }
)


@pytest.fixture(scope="module")
def libraries(tmp_path_factory) -> dict[str, Path]:
    return build_scale_variants(tmp_path_factory.mktemp("native"))


@pytest.fixture
def instance(libraries):
    backend = NativeBackend(libraries["plain"], "scale")
    model = NativeModel(backend, "doubler", 1, libraries["plain"].parent, CONFIG)
    instance = NativeInstance(model, "doubler_0")
    yield instance
    instance.finalize()
    model.finalize()
    backend.unload()


def drain(queue: CompletionQueue, until, timeout_s: float = 10.0) -> list:
    """Events until ``until(events)`` holds, waiting on the queue's fd."""
    events: list = []
    while not until(events):
        ready, _, _ = select.select([queue.fd], [], [], timeout_s)
        assert ready, f"no event within {timeout_s} s; so far {events}"
        events += queue.pop_all()
    return events


def request(queue, token: int, values, **kwargs) -> NativeRequest:
    data = np.array(values, np.float32).reshape(-1, 1)
    return NativeRequest(queue, token, {"IN": ("FP32", data)}, outputs=["OUT"], **kwargs)


def test_a_batch_is_executed_answered_released_and_counted(instance):
    queue = CompletionQueue()
    batch = [request(queue, 1, [1.0, 2.0]), request(queue, 2, [3.5])]
    instance.execute(batch)
    events = drain(queue, lambda seen: len(seen) == 4)
    responses = {e.token: e for e in events if isinstance(e, ResponseEvent)}
    assert {e.token for e in events if isinstance(e, ReleaseEvent)} == {1, 2}
    assert all(r.final and r.error is None for r in responses.values())
    (out,) = responses[1].outputs
    assert (out.name, out.datatype, out.shape) == ("OUT", "FP32", (2, 1))
    np.testing.assert_array_equal(out.data, [[2.0], [4.0]])
    np.testing.assert_array_equal(responses[2].outputs[0].data, [[7.0]])
    reports = instance.take_reports()
    requests = {r.token: r for r in reports if isinstance(r, RequestReport)}
    (reported,) = [r for r in reports if isinstance(r, BatchReport)]
    assert sorted(requests) == [1, 2] and all(r.success for r in requests.values())
    assert reported.batch_size == 3
    times = reported.times
    assert times.exec_start_ns <= times.compute_end_ns <= times.exec_end_ns
    assert instance.take_reports() == []  # taken once
    for item in batch:
        item.delete()
    queue.close()


def test_a_failed_request_gets_the_backends_error_and_the_others_answers(instance):
    queue = CompletionQueue()
    batch = [request(queue, 1, [-1.0]), request(queue, 2, [1.0])]
    instance.execute(batch)
    events = drain(queue, lambda seen: len(seen) == 4)
    responses = {e.token: e for e in events if isinstance(e, ResponseEvent)}
    failure = responses[1].error
    assert failure is not None and responses[1].outputs == []
    assert (failure.code, failure.message) == (StatusCode.INVALID_ARG, "scale: negative input")
    np.testing.assert_array_equal(responses[2].outputs[0].data, [[2.0]])
    failures = [r.token for r in instance.take_reports() if isinstance(r, RequestReport)]
    assert failures == [1, 2]
    queue.close()


def test_a_decoupled_backend_answers_from_its_own_thread_after_execute(libraries):
    backend = NativeBackend(libraries["decoupled"], "scale")
    model = NativeModel(backend, "doubler", 1, libraries["decoupled"].parent, CONFIG)
    instance = NativeInstance(model, "doubler_0")
    queue = CompletionQueue()
    instance.execute([request(queue, 7, [10.0])])
    events = drain(queue, lambda seen: any(isinstance(e, ResponseEvent) and e.final for e in seen))
    assert isinstance(events[0], ReleaseEvent)  # released at once, answered later
    answers = [e for e in events if isinstance(e, ResponseEvent)]
    assert [list(a.outputs[0].data) for a in answers[:-1]] == [[10.0], [11.0], [12.0]]
    assert answers[-1].final and answers[-1].outputs == []  # the final flag alone
    instance.finalize()
    model.finalize()
    backend.unload()
    queue.close()


def test_initialize_errors_are_the_backends_own(libraries):
    with pytest.raises(InferenceServerError) as refused:
        NativeBackend(libraries["refuses"], "scale")
    assert (refused.value.code, refused.value.message) == (
        StatusCode.INTERNAL,
        "scale: initialize refused",
    )


def test_a_backend_without_execute_or_library_is_unavailable(libraries, tmp_path):
    with pytest.raises(InferenceServerError) as no_execute:
        NativeBackend(libraries["no_execute"], "scale")
    assert no_execute.value.code is StatusCode.UNAVAILABLE
    assert "does not export TRITONBACKEND_ModelInstanceExecute" in no_execute.value.message
    with pytest.raises(InferenceServerError) as missing:
        NativeBackend(tmp_path / "libtriton_gone.so", "gone")
    assert missing.value.code is StatusCode.UNAVAILABLE
    assert missing.value.message.startswith("unable to load backend library: ")


def test_a_model_whose_config_the_backend_refuses_fails_to_initialize(libraries):
    backend = NativeBackend(libraries["plain"], "scale")
    config = json.dumps({"name": "doubler", "input": [], "output": []})
    with pytest.raises(InferenceServerError, match="the config has no input 'IN'") as refused:
        NativeModel(backend, "doubler", 1, libraries["plain"].parent, config)
    assert refused.value.code is StatusCode.INVALID_ARG
    backend.unload()


def test_the_model_config_reaches_the_backend_as_json(instance):
    assert json.loads(instance.model.config_json())["backend"] == "scale"
