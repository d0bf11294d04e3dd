"""Replica recycling on a live server (cluster/recycling.py): replicas replaced on age and on
request count, one at a time, under a load of 8 tritonclient clients that sees no failure; a
traffic policy set through the repository API holds on the replicas that replace them."""

from __future__ import annotations

import json
import time
import urllib.request

import pytest

from tests.support.closed_loop import closed_loop
from tests.support.versioned_models import write_pid_model, write_versioned_model

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def server(serve_cluster, tmp_path_factory):
    root = tmp_path_factory.mktemp("replica_recycling") / "repository"
    write_pid_model(root, "by_age", {"RECYCLE_AFTER_SECONDS": "8"}, replicas=2)
    write_pid_model(root, "by_requests", {"RECYCLE_AFTER_REQUESTS": "150"})
    write_versioned_model(
        root,
        "recycled_split",
        versions=(1, 2),
        parameters={"VERSION_WEIGHTS": "1:50,2:50", "RECYCLE_AFTER_SECONDS": "8"},
    )
    serve_cluster.deploy_live(root, "none")
    serve_cluster.wait_for_repository()
    yield serve_cluster.http_url
    serve_cluster.delete_all()


def _replica_processes_seen(count: int):
    return lambda outcome: len(outcome.answers) >= count


def test_replicas_recycled_by_age_under_load_fail_no_request(server):
    # 2 replicas, replaced one by one every ~8 s plus the time a replacement takes to start:
    # on a loaded 2-core machine a round can take most of a minute, hence the wide bound.
    started = time.monotonic()
    outcome = closed_loop(server, "by_age", "PID", seconds=180, until=_replica_processes_seen(4))
    pids = outcome.answers
    assert not outcome.errors
    print(
        f"{sum(pids.values())} requests answered by {len(pids)} replica processes "
        f"in {time.monotonic() - started:.0f} s"
    )
    assert len(pids) >= 4  # both replicas replaced at least once


def test_replicas_recycled_by_request_count_fail_no_request(server):
    outcome = closed_loop(
        server, "by_requests", "PID", seconds=180, until=_replica_processes_seen(3)
    )
    pids = outcome.answers
    assert not outcome.errors
    print(f"answers per replica process: {sorted(pids.values(), reverse=True)}")
    # A replica serves on past 150 until its successor runs (a few seconds of load here), so
    # the second successor comes within a few thousand requests.
    assert len(pids) >= 3


def test_a_traffic_policy_holds_on_the_replicas_that_replace_the_old_ones(server):
    before = closed_loop(server, "recycled_split", "VERSION", total=400)
    assert not before.errors and set(before.answers) == {1, 2}  # the config's 50/50
    request = urllib.request.Request(
        f"http://{server.removeprefix('http://')}/v2/repository/models/recycled_split/traffic",
        data=json.dumps({"weights": {"1": 0, "2": 100}}).encode(),
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=60) as reply:
        assert reply.status == 200
    # The load lasts until the replicas were replaced twice more (8 s per round plus the
    # starts; they have been recycled since the module's server started).
    rounds_seen = _RecycleRounds(server, "recycled_split")
    twice_more = rounds_seen() + 2
    after = closed_loop(
        server,
        "recycled_split",
        "VERSION",
        seconds=180,
        until=lambda _: rounds_seen() >= twice_more,
    )
    assert not after.errors and after.answered > 0
    assert set(after.answers) == {2}, after.answers
    assert rounds_seen() >= twice_more


class _RecycleRounds:
    """How many times the server says ``model``'s replicas were recycled, asked at most
    once a second (a load's clients ask before each request)."""

    def __init__(self, server: str, model: str) -> None:
        self._url = f"http://{server.removeprefix('http://')}/v2/rayton/status"
        self._model = model
        self._asked = 0.0
        self._rounds = 0

    def __call__(self) -> int:
        if time.monotonic() - self._asked >= 1.0:
            self._asked = time.monotonic()
            with urllib.request.urlopen(self._url, timeout=30) as reply:
                status = json.loads(reply.read())
            self._rounds = status["models"][self._model].get("recycled", 0)
        return self._rounds
