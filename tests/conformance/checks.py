"""What the conformance modules share: both servers' observations, rayton's readiness wait,
and the check of one case against the allow-list."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conformance.allowlist import Difference
from tests.conformance.driver import CaseRegistry, Server, compare, http_request, run_sequence
from tests.reference_triton import ReferenceTriton, ReferenceTritonError, require_reference_triton
from tests.support.requirements import missing


@dataclass
class Observations:
    """Each server's observations per case, for one protocol."""

    reference: dict[str, Any]
    rayton: dict[str, Any]


@contextlib.contextmanager
def reference_serving(
    repository: Path,
    extra_args: Sequence[str] = (),
    extra_backends: Mapping[str, Path] | None = None,
) -> Iterator[Server]:
    """The reference tritonserver serving ``repository`` with every model loaded (skipped
    where it cannot run, failed in CI), stopped afterwards; ``extra_backends`` go into its
    backend directory."""
    require_reference_triton()
    reference = ReferenceTriton(repository, extra_args=extra_args, extra_backends=extra_backends)
    try:
        reference.start()
    except ReferenceTritonError as err:
        reference.cleanup()
        missing(f"reference tritonserver cannot start on this platform: {err}")
    try:
        not_ready = [m for m in reference.repository_index() if m.get("state") != "READY"]
        assert not not_ready, f"the reference could not load the repository: {not_ready}"
        yield Server(
            "reference",
            reference.http_url.removeprefix("http://"),
            reference.grpc_url,
            reference.metrics_url,
        )
    finally:
        reference.cleanup()


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


def check_case(
    name: str,
    observations: Observations,
    allowed: Sequence[Difference],
    known_gaps: Sequence[Difference],
) -> None:
    """Fail on unexplained differences; xfail when only known gaps remain."""
    for side in (observations.reference, observations.rayton):
        observed = side[name]
        failed = isinstance(observed, dict) and "driver_error" in observed
        assert not failed, f"the driver failed: {observed}"
    mismatches, used = compare(
        name, observations.reference[name], observations.rayton[name], (*allowed, *known_gaps)
    )
    assert not mismatches, "differences from Triton:\n" + "\n".join(map(str, mismatches))
    gaps = sorted({f"{entry.fix_in}: {entry.reason}" for entry in used if entry in known_gaps})
    if gaps:
        pytest.xfail("known gap(s): " + " | ".join(gaps))


def observe(servers: Sequence[Server], registry: CaseRegistry) -> dict[str, Observations]:
    """``registry``'s cases against (reference, rayton): over HTTP, then the client cases again
    over tritonclient.grpc; the observations per protocol."""
    return {
        protocol: Observations(*(run_sequence(s, cases, protocol) for s in servers))
        for protocol, cases in (
            ("http", registry.for_protocol("http")),
            ("grpc", registry.for_protocol("grpc")),
        )
    }


def assert_entries_still_match(
    registry: CaseRegistry,
    observations: dict[str, Observations],
    allowed: Sequence[Difference],
    checked: Sequence[Difference],
) -> None:
    """Fail naming each entry of ``checked`` that explains no current difference of
    ``registry``'s cases (comparing with every entry of ``allowed``)."""
    used: set = set()
    for protocol, seen in observations.items():
        for case in registry.for_protocol(protocol):
            reference, rayton = seen.reference, seen.rayton
            _, matched = compare(case.name, reference[case.name], rayton[case.name], allowed)
            used |= matched
    stale = [entry for entry in checked if entry not in used]
    assert not stale, "entries that match no difference any more (remove them):\n" + "\n".join(
        f"{entry.case} {entry.path}: {entry.reason}" for entry in stale
    )


@contextlib.contextmanager
def both_serving(
    serve_cluster: Any,
    repository: Path,
    registry: CaseRegistry,
    server_args: Sequence[str] = (),
    cache_config: list[str] | None = None,
    allow_client_shm: bool = False,
    metrics_config: Sequence[str] = (),
) -> Iterator[dict[str, Observations]]:
    """``registry``'s observations of the reference and of rayton, each serving
    ``repository`` with every model loaded (rayton through ``serve_cluster``, its models
    removed afterwards), both with ``/metrics``. ``server_args``: the reference's extra flags;
    ``cache_config``: both servers' ``--cache-config``; ``allow_client_shm``: rayton's
    ``--allow-client-shm`` (Triton 2.51 allows client shared memory without a flag);
    ``metrics_config``: both servers' ``--metrics-config`` settings."""
    from tests.support.ports import free_port

    cache_args = [f"--cache-config={value}" for value in cache_config or ()]
    metrics_args = [f"--metrics-config={value}" for value in metrics_config]
    with reference_serving(repository, [*server_args, *cache_args, *metrics_args]) as reference:
        grpc_port, metrics_port = free_port(), free_port()
        rayton = Server(
            "rayton",
            serve_cluster.http_url,
            f"127.0.0.1:{grpc_port}",
            f"http://127.0.0.1:{metrics_port}/metrics",
        )
        try:
            serve_cluster.deploy_live(
                repository,
                "none",
                grpc_port=grpc_port,
                metrics_port=metrics_port,
                cache_config=cache_config,
                allow_client_shm=allow_client_shm,
                metrics_config=list(metrics_config),
            )
            wait_ready(serve_cluster.http_url, timeout_s=120)
            yield observe((reference, rayton), registry)
        finally:
            serve_cluster.delete_all()
