"""The system and CUDA shared-memory regions as a replica sees them: the process's
:class:`~deployments.core.shared_memory.MappedRegions`, told by the repository controller
(which owns the table) of each region the first time a request names it, and of every
unregistration before the client gets its answer."""

from __future__ import annotations

import ray

from deployments.apps.repository_access import ControllerSharedMemory
from deployments.core.shared_memory import MappedRegions, process_regions


def replica_regions() -> MappedRegions:
    """This process's regions, set to ask the controller (the first call sets them up)."""
    regions = process_regions()
    if regions.fetch is None:
        regions.node_id = ray.get_runtime_context().get_node_id() if ray.is_initialized() else ""
        regions.fetch = ControllerSharedMemory().regions
    return regions
