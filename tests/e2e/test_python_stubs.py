"""Python models in stub processes (``--python-instances stub-process``, the default), in the
shared CPU host as ``rayton serve`` runs them: a model that kills its process fails only the
requests of the batch it was running, the steady model beside it in the same replica fails
none, the replica itself survives, and the crashed model's stub is started again.
"""

from __future__ import annotations

import time

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from repo_adapter.python_backend.stub_zygote import STUB_PROCESS_NAME
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
from tests.support.ports import free_port
from tests.support.processes import descendant_pids, process_name

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def server(serve_cluster, tmp_path_factory):
    root = tmp_path_factory.mktemp("python-stubs") / "repository"
    for name in ("crashes", "steady"):
        (root / name / "1").mkdir(parents=True)
        (root / name / "config.pbtxt").write_text(CONFIG)
        (root / name / "1" / "model.py").write_text(ECHO)
    grpc_port = free_port()
    serve_cluster.deploy_live(root, "none", grpc_port=grpc_port, cpu_models="shared")
    yield serve_cluster.http_url, f"127.0.0.1:{grpc_port}"
    serve_cluster.delete_all()


def stub_children(pid: int) -> list[int]:
    """The stub processes ``pid`` started (its zygote's children)."""
    return [child for child in descendant_pids(pid) if process_name(child) == STUB_PROCESS_NAME]


def test_each_python_instance_runs_in_a_stub_of_the_host_replica(server):
    http_url, _ = server
    assert serves(http_url, "steady") and serves(http_url, "crashes")
    (host,) = set(replica_pids(http_url, "steady")) | set(replica_pids(http_url, "crashes"))
    assert len(stub_children(host)) == 2  # one instance of each model


def test_a_crashing_model_fails_only_its_batch_and_its_stub_comes_back(server):
    http_url, _ = server
    assert serves(http_url, "crashes") and serves(http_url, "steady")
    (host,) = set(replica_pids(http_url, "steady"))
    stubs_before = set(stub_children(host))
    with steady_load(http_url, "steady") as outcomes:
        time.sleep(2.0)
        crashed_at = time.monotonic()
        with pytest.raises(InferenceServerException) as crashed:
            infer(http_url, "crashes", -1.0, timeout_s=PROMPT_S)
        back = wait_until(lambda: serves(http_url, "crashes"), RECOVERY_S)
        time.sleep(2.0)
    assert crashed.value.status() == "500", crashed.value
    assert "stopped while running this request" in crashed.value.message()
    assert back is not None, "the crashed model did not serve again"
    failed = [o for o in outcomes if not o.ok]
    after = [o for o in outcomes if o.begun >= crashed_at - 0.5]
    print(
        f"stub crashed: {len(failed)} of {len(outcomes)} steady requests failed, the longest "
        f"after the crash took {max(o.seconds for o in after):.2f} s, back in {back:.1f} s"
    )
    assert not failed  # the steady model's process never stopped
    assert max(o.seconds for o in after) < PROMPT_S  # nothing hung
    assert replica_pids(http_url, "steady") == [host]  # the replica survived
    stubs_after = set(stub_children(host))
    assert len(stubs_after) == 2 and len(stubs_after - stubs_before) == 1  # a new stub


def test_the_crash_over_grpc_is_an_internal_error_not_a_hang(server):
    http_url, grpc_url = server
    assert serves(http_url, "crashes")
    tensor = grpcclient.InferInput("IN", [1, 2], "FP32")
    tensor.set_data_from_numpy(np.full((1, 2), -1.0, np.float32))
    start = time.monotonic()
    with (
        grpcclient.InferenceServerClient(grpc_url) as client,
        pytest.raises(InferenceServerException) as failed,
    ):
        client.infer("crashes", [tensor], client_timeout=PROMPT_S)
    assert time.monotonic() - start < PROMPT_S
    assert failed.value.status() == "StatusCode.INTERNAL"
    assert "stopped while running this request" in failed.value.message()
    assert wait_until(lambda: serves(http_url, "crashes"), RECOVERY_S) is not None
