"""Traffic between a model's versions on a live server, with real tritonclient clients: the
config's 90/10 split over 10,000 requests, a shadow version whose answers never reach a
client, and a live move to 0/100 through the repository API under load that fails nothing.

One model lives in the shared host, the other (two replicas) in an application of its own,
so both ways a policy reaches replicas are used."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request

import pytest

from tests.support.closed_loop import closed_loop
from tests.support.ports import free_port
from tests.support.versioned_models import write_versioned_model

pytestmark = pytest.mark.cluster

SPLIT = {"VERSION_WEIGHTS": "1:90,2:10", "SHADOW_VERSION": "3", "SHADOW_PERCENT": "10"}


@pytest.fixture(scope="module")
def server(serve_cluster, tmp_path_factory):
    root = tmp_path_factory.mktemp("version_traffic") / "repository"
    write_versioned_model(root, "hosted_split", parameters=SPLIT, failing_version=3)
    # MAX_REPLICAS_PER_NODE gives the model an application of its own.
    write_versioned_model(
        root,
        "own_split",
        versions=(1, 2),
        parameters={"VERSION_WEIGHTS": "1:1", "MAX_REPLICAS_PER_NODE": "2"},
    )
    config = root / "own_split" / "config.pbtxt"
    config.write_text(config.read_text().replace("count: 1", "count: 2"))
    metrics_port = free_port()
    serve_cluster.deploy_live(root, "none", metrics_port=metrics_port)
    serve_cluster.wait_for_repository()
    yield serve_cluster.http_url, metrics_port
    serve_cluster.delete_all()


def run_clients(url: str, model: str, total: int, value: float = 1.0):
    """``total`` requests from 8 clients: the versions that answered, and the errors."""
    outcome = closed_loop(url, model, "VERSION", total=total, value=value)
    return outcome.answers, outcome.errors


def traffic(url: str, model: str, policy: dict | None = None) -> tuple[int, dict]:
    body = None if policy is None else json.dumps(policy).encode()
    request = urllib.request.Request(
        f"http://{url.removeprefix('http://')}/v2/repository/models/{model}/traffic",
        data=body,
        method="GET" if policy is None else "POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def metric(metrics_port: int, family: str, labels: str) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=30) as reply:
        text = reply.read().decode()
    for line in text.splitlines():
        if line.startswith(f"{family}{{") and labels in line:
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no {family} with {labels} in /metrics")


def shadow_copies(metrics_port: int, labels: str) -> dict[str, float]:
    return {
        outcome: metric(metrics_port, f"rayton_shadow_request_{outcome}", labels)
        for outcome in ("success", "failure", "dropped")
    }


def test_a_90_10_split_over_10000_requests_and_shadow_answers_never_reach_clients(server):
    url, metrics_port = server
    assert traffic(url, "hosted_split") == (
        200,
        {"weights": {"1": 90.0, "2": 10.0}, "shadow": {"version": "3", "percent": 10.0}},
    )
    seen, errors = run_clients(url, "hosted_split", 10_000)
    assert not errors
    assert sum(seen.values()) == 10_000
    assert 3 not in seen  # the shadow's answers are discarded
    assert abs(seen[1] / 10_000 - 0.90) <= 0.02 and abs(seen[2] / 10_000 - 0.10) <= 0.02
    print(f"10,000 requests: version 1 {seen[1]}, version 2 {seen[2]}")
    labels = 'model="hosted_split",version="3"'
    deadline = time.monotonic() + 30
    while (copies := shadow_copies(metrics_port, labels))["success"] < 1000:
        assert time.monotonic() < deadline, f"the shadow copies were not all counted: {copies}"
        time.sleep(1)
    assert metric(metrics_port, "rayton_shadow_request_failure", labels) == 0
    # The shadow version's failures are its own: the clients' requests all succeed.
    seen, errors = run_clients(url, "hosted_split", 200, value=-1.0)
    assert not errors and 3 not in seen
    deadline = time.monotonic() + 30
    while metric(metrics_port, "rayton_shadow_request_failure", labels) < 20:
        assert time.monotonic() < deadline, "the shadow's failures were not counted"
        time.sleep(1)


def test_moving_all_traffic_to_version_2_under_load_fails_no_request(server):
    url, _ = server
    seen, errors = run_clients(url, "own_split", 200)
    assert not errors and seen == {1: 200}
    outcome: dict = {}

    def load() -> None:
        outcome["seen"], outcome["errors"] = run_clients(url, "own_split", 3000)

    loader = threading.Thread(target=load)
    loader.start()
    time.sleep(1.0)
    status, applied = traffic(url, "own_split", {"weights": {"1": 0, "2": 100}})
    assert (status, applied) == (200, {"weights": {"1": 0.0, "2": 100.0}})
    # Every replica follows it once the call returned.
    after, errors_after = run_clients(url, "own_split", 200)
    loader.join(timeout=600)
    assert not outcome["errors"] and not errors_after
    assert sum(outcome["seen"].values()) == 3000 and set(outcome["seen"]) == {1, 2}
    assert after == {2: 200}
    assert traffic(url, "own_split")[1] == {"weights": {"1": 0.0, "2": 100.0}}


def test_a_policy_the_model_cannot_follow_is_refused_with_the_reason(server):
    url, _ = server
    status, body = traffic(url, "own_split", {"weights": {"3": 1}})
    assert status == 400 and "version 3 is not ready" in body["error"]
    status, body = traffic(url, "own_split", {"weights": {"1": -1}})
    assert status == 400 and "must be >= 0" in body["error"]
    status, body = traffic(url, "no_such_model", {"weights": {"1": 1}})
    assert status == 404 and "no_such_model" in body["error"]
    assert traffic(url, "own_split")[0] == 200  # unchanged, still serving
