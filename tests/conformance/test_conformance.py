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
    assert_entries_still_match,
    check_case,
    observe,
    reference_serving,
    wait_ready,
)
from tests.conformance.driver import Server
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
def observations(servers) -> dict[str, Observations]:
    return observe(servers, REGISTRY)


@pytest.mark.parametrize("case", [c.name for c in HTTP_CASES])
def test_http(case: str, observations: dict[str, Observations]) -> None:
    check_case(case, observations["http"], ALLOWED, KNOWN_GAPS)


@pytest.mark.parametrize("case", [c.name for c in GRPC_CASES])
def test_grpc(case: str, observations: dict[str, Observations]) -> None:
    check_case(case, observations["grpc"], ALLOWED, KNOWN_GAPS)


def test_allowlist_entries_still_match(observations: dict[str, Observations]) -> None:
    """Every allow-list entry and known gap explains at least one current difference."""
    assert_entries_still_match(REGISTRY, observations, ALLOWED + KNOWN_GAPS, ALLOWED + KNOWN_GAPS)
