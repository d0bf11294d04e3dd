"""Zero-drop repository changes under load: a client at concurrency 8 never sees a failure.

(a) poll mode picks up version 2 of a model, (b) explicit mode loads one model and unloads
another, (c) the model's config changes; meanwhile the index is sampled to show each state.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter

import numpy as np
import pytest
import tritonclient.http as httpclient

from tests.support.live_models import write_adder

pytestmark = pytest.mark.cluster

CONCURRENCY = 8


class Load:
    """``CONCURRENCY`` clients calling ``model`` back to back; counts answers and failures."""

    def __init__(self, url: str, model: str) -> None:
        self.url, self.model = url, model
        self.answers: Counter = Counter()
        self.failures: list[str] = []
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run) for _ in range(CONCURRENCY)]

    def _run(self) -> None:
        with httpclient.InferenceServerClient(self.url, network_timeout=60) as client:
            tensor = httpclient.InferInput("IN", [1, 1], "FP32")
            tensor.set_data_from_numpy(np.ones((1, 1), np.float32))
            while not self._stop.is_set():
                try:
                    result = client.infer(self.model, [tensor])
                    key = (
                        result.get_response()["model_version"],
                        float(result.as_numpy("OUT")[0, 0]),
                    )
                    self.answers[key] += 1
                except Exception as err:  # every failure is recorded and fails the test
                    self.failures.append(str(err))

    def __enter__(self) -> Load:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(60)


class IndexSampler:
    """Samples the repository index; ``seen(model)`` is the set of (version, state) observed."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.samples: list[list[dict]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run)

    def _run(self) -> None:
        with httpclient.InferenceServerClient(self.url, network_timeout=60) as client:
            while not self._stop.is_set():
                self.samples.append(client.get_model_repository_index())
                time.sleep(0.1)

    def seen(self, model: str) -> set[tuple[str, str]]:
        return {
            (entry.get("version", ""), entry.get("state", ""))
            for sample in self.samples
            for entry in sample
            if entry["name"] == model
        }

    def __enter__(self) -> IndexSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self._stop.set()
        self._thread.join(60)


def wait_until(predicate, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.2)


def test_poll_mode_switches_versions_and_configs_without_a_failed_request(
    serve_cluster, tmp_path_factory
):
    root = tmp_path_factory.mktemp("poll") / "repository"
    write_adder(root, "a", offset=1.0)
    serve_cluster.deploy_live(root, "poll", poll_secs=1.0)
    try:
        with (
            Load(serve_cluster.http_url, "a") as load,
            IndexSampler(serve_cluster.http_url) as index,
        ):
            wait_until(lambda: load.answers[("1", 2.0)] > 20)
            write_adder(root, "a", version=2, offset=2.0, initialize_s=2.0)  # (a) version 2
            wait_until(lambda: load.answers[("2", 3.0)] > 20)
            config = root / "a" / "config.pbtxt"  # (c) a changed config
            config.write_text(config.read_text().replace("max_batch_size: 8", "max_batch_size: 4"))
            with httpclient.InferenceServerClient(serve_cluster.http_url) as client:
                wait_until(lambda: client.get_model_config("a")["max_batch_size"] == 4)
            served_after = load.answers[("2", 3.0)]
            wait_until(lambda: load.answers[("2", 3.0)] > served_after + 20)
        assert load.failures == [], load.failures[:5]
        seen = index.seen("a")
        assert {("1", "READY"), ("2", "LOADING"), ("2", "READY"), ("1", "UNAVAILABLE")} <= seen
        with httpclient.InferenceServerClient(serve_cluster.http_url) as client:
            final = [e for e in client.get_model_repository_index() if e["name"] == "a"]
        assert final == [
            {"name": "a", "version": "1", "state": "UNAVAILABLE", "reason": "unloaded"},
            {"name": "a", "version": "2", "state": "READY"},
        ]
    finally:
        serve_cluster.delete_all()


def test_explicit_loads_and_unloads_leave_other_models_serving(serve_cluster, tmp_path_factory):
    root = tmp_path_factory.mktemp("explicit_reload") / "repository"
    write_adder(root, "a", offset=1.0)
    # b's load lasts 2 s: a load into the shared host can finish between two samples.
    write_adder(root, "b", offset=10.0, initialize_s=2.0)
    write_adder(root, "c", offset=20.0)
    serve_cluster.deploy_live(root, "explicit", ["a", "c"])
    try:
        with (
            Load(serve_cluster.http_url, "a") as load,
            IndexSampler(serve_cluster.http_url) as index,
            httpclient.InferenceServerClient(serve_cluster.http_url, network_timeout=180) as client,
        ):
            wait_until(lambda: load.answers[("1", 2.0)] > 20)
            client.load_model("b")  # (b) load one model, unload another
            client.unload_model("c")
            override = client.get_model_config("a")
            override["dynamic_batching"]["max_queue_delay_microseconds"] = 3000
            client.load_model("a", config=json.dumps(override))  # (c) a's config changes
            assert (
                client.get_model_config("a")["dynamic_batching"]["max_queue_delay_microseconds"]
                == 3000
            )
            served_after = load.answers[("1", 2.0)]
            wait_until(lambda: load.answers[("1", 2.0)] > served_after + 20)
        assert load.failures == [], load.failures[:5]
        assert {("1", "LOADING"), ("1", "READY")} <= index.seen("b")
        assert ("1", "UNAVAILABLE") in index.seen("c")
        assert {("1", "READY")} == index.seen("a")  # a's reload never took it out of service
    finally:
        serve_cluster.delete_all()
