"""Option parsing and validation of ``rayton perf`` (no server)."""

from __future__ import annotations

import pytest

from rayton_perf.cli import (
    REFUSED_OPTIONS,
    build_parser,
    config_from_args,
    levels_from_args,
    main,
)
from rayton_perf.config import (
    MAX_LEVELS,
    PerfConfig,
    PerfError,
    parse_header,
    parse_range,
    parse_range_bounds,
    parse_shape,
)


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
            "--timeout", "3", "--request-count", "20",
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
    assert config.binary_inputs is True
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


# ---------------------------------------------------------------------------------------------
# perf_analyzer flags added for pasted commands


def _config(*argv: str) -> PerfConfig:
    return config_from_args(build_parser().parse_args(["-m", "x", *argv]))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Authorization:Bearer abc", ("Authorization", "Bearer abc")),
        ("Authorization: Bearer abc ", ("Authorization", "Bearer abc")),
        ("X-Url:http://h:1/p", ("X-Url", "http://h:1/p")),  # split at the first colon only
        ("X-Empty:", ("X-Empty", "")),
    ],
)
def test_parse_header(text, expected):
    assert parse_header(text) == expected


@pytest.mark.parametrize("text", ["NoColon", ":value", " :value"])
def test_parse_header_rejects(text):
    with pytest.raises(PerfError, match="Header:Value"):
        parse_header(text)


def test_headers_map_to_config():
    config = _config("-H", "Authorization: Bearer t", "-H", "X-Trace:1", "-H", "X-Trace:2")
    assert config.headers == {"Authorization": "Bearer t", "X-Trace": "2"}  # later one wins
    assert _config().headers == {}


def test_sync_async_and_max_threads():
    assert _config().synchronous is False
    assert _config().rate_in_flight_limit == 1024
    sync = _config("--sync", "--request-rate-range", "100")
    assert sync.synchronous is True
    assert sync.rate_in_flight_limit == 16  # perf_analyzer's default thread count
    # A pasted perf_analyzer request-rate command is synchronous unless -a: --max-threads
    # bounds the requests in flight as its workers do.
    pasted = _config("--request-rate-range", "100", "--max-threads", "4")
    assert (pasted.synchronous, pasted.max_threads, pasted.rate_in_flight_limit) == (True, 4, 4)
    both = _config("--sync", "--request-rate-range", "100", "--max-threads", "64")
    assert both.rate_in_flight_limit == 64
    capped = _config("--sync", "--request-rate-range", "9", "--max-outstanding", "8")
    assert capped.rate_in_flight_limit == 8  # both bounds hold
    # With -a, or in concurrency mode, threads do not bound the load (as in perf_analyzer).
    async_rate = _config("-a", "--request-rate-range", "100", "--max-threads", "4")
    assert (async_rate.synchronous, async_rate.rate_in_flight_limit) == (False, 1024)
    concurrency = _config("--concurrency-range", "8", "--max-threads", "2")
    assert concurrency.synchronous is False


def test_warmup_options():
    assert _config().warmup_s == 2.0
    counted = _config("--warmup-request-count", "25")
    assert (counted.warmup_request_count, counted.warmup_s) == (25, 0.0)
    assert _config("--warmup", "0").warmup_s == 0.0


def test_latency_threshold_binary_search_and_levels():
    parser = build_parser()
    args = parser.parse_args(
        ["-m", "x", "-l", "50", "--binary-search", "--concurrency-range", "1:64:2"]
    )
    config = config_from_args(args)
    assert (config.latency_threshold_ms, config.binary_search) == (50, True)
    assert levels_from_args(args, config) == ("concurrency", [1, 64])
    args = parser.parse_args(
        ["-m", "x", "--latency-threshold", "9", "--binary-search", "--request-rate-range", "10:20"]
    )
    assert levels_from_args(args, config_from_args(args)) == ("request_rate", [10.0, 20.0])
    assert parse_range_bounds("2:8:3", int) == (2, 8, 3)
    assert parse_range_bounds("5", float) == (5.0, 5.0, 1.0)


def test_request_intervals_option(tmp_path):
    path = tmp_path / "intervals.txt"
    path.write_text("1000\n3000\n")
    args = build_parser().parse_args(["-m", "x", "--request-intervals", str(path)])
    config = config_from_args(args)
    assert config.request_intervals_ns == [1_000_000, 3_000_000]
    assert levels_from_args(args, config) == ("request_rate", [500.0])  # 2 requests per 4 ms
    assert levels_from_args(args) == ("request_rate", [500.0])


def test_output_format_and_metrics_options():
    config = _config("--output-tensor-format", "json")
    assert (config.binary_outputs, config.binary_inputs) == (False, True)
    metrics = _config("--collect-metrics", "-u", "h:9000")
    assert metrics.collect_metrics is True
    assert metrics.resolved_metrics_url == "http://h:8002/metrics"  # perf_analyzer's default
    assert metrics.metrics_interval_ms == 1000
    custom = _config("--collect-metrics", "--metrics-url", "m:1/x", "--metrics-interval", "250")
    assert (custom.resolved_metrics_url, custom.metrics_interval_ms) == ("http://m:1/x", 250)
    assert _config("--shared-memory", "none", "--service-kind", "triton").model_name == "x"
    shared = _config("--shared-memory", "system", "--output-shared-memory-size", "4096")
    assert (shared.shared_memory, shared.output_shared_memory_size) == ("system", 4096)
    assert _config("--shared-memory", "cuda").shared_memory == "cuda"
    args = build_parser().parse_args(["-m", "x", "--verbose-csv", "-f", "out.csv"])
    assert args.verbose_csv is True
    config_from_args(args)  # with -f it has an effect
    counted = _config("--measurement-mode", "count_windows", "--measurement-request-count", "7")
    assert counted.measurement_request_count == 7
    assert (
        _config(
            "--request-rate-range", "5", "--request-distribution", "poisson"
        ).request_distribution
        == "poisson"
    )
    assert _config("--string-length", "4", "--input-data", "zero").string_length == 4


@pytest.mark.parametrize(
    "changes",
    [
        {"warmup_request_count": -1},
        {"warmup_request_count": 5},  # with the default warmup_s: pick one
        {"latency_threshold_ms": -1},
        {"binary_search": True},  # needs a latency threshold
        {"max_threads": 0},
        {"metrics_interval_ms": 0},
        {"request_intervals_ns": [0, 0]},
        {"request_intervals_ns": [5, -1]},
        {"protocol": "grpc", "binary_inputs": False},
        {"protocol": "grpc", "binary_outputs": False},
        {"url": "https://h:443"},
        {"headers": {" ": "x"}},
    ],
)
def test_validate_rejects_new_settings(changes):
    with pytest.raises(PerfError):
        PerfConfig("m", **changes).validate()


def _usage_error(capsys, *argv: str) -> str:
    assert main(["-m", "x", *argv]) == 2
    return capsys.readouterr().err


@pytest.mark.parametrize("flag", sorted(REFUSED_OPTIONS))
def test_refused_perf_analyzer_options_say_why(capsys, flag):
    nargs, reason = REFUSED_OPTIONS[flag]
    argv = [flag] + ["1"] * nargs
    assert reason in _usage_error(capsys, *argv)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--service-kind", "tfserving"], "Triton's protocol only"),
        (["--service-kind", "torchserve"], "Triton's protocol only"),
        (["-a", "--sync"], "not allowed with argument"),
        (["--warmup", "1", "--warmup-request-count", "5"], "not allowed with argument"),
        (["--request-intervals", "f", "--concurrency-range", "1"], "not allowed with argument"),
        (["--binary-search"], "cannot be 0 for binary search"),
        (["--metrics-url", "h:8002/metrics"], "Must specify --collect-metrics"),
        (["--metrics-interval", "100"], "Must specify --collect-metrics"),
        (["--input-data", "zero", "--input-data", "random"], "give --input-data once"),
        (["-i", "grpc", "--json"], "HTTP only"),
        (["-i", "grpc", "--output-tensor-format", "json"], "HTTP only"),
        (["-u", "https://h:8000"], "TLS"),
        (["-H", "novalue"], "Header:Value"),
        (["--max-threads", "0"], "--max-threads"),
        (["-l", "-5"], "latency-threshold"),
        (["--request-intervals", "/nonexistent/intervals"], "failed to open file"),
        # Options that would change nothing where they are given are refused, not ignored.
        (["--request-distribution", "poisson"], "--request-distribution has no effect"),
        (["--max-outstanding", "8"], "--max-outstanding has no effect"),
        (["--concurrency-range", "2", "--max-outstanding", "8"], "--max-outstanding has no"),
        (["--measurement-request-count", "20"], "--measurement-request-count has no effect"),
        (["--input-data", "/tmp", "--string-length", "4"], "BYTES data comes from"),
        (["--input-data", "/tmp", "--string-data", "x"], "BYTES data comes from"),
        (["--verbose-csv"], "--verbose-csv has no effect here: it adds columns to the -f"),
    ],
)
def test_new_usage_errors_return_2(capsys, argv, message):
    assert message in _usage_error(capsys, *argv)


def test_binary_search_refuses_custom_intervals(capsys, tmp_path):
    path = tmp_path / "i.txt"
    path.write_text("100\n")
    err = _usage_error(capsys, "-l", "5", "--binary-search", "--request-intervals", str(path))
    assert "--binary-search needs a range" in err


def test_help_lists_refused_options(capsys):
    assert main(["--help"]) == 0
    text = capsys.readouterr().out
    assert "perf_analyzer options rayton perf refuses" in text
    assert all(flag in text for flag in REFUSED_OPTIONS)


def test_streaming_is_grpc_only():
    assert _config("-i", "grpc", "--streaming").streaming
    assert not _config("-i", "grpc").streaming
    with pytest.raises(PerfError, match="streaming is only allowed with gRPC"):
        _config("--streaming")
