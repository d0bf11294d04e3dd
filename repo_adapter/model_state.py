"""A model version's state, as Triton's repository index names it: the one definition.

Every part that reports or reads a version's state (replicas, the repository controller, the
repository index, ``rayton status``) uses :class:`ModelState` and :class:`VersionState`; the
wire format writes the enum's value, which is Triton's name for the state.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class ModelState(str, Enum):
    """Triton's model (version) states; the value is the name on the wire."""

    READY = "READY"
    UNAVAILABLE = "UNAVAILABLE"
    LOADING = "LOADING"
    UNLOADING = "UNLOADING"

    def __str__(self) -> str:  # formatted as on the wire, not as "ModelState.READY"
        return self.value


@dataclass(frozen=True)
class VersionState:
    """One version's state and, where it is not ready, why."""

    state: ModelState
    reason: str = ""

    @property
    def ready(self) -> bool:
        return self.state is ModelState.READY


VersionStates = dict[str, VersionState]  # version string -> its state
