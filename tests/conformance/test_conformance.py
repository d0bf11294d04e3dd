"""rayton against the real Triton: the same requests, the same answers.

The module fixture starts the reference tritonserver (2.51, bundled with nvidia-pytriton) and
deploys the same repository on the session's Serve cluster, runs the request sequence of
:mod:`tests.conformance.cases` against both (the client cases a second time over
``tritonclient.grpc``), and each test compares one case. Differences must be listed in
:mod:`tests.conformance.allowlist`: deliberate ones pass, known gaps xfail.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conformance.allowlist import ALLOWED, KNOWN_GAPS
from tests.conformance.cases import REGISTRY
from tests.conformance.driver import Server, compare, http_request, run_sequence
from tests.reference_triton import ReferenceTriton, ReferenceTritonError, require_reference_triton
from tests.support.ports import free_port
from tests.support.requirements import missing

pytestmark = [pytest.mark.reference, pytest.mark.cluster]

REPOSITORY = Path(__file__).parent / "model_repository"
HTTP_CASES = REGISTRY.for_protocol("http")
GRPC_CASES = REGISTRY.for_protocol("grpc")


@dataclass
class Observations:
    """Each server's observations per case, for one protocol."""

    reference: dict[str, Any]
    rayton: dict[str, Any]


@pytest.fixture(scope="module")
def servers(serve_cluster) -> Iterator[tuple[Server, Server]]:
    """(reference, rayton) serving the conformance repository."""
    require_reference_triton()
    reference = ReferenceTriton(REPOSITORY)
    try:
        reference.start()
    except ReferenceTritonError as err:
        reference.cleanup()
        missing(f"reference tritonserver cannot start on this platform: {err}")
    try:
        not_ready = [m for m in reference.repository_index() if m.get("state") != "READY"]
        assert not not_ready, f"the reference could not load the repository: {not_ready}"
        grpc_port, metrics_port = free_port(), free_port()
        serve_cluster.deploy_live(  # as rayton serve
            REPOSITORY, "none", grpc_port=grpc_port, metrics_port=metrics_port
        )
        wait_ready(serve_cluster.http_url)
        yield (
            Server(
                "reference",
                reference.http_url.removeprefix("http://"),
                reference.grpc_url,
                reference.metrics_url,
            ),
            Server(
                "rayton",
                serve_cluster.http_url,
                f"127.0.0.1:{grpc_port}",
                f"http://127.0.0.1:{metrics_port}/metrics",
            ),
        )
    finally:
        reference.cleanup()
        serve_cluster.delete_all()


def wait_ready(http_url: str, timeout_s: float = 30.0) -> None:
    """Fail unless rayton reports every model of the repository ready."""
    deadline = time.monotonic() + timeout_s
    while True:
        reply = http_request(Server("rayton", http_url), "GET", "/v2/health/ready")
        if reply.status == 200:
            return
        if time.monotonic() > deadline:
            index = http_request(Server("rayton", http_url), "POST", "/v2/repository/index", {})
            pytest.fail(f"rayton did not load the repository: {index.body.decode()}")
        time.sleep(0.5)


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


def check_case(name: str, observations: Observations) -> None:
    """Fail on unexplained differences; xfail when only known gaps remain."""
    for side in (observations.reference, observations.rayton):
        assert "driver_error" not in side[name], f"the driver failed: {side[name]}"
    mismatches, used = compare(
        name, observations.reference[name], observations.rayton[name], ALLOWED + KNOWN_GAPS
    )
    assert not mismatches, "differences from Triton:\n" + "\n".join(map(str, mismatches))
    gaps = sorted({f"{entry.fix_in}: {entry.reason}" for entry in used if entry in KNOWN_GAPS})
    if gaps:
        pytest.xfail("known gap(s): " + " | ".join(gaps))


@pytest.mark.parametrize("case", [c.name for c in HTTP_CASES])
def test_http(case: str, http_observations: Observations) -> None:
    check_case(case, http_observations)


@pytest.mark.parametrize("case", [c.name for c in GRPC_CASES])
def test_grpc(case: str, grpc_observations: Observations) -> None:
    check_case(case, grpc_observations)


def test_allowlist_entries_still_match(
    http_observations: Observations, grpc_observations: Observations
) -> None:
    """Every allow-list entry and known gap explains at least one current difference."""
    used: set = set()
    for cases, observations in ((HTTP_CASES, http_observations), (GRPC_CASES, grpc_observations)):
        for case in cases:
            _, matched = compare(
                case.name,
                observations.reference[case.name],
                observations.rayton[case.name],
                ALLOWED + KNOWN_GAPS,
            )
            used |= matched
    stale = [entry for entry in ALLOWED + KNOWN_GAPS if entry not in used]
    assert not stale, "entries that match no difference any more (remove them):\n" + "\n".join(
        f"{entry.case} {entry.path}: {entry.reason}" for entry in stale
    )
