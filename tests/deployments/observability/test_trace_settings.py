"""Triton's trace settings: defaults, checks and messages (captured from tritonserver 2.51),
per-model overrides, null resets, and the count the traces use up."""

from __future__ import annotations

import pytest

from deployments.observability.trace_settings import (
    TraceSettings,
    TraceSettingsTable,
)
from repo_adapter.errors import InferenceServerError, StatusCode

TRACING = TraceSettings(level=("TIMESTAMPS",), rate=1, file="/tmp/trace.json")


def test_defaults_are_tritons():
    assert TraceSettingsTable(TraceSettings()).view() == {
        "trace_level": ["OFF"],
        "trace_rate": "1000",
        "trace_count": "-1",
        "log_frequency": "0",
        "trace_file": "",
        "trace_mode": "triton",
    }


def test_numbers_travel_as_strings_and_unknown_keys_are_ignored():
    table = TraceSettingsTable(TRACING)
    view = table.update({"trace_rate": "5", "trace_count": "3", "log_frequency": "2", "x": 1})
    assert (view["trace_rate"], view["trace_count"], view["log_frequency"]) == ("5", "3", "2")
    assert table.update({"trace_level": ["TIMESTAMPS", "TENSORS"]})["trace_level"] == [
        "TIMESTAMPS",
        "TENSORS",
    ]
    assert table.update({"trace_mode": "opentelemetry"})["trace_mode"] == "triton"


@pytest.mark.parametrize(
    ("changes", "message", "code"),
    [
        ({"trace_rate": 5}, "attempt to access JSON non-string as string", StatusCode.INVALID_ARG),
        ({"trace_rate": "x"}, "Unable to parse 'trace_rate', got: x", StatusCode.INVALID_ARG),
        ({"trace_rate": "-1"}, "Unable to parse 'trace_rate', got: -1", StatusCode.INVALID_ARG),
        (
            {"trace_rate": "0"},
            "Attempting to set invalid trace setting :sample rate must be non-zero",
            StatusCode.INVALID_ARG,
        ),
        (
            {"trace_count": "-5"},
            "Unable to parse 'trace_count'. Expecting value >= -1, got:-5",
            StatusCode.INVALID_ARG,
        ),
        ({"log_frequency": "x"}, "Unable to parse 'log_frequency', got: x", StatusCode.INVALID_ARG),
        (
            {"trace_level": "TIMESTAMPS"},
            "attempt to access JSON non-array as array",
            StatusCode.INVALID_ARG,
        ),
        (
            {"trace_level": ["OFF", "TIMESTAMPS"]},
            "Expect only one trace level 'OFF' is specified",
            StatusCode.INVALID_ARG,
        ),
        ({"trace_level": ["BOGUS"]}, "Unable to parse 'trace_level', got: BOGUS", None),
        ({"trace_level": []}, "Unable to parse 'trace_level', got: []", None),
        (
            {"trace_file": "/tmp/x.json"},
            "trace file location can not be updated through network protocol",
            StatusCode.UNSUPPORTED,
        ),
        ([1], "trace settings must be a JSON object", StatusCode.INVALID_ARG),
    ],
)
def test_bad_settings_change_nothing(changes, message, code):
    table = TraceSettingsTable(TRACING)
    before = table.view()
    with pytest.raises(InferenceServerError) as caught:
        table.update(changes)
    assert str(caught.value).startswith(message)
    assert caught.value.code is (code or StatusCode.INVALID_ARG)
    assert table.view() == before


def test_tracing_needs_a_file():
    table = TraceSettingsTable(TraceSettings())
    with pytest.raises(InferenceServerError, match="trace file name is not given"):
        table.update({"trace_level": ["TIMESTAMPS"]})
    with pytest.raises(InferenceServerError, match="trace file name is not given"):
        TraceSettingsTable(TraceSettings(level=("TIMESTAMPS",)))


def test_model_overrides_fall_back_to_the_server_when_cleared():
    table = TraceSettingsTable(TRACING)
    assert table.update({"trace_rate": "7"}, "m")["trace_rate"] == "7"
    assert table.view()["trace_rate"] == "1"  # the server keeps its own
    table.update({"trace_rate": "9", "trace_count": "4"})
    assert table.view("m")["trace_rate"] == "7"  # the override wins
    assert table.view("m")["trace_count"] == "4"  # the rest follows the server
    assert table.update({"trace_rate": None}, "m")["trace_rate"] == "9"
    assert "m" not in table.overrides


def test_null_resets_a_server_setting_to_its_start_up_value():
    table = TraceSettingsTable(TRACING)
    table.update({"trace_rate": "5", "trace_level": ["TENSORS"]})
    view = table.update({"trace_rate": None, "trace_level": None})
    assert (view["trace_rate"], view["trace_level"]) == ("1", ["TIMESTAMPS"])


def test_counts_are_used_up_by_their_owner():
    table = TraceSettingsTable(TraceSettings(level=("TIMESTAMPS",), count=3, file="/t"))
    assert table.take("a", 2) == 2
    assert table.take("b", 5) == 1  # the server's count is shared by models without their own
    assert table.view()["trace_count"] == "0"
    table.update({"trace_count": "1"}, "own")
    assert table.take("own", 4) == 1
    assert table.view("own")["trace_count"] == "0"
    assert TraceSettingsTable(TRACING).take("a", 10) == 10  # -1: no limit


def test_the_replicas_table_carries_the_effective_settings():
    table = TraceSettingsTable(TRACING)
    table.update({"trace_level": ["TENSORS"], "trace_rate": "3"}, "m")
    plan = table.plan()
    server, models = plan.server, plan.models
    assert server == TRACING
    assert models["m"] == TraceSettings(level=("TENSORS",), rate=3, file="/tmp/trace.json")
