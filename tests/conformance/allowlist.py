"""The one list of deliberate differences between rayton and the reference Triton.

Each entry names the case(s) and observation path(s) it explains (``fnmatch`` patterns), a
one-line reason, and, where it matters, the exact values each side must show: a pinned entry
cannot hide a regression on the rayton side. The suite fails on any difference not listed
here, and on any entry that no longer matches a difference (so the list cannot go stale).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

ANY = object()  # an unpinned side: any value is accepted


@dataclass(frozen=True)
class Difference:
    """A deliberate difference.

    ``reference`` / ``rayton`` pin each side's value; ``relation(reference, rayton)``, when
    given, must hold between the two values instead.
    """

    case: str
    path: str
    reason: str
    reference: Any = ANY
    rayton: Any = ANY
    relation: Callable[[Any, Any], bool] | None = None

    def accepts(self, reference: Any, rayton: Any) -> bool:
        if self.relation is not None:
            return bool(self.relation(reference, rayton))
        return _same(self.reference, reference) and _same(self.rayton, rayton)


def _same(expected: Any, value: Any) -> bool:
    return expected is ANY or (type(expected) is type(value) and expected == value)


# Extensions the reference lists and rayton does not implement yet, so does not advertise.
_UNIMPLEMENTED_EXTENSIONS = (
    "sequence",
    "model_repository(unload_dependents)",
    "system_shared_memory",
    "cuda_shared_memory",
    "trace",
    "logging",
)


def _extensions_minus_unimplemented(reference: Any, rayton: Any) -> bool:
    # rayton lists exactly the reference's extensions minus the unimplemented ones.
    if not isinstance(reference, list) or not isinstance(rayton, list):
        return False
    return set(rayton) == set(reference) - set(_UNIMPLEMENTED_EXTENSIONS)


ALLOWED: tuple[Difference, ...] = (
    Difference(
        "server_metadata",
        "/body/name",
        "A different server reports its own name.",
        reference="triton",
        rayton="rayton",
    ),
    Difference(
        "server_metadata",
        "/body/version",
        "A different server reports its own version.",
        reference="2.51.0",
        rayton="0.1.0",
    ),
    Difference(
        "server_metadata",
        "/body/extensions",
        "Only implemented extensions are advertised (clients such as perf_analyzer act on "
        "the list); sequence batching, shared memory, trace, logging and "
        "unload_dependents are not implemented yet.",
        relation=_extensions_minus_unimplemented,
    ),
)
