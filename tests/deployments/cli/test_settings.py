"""The settings ``rayton build`` and ``rayton serve`` share: the endpoints and the model
selection."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from deployments.cli.flags import validation_message
from deployments.cli.settings import Endpoints, selected_models
from deployments.metrics.options import MetricsAppArgs


def test_load_model_selects_models_and_star_selects_all():
    assert selected_models(None) is None
    assert selected_models([]) is None
    assert selected_models(["*"]) is None
    assert selected_models(["a", "*"]) is None
    assert selected_models(["a", "b"]) == ["a", "b"]


def test_the_metrics_and_grpc_endpoints_bind_the_http_host_unless_told_otherwise():
    endpoints = Endpoints(http_host="10.0.0.1", metrics=MetricsAppArgs(metrics_interval_ms=500))
    assert endpoints.metrics_app_args() == MetricsAppArgs(
        metrics_host="10.0.0.1", metrics_interval_ms=500
    )
    assert endpoints.grpc_endpoint() == {"grpc_port": 8001, "grpc_host": "10.0.0.1"}
    endpoints = Endpoints(metrics_address="10.0.0.2", grpc_host="10.0.0.3", grpc_port=9001)
    assert endpoints.metrics_app_args().metrics_host == "10.0.0.2"
    assert endpoints.grpc_endpoint() == {"grpc_port": 9001, "grpc_host": "10.0.0.3"}


def test_endpoints_turned_off():
    assert Endpoints(allow_metrics=False).metrics_app_args() is None
    assert Endpoints(grpc_port=0).grpc_endpoint() == {}


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"metrics_port": 70000}, "--metrics-port: Input should be less than or equal to 65535"),
        ({"metrics_config": ["nope=1"]}, "unknown --metrics-config setting 'nope'"),
    ],
)
def test_metrics_settings_are_checked_by_the_metrics_applications_own_model(fields, message):
    with pytest.raises(ValidationError) as refused:
        Endpoints(metrics=fields)
    assert validation_message(refused.value, Endpoints).startswith(message)
