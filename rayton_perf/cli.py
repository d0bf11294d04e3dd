"""``rayton perf``: perf_analyzer's command line, measured with tritonclient's aio clients.

Mount it as a subcommand with :func:`add_arguments` and :func:`run`, or call
:func:`main` with an argument list. Exit status: 0 when every level was measured (unstable
levels are reported and flagged), 1 when setup or a request failed, 2 for usage errors.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import TextIO

from rayton_perf.config import (
    CONSTANT,
    COUNT_WINDOWS,
    GRPC,
    HTTP,
    POISSON,
    TIME_WINDOWS,
    PerfConfig,
    PerfError,
    parse_range,
    parse_shape,
)
from rayton_perf.progress import Progress
from rayton_perf.report import (
    format_level,
    format_level_header,
    format_settings,
    format_summary,
    write_csv,
    write_plot,
)
from rayton_perf.result import CONCURRENCY, REQUEST_RATE, LevelResult, format_number
from rayton_perf.runner import Profiler


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add perf_analyzer's options (the subset rayton supports) to ``parser``."""
    model = parser.add_argument_group("model and server")
    model.add_argument("-m", "--model-name", required=True, help="model to profile")
    model.add_argument("-x", "--model-version", default="", help="version (default: policy)")
    model.add_argument(
        "-u", "--url", default=None, help="host:port (default localhost:8000 http, :8001 grpc)"
    )
    model.add_argument(
        "-i", "--protocol", type=str.lower, choices=[HTTP, GRPC], default=HTTP, help="protocol"
    )
    model.add_argument(
        "-a",
        "--async",
        dest="async_mode",
        action="store_true",
        help="accepted for compatibility; requests are always asynchronous",
    )

    load = parser.add_argument_group("load")
    load.add_argument("-b", "--batch-size", type=int, default=1, help="rows per request")
    levels = load.add_mutually_exclusive_group()
    levels.add_argument(
        "--concurrency-range",
        default=None,
        metavar="START[:END[:STEP]]",
        help="closed-loop levels: requests kept in flight (default 1)",
    )
    levels.add_argument(
        "--request-rate-range",
        default=None,
        metavar="START[:END[:STEP]]",
        help="open-loop levels: requests per second",
    )
    load.add_argument(
        "--request-distribution",
        type=str.lower,
        choices=[CONSTANT, POISSON],
        default=CONSTANT,
        help="inter-arrival times in request-rate mode",
    )
    load.add_argument(
        "--max-outstanding",
        type=int,
        default=1024,
        help="request-rate mode: most requests in flight (later sends count as delayed)",
    )
    load.add_argument(
        "--request-count",
        type=int,
        default=0,
        help="send exactly this many requests per level (one window, no stability search)",
    )
    load.add_argument(
        "--timeout",
        type=float,
        default=None,
        metavar="SECONDS",
        help="client-side timeout of one request",
    )

    data = parser.add_argument_group("input data")
    data.add_argument(
        "--shape",
        action="append",
        default=[],
        metavar="NAME:D1,D2,...",
        help="dims of an input without the batch dim (needed for -1 dims); repeatable",
    )
    data.add_argument(
        "--input-data", default="random", help="random, zero, or a perf_analyzer JSON file"
    )
    data.add_argument("--string-length", type=int, default=128, help="length of BYTES data")
    data.add_argument("--string-data", default=None, help="fixed value for BYTES data")
    fmt = data.add_mutually_exclusive_group()
    fmt.add_argument(
        "--input-tensor-format",
        dest="input_format",
        choices=["binary", "json"],
        default="binary",
        help="HTTP input tensor encoding",
    )
    fmt.add_argument("--binary", dest="input_format", action="store_const", const="binary")
    fmt.add_argument("--json", dest="input_format", action="store_const", const="json")
    data.add_argument("--seed", type=int, default=0, help="seed for random data and arrivals")

    measure = parser.add_argument_group("measurement")
    measure.add_argument(
        "-p",
        "--measurement-interval",
        type=int,
        default=5000,
        metavar="MS",
        help="time window length in ms",
    )
    measure.add_argument(
        "--measurement-mode", choices=[TIME_WINDOWS, COUNT_WINDOWS], default=TIME_WINDOWS
    )
    measure.add_argument(
        "--measurement-request-count",
        type=int,
        default=50,
        help="requests per window in count_windows mode",
    )
    measure.add_argument(
        "-s",
        "--stability-percentage",
        type=float,
        default=10.0,
        help="allowed spread between the last 3 windows, in percent",
    )
    measure.add_argument("-r", "--max-trials", type=int, default=10, help="windows per level")
    measure.add_argument(
        "--percentile",
        type=int,
        default=None,
        help="stabilise and summarise on this latency percentile instead of the mean",
    )
    measure.add_argument(
        "--warmup",
        type=float,
        default=2.0,
        metavar="SECONDS",
        help="load applied at each level before measuring (not in perf_analyzer)",
    )

    output = parser.add_argument_group("output")
    output.add_argument(
        "-f", "--latency-report-file", dest="filename", default=None, help="CSV file to write"
    )
    output.add_argument("--plot", default=None, help="PNG of latency vs. throughput to write")
    output.add_argument("-v", "--verbose", action="store_true", help="print every window")
    output.add_argument("--no-progress", action="store_true", help="no progress display on stderr")


def config_from_args(args: argparse.Namespace) -> PerfConfig:
    """Translate parsed options into a :class:`PerfConfig` (validated).

    Raises:
        PerfError: an option value is invalid.
    """
    shapes = dict(parse_shape(text) for text in args.shape)
    config = PerfConfig(
        model_name=args.model_name,
        model_version=args.model_version,
        url=args.url,
        protocol=args.protocol,
        batch_size=args.batch_size,
        shapes=shapes,
        input_data=args.input_data,
        string_length=args.string_length,
        string_data=args.string_data,
        binary_inputs=args.input_format != "json",
        measurement_interval_ms=args.measurement_interval,
        measurement_mode=args.measurement_mode,
        measurement_request_count=args.measurement_request_count,
        stability_percentage=args.stability_percentage,
        max_trials=args.max_trials,
        percentile=args.percentile,
        warmup_s=args.warmup,
        request_distribution=args.request_distribution,
        request_timeout_s=args.timeout,
        request_count=args.request_count,
        max_outstanding=args.max_outstanding,
        seed=args.seed,
        verbose=args.verbose,
    )
    config.validate()
    return config


def levels_from_args(args: argparse.Namespace) -> tuple[str, list]:
    """The sweep: ``(mode, levels)``; concurrency 1 when no range is given."""
    if args.request_rate_range is not None:
        return REQUEST_RATE, parse_range(args.request_rate_range, float)
    return CONCURRENCY, parse_range(args.concurrency_range or "1", int)


def run(args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Run a profile from parsed options; returns the exit status."""
    out = out or sys.stdout
    err = err or sys.stderr
    try:
        config = config_from_args(args)
        mode, levels = levels_from_args(args)
    except PerfError as error:
        print(f"error: {error}", file=err)
        return 2
    progress = Progress(stream=err, enabled=not args.no_progress)
    try:
        return asyncio.run(_profile(config, mode, levels, args, progress, out, err))
    except KeyboardInterrupt:
        progress.clear()
        print("Interrupted.", file=err)
        return 130


async def _profile(
    config: PerfConfig,
    mode: str,
    levels: list,
    args: argparse.Namespace,
    progress: Progress,
    out: TextIO,
    err: TextIO,
) -> int:
    def say(text: str = "") -> None:
        progress.clear()
        print(text, file=out, flush=True)

    results: list[LevelResult] = []
    status = 0
    try:
        async with Profiler(config, progress, on_window=say if config.verbose else None) as prof:
            if not prof.collect_stats:
                print(
                    "WARNING: server does not list the 'statistics' extension; "
                    "no server-side statistics",
                    file=err,
                )
            say(format_settings(config, mode, levels))
            for level in levels:
                say(format_level_header(mode, level))
                if mode == CONCURRENCY:
                    result = await prof.run_level(concurrency=level)
                else:
                    result = await prof.run_level(request_rate=level)
                results.append(result)
                say(format_level(result, config.protocol, config.percentile))
                for warning in result.warnings:
                    print(warning, file=err)
                if not result.stable:
                    print(
                        f"Failed to obtain stable measurement within {config.max_trials} "
                        f"measurement windows for {mode.replace('_', ' ')} "
                        f"{format_number(level)}. Please try to increase the "
                        "--measurement-interval.",
                        file=err,
                    )
    except PerfError as error:
        progress.clear()
        print(f"error: {error}", file=err)
        status = 1
    if results:
        say(format_summary(results, config.percentile))
        if args.filename:
            write_csv(args.filename, results, mode)
        if args.plot:
            write_plot(args.plot, results, title=f"{config.model_name} ({config.protocol})")
    return status


def build_parser() -> argparse.ArgumentParser:
    """The stand-alone parser used by :func:`main`."""
    parser = argparse.ArgumentParser(
        prog="rayton perf",
        description="Measure a Triton-protocol server the way perf_analyzer does.",
    )
    add_arguments(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point: parse ``argv`` (default ``sys.argv[1:]``) and run; returns the status."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:
        # argparse exits for --help (0) and usage errors (2); callers want a status.
        return int(exit_.code or 0)
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
