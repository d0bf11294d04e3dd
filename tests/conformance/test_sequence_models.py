"""rayton against the real Triton for sequence models: the cases of
:mod:`tests.conformance.sequence_cases` over HTTP and gRPC, the same python model with the
``oldest`` and the ``direct`` strategy served by the reference tritonserver 2.51 and by
rayton."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conformance.allowlist import ALLOWED, SEQUENCE_ALLOWED
from tests.conformance.checks import (
    Observations,
    assert_entries_still_match,
    both_serving,
    check_case,
)
from tests.conformance.sequence_cases import SEQUENCE_REGISTRY

pytestmark = [pytest.mark.reference, pytest.mark.cluster]

MODELS = Path(__file__).parents[1] / "deployments" / "model_repository"
SEQUENCE_SUM = MODELS / "sequence_sum"
HTTP_CASES = SEQUENCE_REGISTRY.for_protocol("http")
GRPC_CASES = SEQUENCE_REGISTRY.for_protocol("grpc")
ENTRIES = ALLOWED + SEQUENCE_ALLOWED


@pytest.fixture(scope="module")
def observations(serve_cluster, tmp_path_factory) -> Iterator[dict[str, Observations]]:
    repository = tmp_path_factory.mktemp("sequence-conformance") / "repository"
    shutil.copytree(SEQUENCE_SUM, repository / "sequence_sum")
    shutil.copytree(SEQUENCE_SUM, repository / "sequence_direct")
    shutil.copytree(MODELS / "sequence_state", repository / "sequence_state")
    config = repository / "sequence_direct" / "config.pbtxt"
    text = config.read_text().replace('name: "sequence_sum"', 'name: "sequence_direct"')
    config.write_text(text.replace("oldest { max_candidate_sequences: 4 ", "direct { "))
    with both_serving(serve_cluster, repository, SEQUENCE_REGISTRY) as observed:
        yield observed


@pytest.mark.parametrize("case", [c.name for c in HTTP_CASES])
def test_http(case: str, observations: dict[str, Observations]) -> None:
    check_case(case, observations["http"], ENTRIES, ())


@pytest.mark.parametrize("case", [c.name for c in GRPC_CASES])
def test_grpc(case: str, observations: dict[str, Observations]) -> None:
    check_case(case, observations["grpc"], ENTRIES, ())


def test_sequence_allowlist_entries_still_match(observations: dict[str, Observations]) -> None:
    assert_entries_still_match(SEQUENCE_REGISTRY, observations, ENTRIES, SEQUENCE_ALLOWED)
