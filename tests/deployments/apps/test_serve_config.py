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


def test_model_args_carry_the_instance_settings_that_differ_from_the_defaults(
    example_repository,
):
    from deployments.apps.builders import MODEL_APP_IMPORT_PATH, ModelAppArgs
    from deployments.apps.model_deployment import InstanceOptions

    def model_args(**settings) -> list[dict]:
        plans, _ = plan_applications(example_repository, grpc_port=8001, **settings)
        return [plan.args for plan in plans if plan.import_path == MODEL_APP_IMPORT_PATH]

    assert all("batch_admission" not in args for args in model_args())
    chosen = model_args(batch_admission="serve-batch", python_instances="in-replica")
    assert chosen and all(args["batch_admission"] == "serve-batch" for args in chosen)
    parsed = ModelAppArgs.model_validate(chosen[0])
    assert InstanceOptions.from_settings(
        parsed.python_instances, parsed.batch_admission
    ) == InstanceOptions(python_stubs=False, serve_batch=True)
    assert InstanceOptions.from_settings("stub-process", "direct") == InstanceOptions(
        python_stubs=True, serve_batch=False
    )
