"""Every deployment answers the typed surfaces other deployments call it by (no Ray needed)."""

import inspect

import pytest

from deployments.apps.ensemble_deployment import TritonEnsemble
from deployments.apps.grpc_deployment import TritonGrpcServer
from deployments.apps.host_deployment import TritonModelHost
from deployments.apps.metrics_deployment import TritonMetrics
from deployments.apps.model_deployment import TritonModel
from deployments.apps.replica_api import ModelReplicaApi, ReplicaControlApi, SharedHostApi
from deployments.apps.router_deployment import TritonModelRouter
from deployments.apps.server_deployment import TritonServer

MODEL_DEPLOYMENTS = [TritonModel, TritonModelRouter, TritonEnsemble, TritonModelHost]
ALL_DEPLOYMENTS = [*MODEL_DEPLOYMENTS, TritonServer, TritonGrpcServer, TritonMetrics]


def _methods(protocol: type) -> dict[str, inspect.Signature]:
    return {
        name: inspect.signature(member)
        for name, member in vars(protocol).items()
        if inspect.isfunction(member) and not name.startswith("_")
    }


def _assert_implements(deployment, protocol: type) -> None:
    cls = deployment.func_or_class  # the class under @serve.deployment
    for name, wanted in _methods(protocol).items():
        member = getattr(cls, name, None)
        assert member is not None, f"{cls.__name__} lacks {protocol.__name__}.{name}"
        found = inspect.signature(member)
        assert list(found.parameters) == list(wanted.parameters), (cls.__name__, name)
        assert inspect.iscoroutinefunction(member) == inspect.iscoroutinefunction(
            getattr(protocol, name)
        ), f"{cls.__name__}.{name} is not awaited as its callers await it"


@pytest.mark.parametrize("deployment", MODEL_DEPLOYMENTS, ids=lambda d: d.name)
def test_every_model_deployment_answers_the_model_calls(deployment):
    _assert_implements(deployment, ModelReplicaApi)


@pytest.mark.parametrize("deployment", ALL_DEPLOYMENTS, ids=lambda d: d.name)
def test_every_deployment_answers_the_control_plane(deployment):
    _assert_implements(deployment, ReplicaControlApi)


def test_the_shared_host_reports_every_hosted_model():
    _assert_implements(TritonModelHost, SharedHostApi)


def test_the_surfaces_are_not_empty():
    assert {"infer", "infer_wire", "slot_status"} <= set(_methods(ModelReplicaApi))
    assert {"apply_log_settings", "replica_info"} <= set(_methods(ReplicaControlApi))
