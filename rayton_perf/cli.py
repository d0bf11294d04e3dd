"""``rayton perf``: perf_analyzer's command line, measured with tritonclient's aio clients.

Mount it as a subcommand with :func:`add_arguments` and :func:`run`, or call
:func:`main` with an argument list. Exit status: 0 when every level was measured (unstable
levels are reported and flagged), 1 when setup or a request failed, 2 for usage errors.

This module turns parsed options into a run: the :class:`PerfConfig`, the combination checks,
the levels and their sweep, and the report. The options themselves are declared in
:mod:`rayton_perf.options` (:func:`add_arguments` and :data:`REFUSED_OPTIONS` are re-exported
here).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Callable
from typing import TextIO

from rayton_perf.config import (
    CONSTANT,
    COUNT_WINDOWS,
    PerfConfig,
    PerfError,
    parse_header,
    parse_range,
    parse_range_bounds,
    parse_shape,
)
from rayton_perf.load import intervals_rate, read_request_intervals
from rayton_perf.options import (
    DEFAULT_MAX_OUTSTANDING,
    DEFAULT_METRICS_INTERVAL_MS,
    DEFAULT_STRING_LENGTH,
    DEFAULT_WARMUP_S,
    DEFAULT_WINDOW_REQUESTS,
    REFUSED_OPTIONS,
    add_arguments,
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
from rayton_perf.result import (
    CONCURRENCY,
    REQUEST_RATE,
    CsvOptions,
    LevelResult,
    format_number,
)
from rayton_perf.runner import Profiler
from rayton_perf.sweep import Sweep, binary_sweep, linear_sweep

# Re-exported: callers mount the options with ``rayton_perf.cli.add_arguments`` and the tests
# read ``REFUSED_OPTIONS`` from here.
__all__ = [
    "DEFAULT_MAX_OUTSTANDING",
    "DEFAULT_METRICS_INTERVAL_MS",
    "DEFAULT_STRING_LENGTH",
    "DEFAULT_WARMUP_S",
    "DEFAULT_WINDOW_REQUESTS",
    "REFUSED_OPTIONS",
    "add_arguments",
    "build_parser",
    "config_from_args",
    "levels_from_args",
    "main",
    "meets_limit",
    "over_limit",
    "run",
    "sweep_from_args",
]


def config_from_args(args: argparse.Namespace) -> PerfConfig:
    """Translate parsed options into a :class:`PerfConfig` (validated).

    Raises:
        PerfError: an option value is invalid.
    """
    _check_combinations(args)
    shapes = dict(parse_shape(text) for text in args.shape)
    config = PerfConfig(
        model_name=args.model_name,
        model_version=args.model_version,
        url=args.url,
        protocol=args.protocol,
        batch_size=args.batch_size,
        shapes=shapes,
        input_data=args.input_data[0] if args.input_data else "random",
        string_length=_default(args.string_length, DEFAULT_STRING_LENGTH),
        string_data=args.string_data,
        binary_inputs=args.input_format != "json",
        shared_memory=args.shared_memory,
        output_shared_memory_size=args.output_shared_memory_size,
        measurement_interval_ms=args.measurement_interval,
        measurement_mode=args.measurement_mode,
        measurement_request_count=_default(args.measurement_request_count, DEFAULT_WINDOW_REQUESTS),
        stability_percentage=args.stability_percentage,
        max_trials=args.max_trials,
        percentile=args.percentile,
        warmup_s=_warmup_s(args),
        request_distribution=args.request_distribution or CONSTANT,
        request_timeout_s=args.timeout,
        request_count=args.request_count,
        max_outstanding=_default(args.max_outstanding, DEFAULT_MAX_OUTSTANDING),
        seed=args.seed,
        verbose=args.verbose,
        headers=dict(parse_header(text) for text in args.headers),
        binary_outputs=args.output_format != "json",
        synchronous=_synchronous(args),
        max_threads=_default(args.max_threads, 16),
        warmup_request_count=args.warmup_request_count,
        latency_threshold_ms=args.latency_threshold,
        binary_search=args.binary_search,
        request_intervals_ns=(
            read_request_intervals(args.request_intervals) if args.request_intervals else []
        ),
        collect_metrics=args.collect_metrics,
        metrics_url=args.metrics_url,
        metrics_interval_ms=args.metrics_interval or DEFAULT_METRICS_INTERVAL_MS,
        streaming=args.streaming,
    )
    config.validate()
    return config


def _check_combinations(args: argparse.Namespace) -> None:
    """Option pairs perf_analyzer refuses, or that rayton perf could not honour together."""
    if len(args.input_data) > 1:
        # perf_analyzer merges several JSON files; reading only one would drop data.
        raise PerfError("give --input-data once: rayton perf reads one JSON file or directory")
    if args.metrics_url is not None and not args.collect_metrics:
        raise PerfError("Must specify --collect-metrics when using the --metrics-url option.")
    if args.metrics_interval is not None and not args.collect_metrics:
        raise PerfError("Must specify --collect-metrics when using the --metrics-interval option.")
    if args.binary_search and args.request_intervals:
        raise PerfError("--binary-search needs a range; --request-intervals is one level")
    ineffective = _ineffective_options(args)
    if ineffective:
        option, reason = ineffective[0]
        raise PerfError(f"{option} has no effect here: {reason}")


def _ineffective_options(args: argparse.Namespace) -> list[tuple[str, str]]:
    """Options given where they would change nothing; refused rather than ignored."""
    found = []
    if args.request_distribution is not None and args.request_rate_range is None:
        found.append(("--request-distribution", "it spaces --request-rate-range requests"))
    rate_mode = args.request_rate_range is not None or args.request_intervals is not None
    if args.max_outstanding is not None and not rate_mode:
        found.append(("--max-outstanding", "concurrency mode keeps the concurrency in flight"))
    if args.measurement_request_count is not None and args.measurement_mode != COUNT_WINDOWS:
        found.append(("--measurement-request-count", "it sizes count_windows windows"))
    generated = not args.input_data or args.input_data[0] in ("random", "zero")
    if not generated and (args.string_length is not None or args.string_data is not None):
        found.append(("--string-length/--string-data", "BYTES data comes from --input-data"))
    if args.verbose_csv and not args.filename:
        found.append(("--verbose-csv", "it adds columns to the -f CSV file"))
    return found


def _default(value: int | None, default: int) -> int:
    return default if value is None else value


def _warmup_s(args: argparse.Namespace) -> float:
    """Seconds of warm-up: none when warm-up is counted in requests instead."""
    if args.warmup is not None:
        return args.warmup
    return 0.0 if args.warmup_request_count else DEFAULT_WARMUP_S


def _synchronous(args: argparse.Namespace) -> bool:
    """perf_analyzer calls synchronously unless ``-a``: ``--max-threads`` in request-rate
    mode means its synchronous workers, as in the command the user pasted."""
    if args.sync:
        return True
    rate_mode = args.request_rate_range is not None or args.request_intervals is not None
    return rate_mode and args.max_threads is not None and not args.async_mode


def levels_from_args(
    args: argparse.Namespace, config: PerfConfig | None = None
) -> tuple[str, list]:
    """The sweep's ``(mode, levels)``; concurrency 1 when no range is given.

    With ``--request-intervals`` the one level is the schedule's rate; with
    ``--binary-search`` the levels are the range's bounds (the search picks the rest).
    """
    if args.request_intervals is not None:
        intervals = config.request_intervals_ns if config else []
        return REQUEST_RATE, [
            intervals_rate(intervals or read_request_intervals(args.request_intervals))
        ]
    mode, text, kind = _range(args)
    if args.binary_search:
        start, end, _ = parse_range_bounds(text, kind)
        return mode, [start, end]
    return mode, parse_range(text, kind)


def _range(args: argparse.Namespace) -> tuple[str, str, type]:
    """The range option in force: ``(mode, text, int or float)``."""
    if args.request_rate_range is not None:
        return REQUEST_RATE, args.request_rate_range, float
    return CONCURRENCY, args.concurrency_range or "1", int


def sweep_from_args(args: argparse.Namespace, levels: list) -> Sweep:
    """The search over ``levels``: binary between the range's bounds, or linear."""
    if args.binary_search:
        _, text, kind = _range(args)
        return binary_sweep(*parse_range_bounds(text, kind))
    return linear_sweep(levels)


def over_limit(result: LevelResult, config: PerfConfig) -> bool:
    """Whether a level's stabilising latency reached ``-l`` (whole msec, as perf_analyzer)."""
    limit = config.latency_threshold_ms
    return bool(limit) and result.stabilizing_latency_us // 1000 >= limit


def meets_limit(result: LevelResult, config: PerfConfig) -> bool:
    """Whether the sweep may go on past this level.

    Binary search, like perf_analyzer, also counts an unstable level as a miss; a linear
    sweep carries on past unstable levels (they are reported and flagged).
    """
    if over_limit(result, config):
        return False
    return result.stable or not config.binary_search


def run(args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Run a profile from parsed options; returns the exit status."""
    out = out or sys.stdout
    err = err or sys.stderr
    try:
        config = config_from_args(args)
        mode, levels = levels_from_args(args, config)
        sweep = sweep_from_args(args, levels)
    except PerfError as error:
        print(f"error: {error}", file=err)
        return 2
    progress = Progress(stream=err, enabled=not args.no_progress)
    try:
        return asyncio.run(_profile(config, mode, levels, sweep, args, progress, out, err))
    except KeyboardInterrupt:
        progress.clear()
        print("Interrupted.", file=err)
        return 130


async def _profile(
    config: PerfConfig,
    mode: str,
    levels: list,
    sweep: Sweep,
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
            level = next(sweep)
            while True:
                result = await _measure_level(prof, mode, level, say)
                _report_level(result, config, mode, results, say, err)
                try:
                    level = sweep.send(meets_limit(result, config))
                except StopIteration:
                    break
    except PerfError as error:
        progress.clear()
        print(f"error: {error}", file=err)
        status = 1
    if results:
        say(format_summary(results, config.percentile))
        if args.filename:
            options = CsvOptions(args.verbose_csv, config.percentile, config.collect_metrics)
            write_csv(args.filename, results, mode, options)
        if args.plot:
            write_plot(args.plot, results, title=f"{config.model_name} ({config.protocol})")
    return status


async def _measure_level(
    prof: Profiler, mode: str, level: float, say: Callable[[str], None]
) -> LevelResult:
    say(format_level_header(mode, level))
    if mode == CONCURRENCY:
        return await prof.run_level(concurrency=level)
    return await prof.run_level(request_rate=level)


def _report_level(
    result: LevelResult,
    config: PerfConfig,
    mode: str,
    results: list[LevelResult],
    say: Callable[[str], None],
    err: TextIO,
) -> None:
    """Print one level; a level over ``-l`` is left out of the report, as perf_analyzer."""
    if over_limit(result, config):
        print(
            f"Measured latency went over the set limit of {config.latency_threshold_ms} msec. ",
            file=err,
        )
        return
    results.append(result)
    say(format_level(result, config.protocol, config.percentile))
    for warning in result.warnings:
        print(warning, file=err)
    if not result.stable:
        print(
            f"Failed to obtain stable measurement within {config.max_trials} "
            f"measurement windows for {mode.replace('_', ' ')} "
            f"{format_number(result.level)}. Please try to increase the "
            "--measurement-interval.",
            file=err,
        )


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
