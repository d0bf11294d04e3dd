"""rayton against the real Triton for decoupled models and the generate extension: the python
test model and the C test backend built decoupled and a plain python model, served by the
reference tritonserver 2.51 and by rayton, the cases of
:mod:`tests.conformance.decoupled_cases` over HTTP and gRPC (streams over gRPC, the generate
endpoints over HTTP)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conformance.allowlist import ALLOWED, DECOUPLED_ALLOWED
from tests.conformance.checks import (
    Observations,
    assert_entries_still_match,
    both_serving,
    check_case,
)
from tests.conformance.decoupled_cases import (
    DECOUPLED_REGISTRY,
    DOUBLE_CONFIG,
    DOUBLE_MODEL,
    DOUBLE_MODEL_PY,
    ECHO_CONFIG,
    ECHO_MODEL,
    ECHO_MODEL_PY,
    ENSEMBLE_CONFIG,
    ENSEMBLE_MODEL,
    NATIVE_CONFIG,
    NATIVE_MODEL,
    PYTHON_MODEL,
)
from tests.support.native_backends import build_scale_variants

pytestmark = [pytest.mark.reference, pytest.mark.cluster]

PYTHON_MODELS = Path(__file__).parents[1] / "repo_adapter" / "backends" / "python_models"
HTTP_CASES = DECOUPLED_REGISTRY.for_protocol("http")
GRPC_CASES = DECOUPLED_REGISTRY.for_protocol("grpc")
ENTRIES = ALLOWED + DECOUPLED_ALLOWED


@pytest.fixture(scope="module")
def observations(serve_cluster, tmp_path_factory) -> Iterator[dict[str, Observations]]:
    variants = build_scale_variants(tmp_path_factory.mktemp("decoupled-build"))
    repository = tmp_path_factory.mktemp("decoupled-conformance") / "repository"
    shutil.copytree(PYTHON_MODELS / PYTHON_MODEL, repository / PYTHON_MODEL)
    (repository / NATIVE_MODEL / "1").mkdir(parents=True)
    (repository / NATIVE_MODEL / "config.pbtxt").write_text(NATIVE_CONFIG)
    shutil.copy(variants["decoupled"], repository / NATIVE_MODEL / "libtriton_scale.so")
    (repository / ECHO_MODEL / "1").mkdir(parents=True)
    (repository / ECHO_MODEL / "config.pbtxt").write_text(ECHO_CONFIG)
    (repository / ECHO_MODEL / "1" / "model.py").write_text(ECHO_MODEL_PY)
    (repository / DOUBLE_MODEL / "1").mkdir(parents=True)
    (repository / DOUBLE_MODEL / "config.pbtxt").write_text(DOUBLE_CONFIG)
    (repository / DOUBLE_MODEL / "1" / "model.py").write_text(DOUBLE_MODEL_PY)
    (repository / ENSEMBLE_MODEL / "1").mkdir(parents=True)
    (repository / ENSEMBLE_MODEL / "config.pbtxt").write_text(ENSEMBLE_CONFIG)
    with both_serving(serve_cluster, repository, DECOUPLED_REGISTRY) as observed:
        yield observed


@pytest.mark.parametrize("case", [c.name for c in HTTP_CASES])
def test_http(case: str, observations: dict[str, Observations]) -> None:
    check_case(case, observations["http"], ENTRIES, ())


@pytest.mark.parametrize("case", [c.name for c in GRPC_CASES])
def test_grpc(case: str, observations: dict[str, Observations]) -> None:
    check_case(case, observations["grpc"], ENTRIES, ())


def test_decoupled_allowlist_entries_still_match(observations: dict[str, Observations]) -> None:
    assert_entries_still_match(DECOUPLED_REGISTRY, observations, ENTRIES, DECOUPLED_ALLOWED)
