"""rayton against the real Triton for the response cache: the cases of
:mod:`tests.conformance.cache_cases` over HTTP and gRPC, both servers started with
``--cache-config local,size=1048576`` and ``--metrics-config summary_latencies=true``."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.conformance.allowlist import ALLOWED, CACHE_ALLOWED
from tests.conformance.cache_cases import (
    CACHE_CONFIG,
    CACHE_REGISTRY,
    CACHED_CONFIG,
    CACHED_MODEL,
    CACHED_MODEL_PY,
    ENSEMBLE_CONFIG,
    ENSEMBLE_MODEL,
    MEMBER_MODEL,
    PARTIAL_MODEL,
)
from tests.conformance.checks import (
    Observations,
    assert_entries_still_match,
    both_serving,
    check_case,
)

pytestmark = [pytest.mark.reference, pytest.mark.cluster]

HTTP_CASES = CACHE_REGISTRY.for_protocol("http")
GRPC_CASES = CACHE_REGISTRY.for_protocol("grpc")
ENTRIES = ALLOWED + CACHE_ALLOWED


@pytest.fixture(scope="module")
def observations(serve_cluster, tmp_path_factory) -> Iterator[dict[str, Observations]]:
    repository = tmp_path_factory.mktemp("cache-conformance") / "repository"
    for model in (CACHED_MODEL, PARTIAL_MODEL):
        (repository / model / "1").mkdir(parents=True)
        config = CACHED_CONFIG.replace(f'"{CACHED_MODEL}"', f'"{model}"')
        (repository / model / "config.pbtxt").write_text(config)
        (repository / model / "1" / "model.py").write_text(CACHED_MODEL_PY)
    (repository / MEMBER_MODEL / "1").mkdir(parents=True)
    member = CACHED_CONFIG.replace(f'"{CACHED_MODEL}"', f'"{MEMBER_MODEL}"')
    (repository / MEMBER_MODEL / "config.pbtxt").write_text(
        member.replace("response_cache { enable: true }\n", "")
    )
    (repository / MEMBER_MODEL / "1" / "model.py").write_text(CACHED_MODEL_PY)
    (repository / ENSEMBLE_MODEL / "1").mkdir(parents=True)
    (repository / ENSEMBLE_MODEL / "config.pbtxt").write_text(ENSEMBLE_CONFIG)
    with both_serving(
        serve_cluster,
        repository,
        CACHE_REGISTRY,
        cache_config=CACHE_CONFIG,
        metrics_config=["summary_latencies=true"],
    ) as observed:
        yield observed


@pytest.mark.parametrize("case", [c.name for c in HTTP_CASES])
def test_http(case: str, observations: dict[str, Observations]) -> None:
    check_case(case, observations["http"], ENTRIES, ())


@pytest.mark.parametrize("case", [c.name for c in GRPC_CASES])
def test_grpc(case: str, observations: dict[str, Observations]) -> None:
    check_case(case, observations["grpc"], ENTRIES, ())


def test_cache_allowlist_entries_still_match(observations: dict[str, Observations]) -> None:
    assert_entries_still_match(CACHE_REGISTRY, observations, ENTRIES, CACHE_ALLOWED)
