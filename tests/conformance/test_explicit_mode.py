"""rayton against the real Triton under explicit model control: the repository API's
sequences of :mod:`tests.conformance.explicit_cases` (a member of an ensemble unloaded and
loaded again, a config override forgotten after an unload), over HTTP and again over
``tritonclient.grpc``.

Both servers start with ``--model-control-mode explicit --load-model '*'`` on the conformance
repository. Differences must be listed in :mod:`tests.conformance.allowlist`
(``EXPLICIT_ALLOWED``, or the general ``ALLOWED``).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conformance.allowlist import ALLOWED, EXPLICIT_ALLOWED, KNOWN_GAPS
from tests.conformance.checks import (
    Observations,
    assert_entries_still_match,
    check_case,
    observe,
    reference_serving,
    wait_ready,
)
from tests.conformance.driver import Server
from tests.conformance.explicit_cases import EXPLICIT_REGISTRY
from tests.support.ports import free_port

pytestmark = [pytest.mark.reference, pytest.mark.cluster]

REPOSITORY = Path(__file__).parent / "model_repository"
HTTP_CASES = EXPLICIT_REGISTRY.for_protocol("http")
GRPC_CASES = EXPLICIT_REGISTRY.for_protocol("grpc")
ENTRIES = ALLOWED + EXPLICIT_ALLOWED


@pytest.fixture(scope="module")
def observations(serve_cluster) -> Iterator[dict[str, Observations]]:
    """Both passes, per protocol, against (reference, rayton) in explicit mode."""
    explicit = ["--model-control-mode=explicit", "--load-model=*"]
    with reference_serving(REPOSITORY, explicit) as reference:
        grpc_port = free_port()
        rayton = Server("rayton", serve_cluster.http_url, f"127.0.0.1:{grpc_port}")
        try:
            serve_cluster.deploy_live(
                REPOSITORY, "explicit", load_models=["*"], grpc_port=grpc_port
            )
            wait_ready(serve_cluster.http_url, timeout_s=120)
            yield observe((reference, rayton), EXPLICIT_REGISTRY)
        finally:
            serve_cluster.delete_all()


@pytest.mark.parametrize("case", [c.name for c in HTTP_CASES])
def test_http(case: str, observations: dict[str, Observations]) -> None:
    check_case(case, observations["http"], ENTRIES, KNOWN_GAPS)


@pytest.mark.parametrize("case", [c.name for c in GRPC_CASES])
def test_grpc(case: str, observations: dict[str, Observations]) -> None:
    check_case(case, observations["grpc"], ENTRIES, KNOWN_GAPS)


def test_explicit_allowlist_entries_still_match(observations: dict[str, Observations]) -> None:
    """Every entry kept for these sequences explains at least one current difference."""
    assert_entries_still_match(
        EXPLICIT_REGISTRY, observations, ENTRIES + KNOWN_GAPS, EXPLICIT_ALLOWED
    )
