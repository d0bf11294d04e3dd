"""The server application's arguments: Triton's ``--trace-config`` and its checks, and the
log settings."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from deployments.apps.server_args import ServerAppArgs, parse_trace_config
from deployments.observability.log_settings import LogSettings


def test_trace_config_as_triton_writes_it():
    fields = parse_trace_config(
        [
            "triton,file=/tmp/trace.json",
            "triton,log-frequency=50",
            "rate=100",
            "level=TIMESTAMPS",
            "level=TENSORS",
            "count=10",
            "mode=triton",
        ]
    )
    assert fields == {
        "trace_file": "/tmp/trace.json",
        "trace_log_frequency": 50,
        "trace_rate": 100,
        "trace_level": ["TIMESTAMPS", "TENSORS"],
        "trace_count": 10,
        "trace_mode": "triton",
    }
    args = ServerAppArgs(model_repository="r", deploy_models=True, **fields)
    assert args.trace_level == ["TIMESTAMPS", "TENSORS"]


def test_opentelemetry_mode_needs_no_trace_file():
    fields = parse_trace_config(
        [
            "mode=opentelemetry",
            "opentelemetry,url=http://127.0.0.1:4318/v1/traces",
            "opentelemetry,resource=service.name=shop",
            "opentelemetry,resource=deployment=blue,green",
            "level=TIMESTAMPS",
        ]
    )
    assert fields == {
        "trace_mode": "opentelemetry",
        "trace_otel_url": "http://127.0.0.1:4318/v1/traces",
        "trace_otel_resource": {"service.name": "shop", "deployment": "blue,green"},
        "trace_level": ["TIMESTAMPS"],
    }
    ServerAppArgs(model_repository="r", deploy_models=True, **fields)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("rate", "expects [MODE,]SETTING=VALUE"),
        ("rate=x", "rate must be an integer"),
        ("opentelemetry,bsp_max_export_batch_size=5", "unknown setting"),
        ("opentelemetry,resource=novalue", "resource expects KEY=VALUE"),
        ("triton,nope=1", "unknown setting"),
        ("mode=other", "unknown trace mode"),
    ],
)
def test_bad_trace_config_is_refused(value, message):
    with pytest.raises(ValueError, match=message.replace("[", r"\[")):
        parse_trace_config([value])


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"trace_level": ["TIMESTAMPS"]}, "tracing needs a trace file"),
        ({"trace_level": ["OFF", "TENSORS"], "trace_file": "/t"}, "OFF cannot be combined"),
        ({"trace_rate": 0}, "greater than 0"),
        ({"trace_count": -2}, "greater than or equal to -1"),
        ({"trace_level": ["LOUD"], "trace_file": "/t"}, "TIMESTAMPS"),
    ],
)
def test_start_up_trace_settings_are_checked(fields, message):
    with pytest.raises(ValidationError, match=message):
        ServerAppArgs(model_repository="r", deploy_models=True, **fields)


def test_log_settings_are_the_log_fields():
    args = ServerAppArgs(
        model_repository="r",
        log_file="/tmp/rayton.log",
        log_info=False,
        log_verbose_level=2,
        log_format="ISO8601",
    )
    assert args.log_settings() == LogSettings(
        log_file="/tmp/rayton.log",
        log_info=False,
        log_warning=True,
        log_error=True,
        log_verbose_level=2,
        log_format="ISO8601",
    )
    assert ServerAppArgs(model_repository="r").log_settings() == LogSettings()
