"""What the controller reads from Serve's status about replicas that failed: a deployment
Serve marks UNHEALTHY, and one that recovered between two looks (the states
``cluster.serve_internals.serve_applications`` reads, no cluster)."""

from __future__ import annotations

from cluster.serve_internals import ApplicationState, DeploymentState
from deployments.apps.model_apps import ServeModelApps


class StatusSequence:
    """Serve's applications at each look, in order (what ``serve_applications()`` would
    answer)."""

    def __init__(self, states: list[tuple[str, str, str]]) -> None:
        self.states = list(states)

    async def get(self) -> dict[str, ApplicationState]:
        status, trigger, message = self.states.pop(0)
        deployment = DeploymentState(status, trigger, message, {})
        return {"m": ApplicationState("RUNNING", "", {"m": deployment})}


async def looks(states: list[tuple[str, str, str]]) -> list[dict[str, str]]:
    apps = ServeModelApps()
    apps._serve_status = StatusSequence(states)
    return [await apps.replica_failures() for _ in states]


async def test_an_unhealthy_deployment_is_reported_once_per_failure():
    seen = await looks(
        [
            ("HEALTHY", "CONFIG_UPDATE_COMPLETED", ""),
            ("UNHEALTHY", "HEALTH_CHECK_FAILED", "Replica died. More."),
            ("UNHEALTHY", "HEALTH_CHECK_FAILED", "Replica died. More."),
            ("HEALTHY", "UNSPECIFIED", ""),
            ("HEALTHY", "UNSPECIFIED", ""),
        ]
    )
    assert seen == [{}, {"m": "Replica died. More."}, {}, {}, {}]


async def test_a_recovery_between_two_looks_is_a_failure_too():
    seen = await looks(
        [
            ("HEALTHY", "CONFIG_UPDATE_COMPLETED", ""),
            ("HEALTHY", "UNSPECIFIED", ""),  # UNHEALTHY came and went between the looks
            ("HEALTHY", "UNSPECIFIED", ""),
            ("UPDATING", "CONFIG_UPDATE_STARTED", ""),
            ("HEALTHY", "CONFIG_UPDATE_COMPLETED", ""),
            ("HEALTHY", "UPSCALE_COMPLETED", ""),
        ]
    )
    assert seen == [{}, {"m": "a replica failed and was replaced"}, {}, {}, {}, {}]


async def test_a_recovered_deployment_seen_first_is_no_failure():
    assert await looks([("HEALTHY", "UNSPECIFIED", "")]) == [{}]
