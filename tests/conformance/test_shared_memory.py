"""rayton against the real Triton for the system shared-memory extension: the cases of
:mod:`tests.conformance.shm_cases` over HTTP and gRPC (rayton with ``--allow-client-shm``;
tritonserver 2.51 allows client shared memory without a flag)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.conformance.allowlist import ALLOWED, SHM_ALLOWED
from tests.conformance.checks import (
    Observations,
    assert_entries_still_match,
    both_serving,
    check_case,
)
from tests.conformance.shm_cases import SHM_CONFIG, SHM_MODEL, SHM_MODEL_PY, SHM_REGISTRY, Regions

pytestmark = [pytest.mark.reference, pytest.mark.cluster]

HTTP_CASES = SHM_REGISTRY.for_protocol("http")
GRPC_CASES = SHM_REGISTRY.for_protocol("grpc")
ENTRIES = ALLOWED + SHM_ALLOWED


@pytest.fixture(scope="module")
def observations(serve_cluster, tmp_path_factory) -> Iterator[dict[str, Observations]]:
    repository = tmp_path_factory.mktemp("shm-conformance") / "repository"
    (repository / SHM_MODEL / "1").mkdir(parents=True)
    (repository / SHM_MODEL / "config.pbtxt").write_text(SHM_CONFIG)
    (repository / SHM_MODEL / "1" / "model.py").write_text(SHM_MODEL_PY)
    Regions.create()
    try:
        with both_serving(serve_cluster, repository, SHM_REGISTRY, allow_client_shm=True) as seen:
            yield seen
    finally:
        Regions.destroy()


@pytest.mark.parametrize("case", [c.name for c in HTTP_CASES])
def test_http(case: str, observations: dict[str, Observations]) -> None:
    check_case(case, observations["http"], ENTRIES, ())


@pytest.mark.parametrize("case", [c.name for c in GRPC_CASES])
def test_grpc(case: str, observations: dict[str, Observations]) -> None:
    check_case(case, observations["grpc"], ENTRIES, ())


def test_the_cases_observe_data(observations: dict[str, Observations]) -> None:
    # The sequence really moved data through regions on both servers (not two equal errors).
    for side in (observations["http"].reference, observations["http"].rayton):
        assert side["shm_infer"]["region"].startswith("0000c040" * 4), side["shm_infer"]
        assert "exception" in side["shm_output_too_small"]
    for side in (observations["grpc"].reference, observations["grpc"].rayton):
        assert side["shm_infer_offset"]["region"].startswith("00" * 8 + "00002041" * 4)


def test_shm_allowlist_entries_still_match(observations: dict[str, Observations]) -> None:
    assert_entries_still_match(SHM_REGISTRY, observations, ENTRIES, SHM_ALLOWED)
