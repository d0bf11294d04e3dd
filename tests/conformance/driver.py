"""Run one request sequence against a server and compare two servers' observations.

The conformance suite sends the *same* sequence (:mod:`tests.conformance.cases`) to the
reference tritonserver and to rayton, then diffs the two observation sets leaf by leaf. An
observation is plain data (dicts, lists, str, int, float, bool, None), already normalised
(:mod:`tests.conformance.normalise`).

A case either talks raw HTTP (:meth:`Target.raw`: exact status codes, headers and bodies) or
goes through :attr:`Target.client`, a :class:`~tests.conformance.sessions.ClientSession` for
the protocol of the pass (``tritonclient.http`` or ``tritonclient.grpc``; raw cases run only
in the HTTP pass).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from tests.conformance.normalise import normalise_reply
from tests.conformance.sessions import (
    SESSIONS,
    ClientSession,
    OutputSpec,
    Server,
    TensorSpec,
    http_request,
)

__all__ = [
    "MISSING",
    "Case",
    "CaseRegistry",
    "Mismatch",
    "OutputSpec",
    "Server",
    "Target",
    "TensorSpec",
    "compare",
    "diff",
    "http_request",
    "run_sequence",
]

MISSING = "<missing>"  # a key or list element one side lacks


@dataclass
class Target:
    """What a case runs against: one server, over one client protocol (plus raw HTTP)."""

    server: Server
    session: ClientSession

    @property
    def client(self) -> ClientSession:
        return self.session

    def raw(self, method: str, path: str, body: bytes | dict | None = None, headers=None) -> Any:
        """A raw HTTP request, normalised with :func:`normalise_reply`."""
        return normalise_reply(http_request(self.server, method, path, body, headers))


# ---------------------------------------------------------------------------------------------
# Cases and running them


@dataclass(frozen=True)
class Case:
    """One step of the sequence.

    ``raw`` cases speak HTTP directly and run only in the HTTP pass; the others use
    :attr:`Target.client` and run over every client protocol.
    """

    name: str
    group: str
    description: str
    run: Callable[[Target], Any]
    raw: bool = False


@dataclass
class CaseRegistry:
    """The ordered case list; order matters (statistics count everything sent before)."""

    cases: list[Case] = field(default_factory=list)

    def add(self, name: str, group: str, description: str, run, raw: bool = False) -> None:
        if any(c.name == name for c in self.cases):
            raise ValueError(f"duplicate case name {name!r}")
        self.cases.append(Case(name, group, description, run, raw))

    def case(self, name: str, group: str, description: str, raw: bool = False):
        """Decorator form of :meth:`add`."""

        def register(fn: Callable[[Target], Any]) -> Callable[[Target], Any]:
            self.add(name, group, description, fn, raw)
            return fn

        return register

    def for_protocol(self, protocol: str) -> list[Case]:
        return [c for c in self.cases if protocol == "http" or not c.raw]


def run_sequence(server: Server, cases: Iterable[Case], protocol: str = "http") -> dict[str, Any]:
    """Run ``cases`` in order against ``server``; case name -> observation.

    A case that raises (a driver bug or a connection failure) is recorded as
    ``{"driver_error": ...}`` so one broken case cannot hide the others.
    """
    session = SESSIONS[protocol](server)
    target = Target(server, session)
    observations: dict[str, Any] = {}
    try:
        for case in cases:
            try:
                observations[case.name] = case.run(target)
            except Exception as err:
                observations[case.name] = {"driver_error": f"{type(err).__name__}: {err}"}
    finally:
        session.close()
    return observations


# ---------------------------------------------------------------------------------------------
# Comparison


@dataclass(frozen=True)
class Mismatch:
    """One leaf that differs: ``path`` like ``/body/outputs/0/shape``."""

    case: str
    path: str
    reference: Any
    rayton: Any

    def __str__(self) -> str:
        return f"{self.case}{self.path or '/'}: reference={self.reference!r} rayton={self.rayton!r}"


def diff(reference: Any, rayton: Any, path: str = "") -> Iterator[tuple[str, Any, Any]]:
    """Differing leaves of two observations as ``(path, reference, rayton)``.

    Dict keys are matched by name (a key one side lacks reports :data:`MISSING`); lists by
    position. Leaves must have the same JSON type: ``1`` and ``1.0`` and ``True`` differ.
    """
    if isinstance(reference, dict) and isinstance(rayton, dict):
        for key in sorted(set(reference) | set(rayton), key=str):
            yield from diff(reference.get(key, MISSING), rayton.get(key, MISSING), f"{path}/{key}")
        return
    if isinstance(reference, list) and isinstance(rayton, list) and len(reference) == len(rayton):
        for index, (left, right) in enumerate(zip(reference, rayton, strict=True)):
            yield from diff(left, right, f"{path}/{index}")
        return
    if type(reference) is not type(rayton) or reference != rayton:
        yield path, reference, rayton


def compare(
    case: str, reference: Any, rayton: Any, allowed: Iterable[Any] = ()
) -> tuple[list[Mismatch], set[Any]]:
    """Mismatches of one case not covered by ``allowed`` entries, and the entries that matched.

    An allow-list entry (:class:`tests.conformance.allowlist.Difference`) covers a mismatch
    when its ``case`` and ``path`` patterns match and its pinned values (if any) agree.
    """
    unexplained: list[Mismatch] = []
    used: set[Any] = set()
    for path, left, right in diff(reference, rayton):
        mismatch = Mismatch(case, path, left, right)
        entry = next((e for e in allowed if covers(e, mismatch)), None)
        if entry is None:
            unexplained.append(mismatch)
        else:
            used.add(entry)
    return unexplained, used


def covers(entry: Any, mismatch: Mismatch) -> bool:
    """Whether an allow-list entry explains ``mismatch``."""
    if not glob_match(entry.case, mismatch.case) or not glob_match(entry.path, mismatch.path):
        return False
    return entry.accepts(mismatch.reference, mismatch.rayton)


def glob_match(pattern: str, text: str) -> bool:
    """``*`` matches any run of characters; everything else, brackets included, is literal."""
    regex = ".*".join(re.escape(part) for part in pattern.split("*"))
    return re.fullmatch(regex, text, re.DOTALL) is not None
