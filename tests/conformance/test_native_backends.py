"""rayton against the real Triton for backends of one's own: the same ``libtriton_scale.so``
(built from ``scale.c`` with the project's build module), ``libtriton_imgprep.so`` (the C++
example, built with CMake) and a python-based backend (``backends/scaling/model.py``) served
by the reference tritonserver 2.51 and by rayton, the cases of
:mod:`tests.conformance.native_cases` over HTTP and gRPC."""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import pytest

from examples.custom_backend.build_repository import MODELS_DIR, build_library
from tests.conformance.allowlist import ALLOWED, NATIVE_ALLOWED, NATIVE_KNOWN_GAPS
from tests.conformance.checks import (
    Observations,
    assert_entries_still_match,
    check_case,
    observe,
    reference_serving,
    wait_ready,
)
from tests.conformance.driver import Server
from tests.conformance.native_cases import (
    AUTOCOMPLETED,
    CONFIG,
    IMGPREP,
    MODEL,
    NATIVE_REGISTRY,
    SCALING_MODELS,
)
from tests.repo_adapter.backends.test_backend_files import CONFIG as SCALING_CONFIG
from tests.repo_adapter.backends.test_backend_files import SCALING_BACKEND
from tests.support.native_backends import build_scale_variants
from tests.support.ports import free_port

pytestmark = [pytest.mark.reference, pytest.mark.cluster]

HTTP_CASES = NATIVE_REGISTRY.for_protocol("http")
GRPC_CASES = NATIVE_REGISTRY.for_protocol("grpc")
ENTRIES = ALLOWED + NATIVE_ALLOWED
# The C test backend scales by this setting on both servers (TRITONBACKEND_BackendConfig).
BACKEND_CONFIG = "scale,factor=3"


@pytest.fixture(scope="module")
def observations(serve_cluster, tmp_path_factory) -> Iterator[dict[str, Observations]]:
    variants = build_scale_variants(tmp_path_factory.mktemp("native-build"))
    library = variants["plain"]
    repository = tmp_path_factory.mktemp("native-conformance") / "repository"
    (repository / MODEL / "1").mkdir(parents=True)
    (repository / MODEL / "config.pbtxt").write_text(CONFIG)
    shutil.copy(library, repository / MODEL / "libtriton_scale.so")
    (repository / AUTOCOMPLETED / "1").mkdir(parents=True)
    (repository / AUTOCOMPLETED / "config.pbtxt").write_text('backend: "scale"\n')
    shutil.copy(variants["autocomplete"], repository / AUTOCOMPLETED / "libtriton_scale.so")
    imgprep = build_library(tmp_path_factory.mktemp("imgprep-build"))
    shutil.copytree(MODELS_DIR / IMGPREP, repository / IMGPREP)
    (repository / IMGPREP / "1").mkdir()
    shutil.copy(imgprep, repository / IMGPREP / imgprep.name)
    # A python-based backend, and two models it serves, each with its own factor file.
    backends = repository.parent / "backends"
    (backends / "scaling").mkdir(parents=True)
    (backends / "scaling" / "model.py").write_text(SCALING_BACKEND)
    for name, factor in SCALING_MODELS.items():
        (repository / name / "1").mkdir(parents=True)
        (repository / name / "config.pbtxt").write_text(SCALING_CONFIG)
        (repository / name / "1" / "factor.txt").write_text(factor)
    python_based = {"scaling": backends / "scaling"}
    reference_args = [f"--backend-config={BACKEND_CONFIG}"]
    with reference_serving(repository, reference_args, python_based) as reference:
        grpc_port = free_port()
        rayton = Server("rayton", serve_cluster.http_url, f"127.0.0.1:{grpc_port}")
        try:
            serve_cluster.deploy_live(
                repository,
                "none",
                grpc_port=grpc_port,
                backend_directory=str(backends),
                backend_config=[BACKEND_CONFIG],
            )
            wait_ready(serve_cluster.http_url, timeout_s=120)
            yield observe((reference, rayton), NATIVE_REGISTRY)
        finally:
            serve_cluster.delete_all()


@pytest.mark.parametrize("case", [c.name for c in HTTP_CASES])
def test_http(case: str, observations: dict[str, Observations]) -> None:
    check_case(case, observations["http"], ENTRIES, NATIVE_KNOWN_GAPS)


@pytest.mark.parametrize("case", [c.name for c in GRPC_CASES])
def test_grpc(case: str, observations: dict[str, Observations]) -> None:
    check_case(case, observations["grpc"], ENTRIES, NATIVE_KNOWN_GAPS)


def test_native_allowlist_entries_still_match(observations: dict[str, Observations]) -> None:
    assert_entries_still_match(
        NATIVE_REGISTRY,
        observations,
        ENTRIES + NATIVE_KNOWN_GAPS,
        NATIVE_ALLOWED + NATIVE_KNOWN_GAPS,
    )
