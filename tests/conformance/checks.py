"""What the conformance modules share: both servers' observations, rayton's readiness wait,
and the check of one case against the allow-list."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conformance.allowlist import Difference
from tests.conformance.driver import Server, compare, http_request
from tests.reference_triton import ReferenceTriton, ReferenceTritonError, require_reference_triton
from tests.support.requirements import missing


@dataclass
class Observations:
    """Each server's observations per case, for one protocol."""

    reference: dict[str, Any]
    rayton: dict[str, Any]


@contextlib.contextmanager
def reference_serving(repository: Path, extra_args: Sequence[str] = ()) -> Iterator[Server]:
    """The reference tritonserver serving ``repository`` with every model loaded (skipped
    where it cannot run, failed in CI), stopped afterwards."""
    require_reference_triton()
    reference = ReferenceTriton(repository, extra_args=extra_args)
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


def stale_entries(
    runs: Sequence[tuple[Sequence[Any], Observations]],
    allowed: Sequence[Difference],
    checked: Sequence[Difference],
) -> list[Difference]:
    """The entries of ``checked`` that explain no current difference of ``runs`` (cases and
    their observations), comparing with every entry of ``allowed``."""
    used: set = set()
    for cases, observations in runs:
        for case in cases:
            reference, rayton = observations.reference, observations.rayton
            _, matched = compare(case.name, reference[case.name], rayton[case.name], allowed)
            used |= matched
    return [entry for entry in checked if entry not in used]
