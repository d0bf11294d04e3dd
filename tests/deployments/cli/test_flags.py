"""Flags generated from the settings models: names, choices, defaults, and the settings the
parsed flags validate into."""

from __future__ import annotations

import argparse
from typing import Annotated, Literal

import pytest
from pydantic import BaseModel, Field, ValidationError

from deployments.apps.server_args import ServerAppArgs
from deployments.cli.build import BuildSettings
from deployments.cli.flags import add_flags, settings_from_flags, validation_message
from deployments.cli.serve import DEFAULT_SCALE_FROM_ZERO_TIMEOUT_S, ServeSettings
from deployments.command_flag import Flag

ENDPOINT_FLAGS = {
    "--http-host",
    "--http-port",
    "--grpc-port",
    "--grpc-host",
    "--http-max-input-size",
    "--python-instances",
    "--batch-admission",
    "--backend-directory",
    "--backend-config",
    "--metrics-port",
    "--metrics-address",
    "--allow-metrics",
    "--allow-gpu-metrics",
    "--allow-cpu-metrics",
    "--metrics-interval-ms",
    "--metrics-config",
    "--load-model",
}
SERVE_FLAGS = ENDPOINT_FLAGS | {
    "--model-repository",
    "--model-control-mode",
    "--repository-poll-secs",
    "--model-load-timeout-secs",
    "--cpu-models",
    "--host-replicas",
    "--model-file-override-dir",
    "--strict-readiness",
    "--load-on-demand",
    "--load-on-demand-timeout-secs",
    "--memory-budget",
    "--gpu-memory-budget",
    "--cache-config",
    "--allow-client-shm",
    "--log-file",
    "--log-info",
    "--log-warning",
    "--log-error",
    "--log-verbose",
    "--log-format",
    "--trace-config",
    "--address",
    "--proxy-location",
    "--grpc-ingress",
    "--scale-from-zero-timeout-secs",
    "--dashboard-port",
}


def parser_of(model: type[BaseModel]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    add_flags(parser, model)
    return parser


def option_strings(parser: argparse.ArgumentParser) -> set[str]:
    return {name for action in parser._actions for name in action.option_strings} - {
        "-h",
        "--help",
    }


def serve_settings(*flags: str) -> ServeSettings:
    args = parser_of(ServeSettings).parse_args(["--model-repository", "r", *flags])
    return settings_from_flags(ServeSettings, args)


def test_serve_and_build_keep_every_flag_name():
    assert option_strings(parser_of(ServeSettings)) == SERVE_FLAGS
    assert option_strings(parser_of(BuildSettings)) == ENDPOINT_FLAGS | {"-o", "--output"}


def test_flags_left_out_take_the_settings_defaults():
    settings = serve_settings()
    assert settings.server == ServerAppArgs(model_repository="r", deploy_models=True)
    assert settings.model_dump(exclude={"server"}) == ServeSettings(
        server={"model_repository": "r"}
    ).model_dump(exclude={"server"})


def test_true_false_flags_are_booleans_and_choices_come_from_the_types():
    settings = serve_settings(
        "--strict-readiness", "false", "--log-info", "false", "--allow-gpu-metrics", "false"
    )
    assert settings.server.strict_readiness is False
    assert settings.server.log_info is False and settings.server.log_warning is True
    assert settings.endpoints.metrics.allow_gpu_metrics is False
    choices = {action.dest: action.choices for action in parser_of(ServeSettings)._actions}
    assert choices["log_error"] == ("true", "false")
    assert choices["model_control_mode"] == ("none", "poll", "explicit")
    assert choices["grpc_ingress"] == ("auto", "haproxy", "frontend")


def test_flags_fill_the_fields_they_name_with_their_types():
    settings = serve_settings(
        "--model-control-mode",
        "explicit",
        "--load-model",
        "a",
        "--load-model",
        "b",
        "--log-verbose",
        "2",
        "--repository-poll-secs",
        "2.5",
        "--metrics-config",
        "counter_latencies=false",
        "--grpc-port",
        "0",
        "--host-replicas",
        "2",
    )
    assert settings.server.load_models == ["a", "b"]
    assert settings.server.host_replicas == 2
    assert settings.server.log_verbose_level == 2
    assert settings.server.repository_poll_secs == 2.5
    assert settings.endpoints.metrics.metrics_config == ["counter_latencies=false"]
    assert settings.endpoints.grpc_port == 0


def test_fields_not_marked_are_no_flags(capsys):
    for flag in ("--deploy-models", "--models", "--trace-file"):
        with pytest.raises(SystemExit):
            parser_of(ServeSettings).parse_args(["--model-repository", "r", flag, "x"])
        assert f"unrecognized arguments: {flag} x" in capsys.readouterr().err


def test_a_refused_value_names_its_flag():
    with pytest.raises(ValidationError) as refused:
        serve_settings("--repository-poll-secs", "0")
    message = validation_message(refused.value, ServeSettings)
    assert message == "--repository-poll-secs: Input should be greater than 0"
    with pytest.raises(ValidationError) as refused:
        serve_settings("--host-replicas", "0")
    message = validation_message(refused.value, ServeSettings)
    assert message == "--host-replicas: Input should be greater than or equal to 1"


def test_backend_config_flags_reach_the_backend_settings():
    settings = serve_settings(
        "--backend-config", "scale,factor=3", "--backend-config", "scale,mode=fast"
    )
    backends = settings.server.backend_settings()
    assert backends.cmdline("scale")["factor"] == "3"
    assert backends.cmdline("scale")["mode"] == "fast"
    with pytest.raises(ValidationError) as refused:
        serve_settings("--backend-config", "factor=3")
    message = validation_message(refused.value, ServeSettings)
    assert message == (
        "--backend-config option format is '<backend name>,<setting>=<value>', got 'factor=3'"
    )


def test_cache_config_sets_each_nodes_response_cache_size():
    settings = serve_settings("--cache-config", "local,size=1048576")
    assert settings.server.response_cache_bytes() == 1048576
    assert serve_settings().server.response_cache_bytes() == 0
    for value, problem in (
        ("size=10", " option format is '<cache name>,<setting>=<value>', got 'size=10'"),
        ("redis,host=h", ": only the 'local' response cache is supported, got 'redis'"),
        ("local,capacity=10", ": the local cache has no setting 'capacity'"),
        ("local,size=1k", ": size must be a number of bytes, got '1k'"),
    ):
        with pytest.raises(ValidationError) as refused:
            serve_settings("--cache-config", value)
        assert validation_message(refused.value, ServeSettings) == f"--cache-config{problem}"


class Inner(BaseModel):
    level: Annotated[Literal["low", "high"], Flag(short="-l")] = Field("low", description="how")


class Outer(BaseModel):
    path: Annotated[str, Flag(positional=True)]
    count: Annotated[int, Flag("--how-many", metavar="N")] = 1
    hidden: int = 0
    inner: Inner = Field(default_factory=Inner)


def test_a_nested_settings_model_adds_its_flags_and_gets_its_values():
    parser = parser_of(Outer)
    assert option_strings(parser) == {"--how-many", "-l", "--level"}
    settings = settings_from_flags(Outer, parser.parse_args(["p", "--how-many", "3", "-l", "high"]))
    assert settings == Outer(path="p", count=3, inner=Inner(level="high"))
    assert settings_from_flags(Outer, parser.parse_args(["p"])) == Outer(path="p")
    help_text = parser.format_help()
    assert "--how-many N" in help_text and "how" in help_text


def test_a_memory_budget_needs_on_demand_loading_and_a_size():
    settings = serve_settings("--load-on-demand", "true", "--memory-budget", "30%")
    assert settings.server.load_on_demand and settings.server.memory_budget == "30%"
    with pytest.raises(ValueError, match="needs load_on_demand"):
        serve_settings("--memory-budget", "2GiB")
    with pytest.raises(ValueError, match="not a size in bytes"):
        serve_settings("--load-on-demand", "true", "--memory-budget", "lots")
    with pytest.raises(ValueError, match="none or explicit"):
        serve_settings("--load-on-demand", "true", "--model-control-mode", "poll")


def test_a_gpu_memory_budget_is_a_size_per_gpu_and_needs_on_demand_loading():
    settings = serve_settings("--load-on-demand", "true", "--gpu-memory-budget", "20GiB")
    assert settings.server.gpu_memory_budget == "20GiB" and settings.server.memory_budget is None
    with pytest.raises(ValueError, match="needs load_on_demand"):
        serve_settings("--gpu-memory-budget", "20GiB")
    with pytest.raises(ValueError, match="does not report a GPU's memory"):
        serve_settings("--load-on-demand", "true", "--gpu-memory-budget", "50%")


def test_serves_proxy_holds_a_request_for_a_model_at_zero_replicas_a_bounded_time():
    """Only on a cluster rayton starts: there Serve's proxy is HAProxy's fallback."""
    assert serve_settings().held_request_timeout_s() == DEFAULT_SCALE_FROM_ZERO_TIMEOUT_S
    held = serve_settings("--scale-from-zero-timeout-secs", "2.5").held_request_timeout_s()
    assert held == 2.5
    assert serve_settings("--address", "10.0.0.1:6379").held_request_timeout_s() is None
    with pytest.raises(ValidationError, match="cluster rayton starts"):
        serve_settings("--address", "10.0.0.1:6379", "--scale-from-zero-timeout-secs", "5")
    with pytest.raises(ValidationError, match="greater than 0"):
        serve_settings("--scale-from-zero-timeout-secs", "0")
