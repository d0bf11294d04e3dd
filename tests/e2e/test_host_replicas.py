"""The shared CPU-model host on two replicas (``--host-replicas 2``): each replica holds every
hosted model, requests spread over both, and a model that kills its replica's process (a
python model run in the replica, ``--python-instances in-replica``) takes one replica down
while the other goes on serving every hosted model.
"""

from __future__ import annotations

import time

import pytest
from tritonclient.utils import InferenceServerException

from tests.support.crashing_models import (
    CONFIG,
    ECHO,
    PROMPT_S,
    RECOVERY_S,
    infer,
    replica_pids,
    serves,
    steady_load,
    wait_until,
)

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def server(serve_cluster, tmp_path_factory):
    root = tmp_path_factory.mktemp("host-replicas") / "repository"
    for name in ("crashes", "steady"):
        (root / name / "1").mkdir(parents=True)
        (root / name / "config.pbtxt").write_text(CONFIG)
        (root / name / "1" / "model.py").write_text(ECHO)
    serve_cluster.deploy_live(
        root, "none", cpu_models="shared", host_replicas=2, python_instances="in-replica"
    )
    yield serve_cluster.http_url
    serve_cluster.delete_all()


def host_pids(url: str, model: str) -> set[int]:
    return set(replica_pids(url, model))


def test_every_host_replica_holds_every_hosted_model(server):
    steady, crashes = host_pids(server, "steady"), host_pids(server, "crashes")
    assert len(steady) == 2
    assert steady == crashes  # one process per replica, holding both models


def test_a_crash_in_one_host_replica_leaves_the_other_serving(server):
    assert serves(server, "crashes") and serves(server, "steady")
    before = host_pids(server, "steady")
    with steady_load(server, "steady") as outcomes:
        time.sleep(2.0)
        crashed_at = time.monotonic()
        with pytest.raises(InferenceServerException):
            infer(server, "crashes", -1.0, timeout_s=PROMPT_S)
        time.sleep(3.0)
    after = [o for o in outcomes if o.begun > crashed_at + 1.0]
    failed = [o for o in outcomes if not o.ok]
    # One replica went down: requests it was answering may fail, but from a second after the
    # crash on, the other replica answers every request of the steady model promptly.
    assert after and all(o.ok for o in after), failed
    assert max(o.seconds for o in after) < 2.0
    print(f"host replica crashed: {len(failed)} of {len(outcomes)} steady requests failed")
    back = wait_until(lambda: serves(server, "crashes"), RECOVERY_S)
    assert back is not None
    assert wait_until(lambda: len(host_pids(server, "steady") - before) == 1, RECOVERY_S)
