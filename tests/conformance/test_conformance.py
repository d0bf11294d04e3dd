"""rayton against the real Triton: the same requests, the same answers.

The module fixture starts the reference tritonserver (2.51, bundled with nvidia-pytriton) and
deploys the same repository on the session's Serve cluster, runs the request sequence of
:mod:`tests.conformance.cases` against both (the client cases a second time over
``tritonclient.grpc``), and each test compares one case. Differences must be listed in
:mod:`tests.conformance.allowlist`: deliberate ones pass, known gaps xfail.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conformance.allowlist import ALLOWED, KNOWN_GAPS
from tests.conformance.cases import REGISTRY
from tests.conformance.checks import (
    Observations,
    check_case,
    reference_serving,
    stale_entries,
    wait_ready,
)
from tests.conformance.driver import Server, run_sequence
from tests.support.ports import free_port

pytestmark = [pytest.mark.reference, pytest.mark.cluster]

REPOSITORY = Path(__file__).parent / "model_repository"
HTTP_CASES = REGISTRY.for_protocol("http")
GRPC_CASES = REGISTRY.for_protocol("grpc")


@pytest.fixture(scope="module")
def servers(serve_cluster) -> Iterator[tuple[Server, Server]]:
    """(reference, rayton) serving the conformance repository."""
    with reference_serving(REPOSITORY) as reference:
        grpc_port, metrics_port = free_port(), free_port()
        try:
            serve_cluster.deploy_live(  # as rayton serve
                REPOSITORY, "none", grpc_port=grpc_port, metrics_port=metrics_port
            )
            wait_ready(serve_cluster.http_url)
            yield (
                reference,
                Server(
                    "rayton",
                    serve_cluster.http_url,
                    f"127.0.0.1:{grpc_port}",
                    f"http://127.0.0.1:{metrics_port}/metrics",
                ),
            )
        finally:
            serve_cluster.delete_all()


@pytest.fixture(scope="module")
def http_observations(servers) -> Observations:
    reference, rayton = servers
    return Observations(
        run_sequence(reference, HTTP_CASES, "http"), run_sequence(rayton, HTTP_CASES, "http")
    )


@pytest.fixture(scope="module")
def grpc_observations(servers) -> Observations:
    """The client cases again, over tritonclient.grpc."""
    reference, rayton = servers
    return Observations(
        run_sequence(reference, GRPC_CASES, "grpc"), run_sequence(rayton, GRPC_CASES, "grpc")
    )


@pytest.mark.parametrize("case", [c.name for c in HTTP_CASES])
def test_http(case: str, http_observations: Observations) -> None:
    check_case(case, http_observations, ALLOWED, KNOWN_GAPS)


@pytest.mark.parametrize("case", [c.name for c in GRPC_CASES])
def test_grpc(case: str, grpc_observations: Observations) -> None:
    check_case(case, grpc_observations, ALLOWED, KNOWN_GAPS)


def test_allowlist_entries_still_match(
    http_observations: Observations, grpc_observations: Observations
) -> None:
    """Every allow-list entry and known gap explains at least one current difference."""
    runs = ((HTTP_CASES, http_observations), (GRPC_CASES, grpc_observations))
    stale = stale_entries(runs, ALLOWED + KNOWN_GAPS, ALLOWED + KNOWN_GAPS)
    assert not stale, "entries that match no difference any more (remove them):\n" + "\n".join(
        f"{entry.case} {entry.path}: {entry.reason}" for entry in stale
    )
