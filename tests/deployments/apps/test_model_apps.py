"""What the controller reads from Serve's status about replicas that failed: a deployment
Serve marks UNHEALTHY, and one that recovered between two looks (Serve's status structures,
no cluster)."""

from __future__ import annotations

from ray.serve.schema import (
    ApplicationStatusOverview,
    DeploymentStatusOverview,
    ServeStatus,
)

from deployments.apps.model_apps import ServeModelApps


class StatusSequence:
    """Serve's status at each look, in order (what ``serve.status()`` would answer)."""

    def __init__(self, states: list[tuple[str, str, str]]) -> None:
        self.states = list(states)

    async def get(self) -> ServeStatus:
        status, trigger, message = self.states.pop(0)
        deployment = DeploymentStatusOverview(status, trigger, {}, message)
        app = ApplicationStatusOverview("RUNNING", "", 0.0, {"m": deployment})
        return ServeStatus(applications={"m": app})


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
