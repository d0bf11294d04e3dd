"""The Serve config ``rayton build`` writes: valid for ``serve run``, one app per model."""

from __future__ import annotations

from ray.serve.schema import ServeDeploySchema

from cluster.local import REPLICA_MESSAGE_ENV
from deployments.apps.builders import SERVER_APP_NAME, plan_applications
from deployments.apps.serve_config import serve_config


def test_every_application_lifts_the_replica_message_limit(example_repository):
    plans, _ = plan_applications(example_repository, grpc_port=8001)
    config = serve_config(plans, http_port=9000)
    ServeDeploySchema.model_validate(config)
    assert config["applications"][0]["name"] == SERVER_APP_NAME
    for app in config["applications"]:
        env = app["runtime_env"]["env_vars"]
        assert env == REPLICA_MESSAGE_ENV, app["name"]
    assert int(REPLICA_MESSAGE_ENV["RAY_SERVE_REPLICA_GRPC_MAX_MESSAGE_LENGTH"]) == 2**31 - 1
