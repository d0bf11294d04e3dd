"""Option parsing and validation of ``rayton perf`` (no server)."""

from __future__ import annotations

import pytest

from rayton_perf.cli import build_parser, config_from_args, levels_from_args, main
from rayton_perf.config import MAX_LEVELS, PerfConfig, PerfError, parse_range, parse_shape


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1", [1]),
        ("4", [4]),
        ("1:4", [1, 2, 3, 4]),
        ("1:8:2", [1, 3, 5, 7]),
        ("2:8:3", [2, 5, 8]),
        (" 3:3 ", [3]),
    ],
)
def test_parse_int_range(text, expected):
    assert parse_range(text, int) == expected


def test_parse_float_range_tolerates_rounding():
    assert parse_range("0.1:0.3:0.1", float) == [0.1, 0.2, 0.3]
    assert parse_range("100:300:100", float) == [100.0, 200.0, 300.0]
    assert parse_range("50", float) == [50.0]


@pytest.mark.parametrize(
    "text", ["", ":", "1:", "a", "1:2:3:4", "0", "0:4", "4:1", "1:4:0", "1:4:-1", "1.5", "inf"]
)
def test_parse_range_rejects(text):
    with pytest.raises(PerfError):
        parse_range(text, int if text != "inf" else float)


def test_parse_range_is_bounded():
    with pytest.raises(PerfError, match="at most"):
        parse_range(f"1:{MAX_LEVELS + 1}", int)
    assert len(parse_range(f"1:{MAX_LEVELS}", int)) == MAX_LEVELS


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("IN:4", ("IN", [4])),
        ("IN:3,224,224", ("IN", [3, 224, 224])),
        ("a:b:2,2", ("a:b", [2, 2])),  # the name is everything before the last colon
        ("SCALAR:", ("SCALAR", [])),
    ],
)
def test_parse_shape(text, expected):
    assert parse_shape(text) == expected


@pytest.mark.parametrize("text", ["IN", ":4", "IN:x", "IN:4,-1", "IN:4,,2"])
def test_parse_shape_rejects(text):
    with pytest.raises(PerfError):
        parse_shape(text)


def test_resolved_url_defaults_per_protocol():
    assert PerfConfig("m").resolved_url == "localhost:8000"
    assert PerfConfig("m", protocol="grpc").resolved_url == "localhost:8001"
    assert PerfConfig("m", url="http://h:1/").resolved_url == "h:1"


@pytest.mark.parametrize(
    "changes",
    [
        {"batch_size": 0},
        {"protocol": "ws"},
        {"measurement_interval_ms": 0},
        {"stability_percentage": 0},
        {"max_trials": 0},
        {"percentile": 100},
        {"warmup_s": -1},
        {"request_distribution": "uniform"},
        {"request_timeout_s": 0},
    ],
)
def test_validate_rejects(changes):
    config = PerfConfig("m", **changes)
    with pytest.raises(PerfError):
        config.validate()


def test_cli_options_map_to_config():
    args = build_parser().parse_args(
        [
            "-m", "ident", "-x", "2", "-u", "h:9", "-i", "GRPC", "-b", "4",
            "--shape", "IN:4", "--shape", "MASK:2,2", "--input-data", "zero",
            "-p", "750", "-s", "5", "-r", "7", "--percentile", "95", "--warmup", "0.5",
            "--json", "--timeout", "3", "--request-count", "20",
        ]
    )  # fmt: skip
    config = config_from_args(args)
    assert config.model_version == "2"
    assert config.protocol == "grpc"
    assert config.resolved_url == "h:9"
    assert config.batch_size == 4
    assert config.shapes == {"IN": [4], "MASK": [2, 2]}
    assert config.input_data == "zero"
    assert config.measurement_interval_ms == 750
    assert config.stability_percentage == 5
    assert config.max_trials == 7
    assert config.percentile == 95
    assert config.warmup_s == 0.5
    assert config.binary_inputs is False
    assert config.request_timeout_s == 3
    assert config.request_count == 20
    assert levels_from_args(args) == ("concurrency", [1])


def test_cli_levels():
    parser = build_parser()
    args = parser.parse_args(["-m", "x", "--request-rate-range", "10:30:10"])
    assert levels_from_args(args) == ("request_rate", [10.0, 20.0, 30.0])
    args = parser.parse_args(["-m", "x", "--concurrency-range", "2:6:2"])
    assert levels_from_args(args) == ("concurrency", [2, 4, 6])


def test_main_usage_errors_return_2(capsys):
    assert main([]) == 2  # -m is required
    assert main(["-m", "x", "--concurrency-range", "1", "--request-rate-range", "1"]) == 2
    assert main(["-m", "x", "--concurrency-range", "4:1"]) == 2
    assert "end must be >= start" in capsys.readouterr().err
    assert main(["-m", "x", "--shape", "bad"]) == 2


def test_main_help_returns_0(capsys):
    assert main(["--help"]) == 0
    assert "--concurrency-range" in capsys.readouterr().out
