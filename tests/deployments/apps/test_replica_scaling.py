"""The controller's record of its models' replica counts, without Ray: counts read from a
table standing for Serve's status, scale-ups and scale-downs summed between looks."""

from __future__ import annotations

from deployments.apps.replica_scaling import ReplicaScaling
from deployments.metrics.replica_gauges import ModelScaling


async def test_scale_ups_and_downs_add_up_between_looks_and_unserved_models_go():
    running = {"m": 1, "n": 2}

    async def count(targets: list[tuple[str, str]]) -> int:
        return sum(running[app] for _, app in targets)

    scaling = ReplicaScaling(count)
    served = {"m": [("m", "m")], "n": [("n", "n")]}
    await scaling.look(served)
    assert scaling.records() == [ModelScaling("m", 1, 0, 0), ModelScaling("n", 2, 0, 0)]
    running["m"] = 3
    await scaling.look(served)
    running["m"] = 0
    await scaling.look(served)
    running["m"] = 1
    await scaling.look({"m": served["m"]})
    assert scaling.records() == [ModelScaling("m", 1, 3, 3)]
