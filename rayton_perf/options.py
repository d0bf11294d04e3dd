"""perf_analyzer's command-line options, as ``rayton perf`` declares them.

This module holds the declaration only: the defaults, the argument groups that
:func:`add_arguments` adds to a parser, the argparse actions for perf_analyzer options
rayton perf refuses (:data:`REFUSED_OPTIONS`, :class:`_Refuse`) or honours with a single
value (:class:`_OnlyValue`), and the help formatter. Turning the parsed options into a run
is :mod:`rayton_perf.cli`'s job. Kept apart so that the list of options, which follows
perf_analyzer's and grows with it, can be read and changed without the profiling code, and so
that a parser (``rayton perf`` on its own, or mounted under ``rayton``) can be built from it.

perf_analyzer options rayton perf cannot honour are still recognised, so that a pasted
command fails with the reason (exit status 2) instead of running something else.
"""

from __future__ import annotations

import argparse
import textwrap

from rayton_perf.config import (
    CONSTANT,
    COUNT_WINDOWS,
    GRPC,
    HTTP,
    POISSON,
    TIME_WINDOWS,
)

DEFAULT_WARMUP_S = 2.0
DEFAULT_MAX_OUTSTANDING = 1024
DEFAULT_STRING_LENGTH = 128
DEFAULT_WINDOW_REQUESTS = 50
DEFAULT_METRICS_INTERVAL_MS = 1000  # perf_analyzer's --metrics-interval default
DEFAULT_OUTPUT_SHM_BYTES = 102400  # perf_analyzer's --output-shared-memory-size default

_NO_TLS = (
    "TLS is not supported: the rayton server speaks plain HTTP and gRPC, and rayton perf has no "
    "TLS client"
)
_TRACE = "rayton perf does not change trace settings; set them on the server"
_NO_SEQUENCES = "sequence models are not supported by rayton perf"
_NOT_IMPLEMENTED = "not implemented in rayton perf"
# perf_analyzer options rayton perf refuses, with the reason the usage error gives.
REFUSED_OPTIONS: dict[str, tuple[int, str]] = {
    "--model-signature-name": (
        1,
        "only for --service-kind tfserving; rayton perf speaks Triton's protocol only",
    ),
    "--ssl-grpc-use-ssl": (0, _NO_TLS),
    "--ssl-grpc-root-certifications-file": (1, _NO_TLS),
    "--ssl-grpc-private-key-file": (1, _NO_TLS),
    "--ssl-grpc-certificate-chain-file": (1, _NO_TLS),
    "--ssl-https-verify-peer": (1, _NO_TLS),
    "--ssl-https-verify-host": (1, _NO_TLS),
    "--ssl-https-ca-certificates-file": (1, _NO_TLS),
    "--ssl-https-client-certificate-file": (1, _NO_TLS),
    "--ssl-https-client-certificate-type": (1, _NO_TLS),
    "--ssl-https-private-key-file": (1, _NO_TLS),
    "--ssl-https-private-key-type": (1, _NO_TLS),
    "--grpc-compression-algorithm": (1, _NOT_IMPLEMENTED),
    "--sequence-length": (1, _NO_SEQUENCES),
    "--sequence-length-variation": (1, _NO_SEQUENCES),
    "--sequence-id-range": (1, _NO_SEQUENCES),
    "--num-of-sequences": (1, _NO_SEQUENCES),
    "--serial-sequences": (0, _NO_SEQUENCES),
    "--trace-level": (1, _TRACE),
    "--trace-rate": (1, _TRACE),
    "--trace-count": (1, _TRACE),
    "--log-frequency": (1, _TRACE),
    "--bls-composing-models": (1, _NOT_IMPLEMENTED),
    "--triton-server-directory": (
        1,
        "only for --service-kind triton_c_api, which rayton perf does not support",
    ),
    "--model-repository": (
        1,
        "only for --service-kind triton_c_api, which rayton perf does not support",
    ),
    "--enable-mpi": (0, "multi-model MPI runs are not supported by rayton perf"),
    "--periodic-concurrency-range": (
        1,
        "periodic concurrency (for decoupled models) is not implemented in rayton perf",
    ),
    "--request-period": (
        1,
        "periodic concurrency (for decoupled models) is not implemented in rayton perf",
    ),
    "--request-parameter": (1, _NOT_IMPLEMENTED),
    "--endpoint": (1, "only for --service-kind openai, which rayton perf does not support"),
    "--fixed-schedule": (0, _NOT_IMPLEMENTED),
    "--session-concurrency": (
        1,
        "only for --service-kind openai, which rayton perf does not support",
    ),
    "--grpc-method": (
        1,
        "only for --service-kind dynamic_grpc, which rayton perf does not support",
    ),
    "--profile-export-file": (1, f"{_NOT_IMPLEMENTED} (-f writes the CSV)"),
}


class _Refuse(argparse.Action):
    """A perf_analyzer option rayton perf cannot honour: a usage error naming the reason."""

    def __init__(self, option_strings: list[str], dest: str, reason: str, **kwargs):
        self.reason = reason
        super().__init__(option_strings, dest, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        parser.error(f"{option_string}: {self.reason}")


class _OnlyValue(argparse.Action):
    """An option of which rayton perf honours one value (the one it always does)."""

    def __init__(self, option_strings: list[str], dest: str, accepted: str, reason: str, **kw):
        self.accepted = accepted
        self.reason = reason
        super().__init__(option_strings, dest, **kw)

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        if values != self.accepted:
            parser.error(f"{option_string} {values}: {self.reason}")
        setattr(namespace, self.dest, values)


class _OneOf(argparse.Action):
    """An option of which rayton perf honours some values."""

    def __init__(
        self, option_strings: list[str], dest: str, accepted: tuple[str, ...], reason: str, **kw
    ):
        self.accepted = accepted
        self.reason = reason
        super().__init__(option_strings, dest, **kw)

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        if values not in self.accepted:
            parser.error(f"{option_string} {values}: {self.reason}")
        setattr(namespace, self.dest, values)


class _HelpFormatter(argparse.HelpFormatter):
    """argparse's formatter, but never splitting an option name at one of its hyphens."""

    def _split_lines(self, text: str, width: int) -> list[str]:
        return textwrap.wrap(" ".join(text.split()), width, break_on_hyphens=False)

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        return textwrap.fill(
            " ".join(text.split()),
            width,
            initial_indent=indent,
            subsequent_indent=indent,
            break_on_hyphens=False,
        )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add perf_analyzer's options to ``parser``: the ones rayton honours, and the ones it
    refuses with a reason (see :data:`REFUSED_OPTIONS`)."""
    parser.formatter_class = _HelpFormatter
    _add_model_arguments(parser)
    _add_load_arguments(parser)
    _add_data_arguments(parser)
    _add_measure_arguments(parser)
    _add_output_arguments(parser)
    _add_refused_arguments(parser)


def _add_model_arguments(parser: argparse.ArgumentParser) -> None:
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
        "--streaming",
        action="store_true",
        help="gRPC only: send requests on ModelStreamInfer streams (one per concurrent "
        "worker; --max-threads of them in request-rate mode) instead of unary calls",
    )
    model.add_argument(
        "-H",
        dest="headers",
        action="append",
        default=[],
        metavar="HEADER:VALUE",
        help="header sent with every request (gRPC: as metadata, name lower-cased); repeatable",
    )
    model.add_argument(
        "--service-kind",
        action=_OnlyValue,
        accepted="triton",
        reason="rayton perf speaks Triton's protocol only (service kind triton)",
        default="triton",
        help="only 'triton' (what rayton perf always speaks); others are refused",
    )
    model.add_argument(
        "--shared-memory",
        choices=("none", "system", "cuda"),
        default="none",
        help="none (tensors travel in the request), system (inputs and outputs in system "
        "shared-memory regions) or cuda (in GPU 0's memory, shared by CUDA IPC handles); "
        "the server must allow client shared memory and run on this host",
    )
    model.add_argument(
        "--output-shared-memory-size",
        type=int,
        default=DEFAULT_OUTPUT_SHM_BYTES,
        metavar="BYTES",
        help=f"with --shared-memory system: each output's region (default "
        f"{DEFAULT_OUTPUT_SHM_BYTES}, as perf_analyzer)",
    )


def _add_load_arguments(parser: argparse.ArgumentParser) -> None:
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
    levels.add_argument(
        "--request-intervals",
        default=None,
        metavar="FILE",
        help="open loop on custom gaps: one interval in usec per line, cycled (one level)",
    )
    load.add_argument(
        "--request-distribution",
        type=str.lower,
        choices=[CONSTANT, POISSON],
        default=None,
        help=f"inter-arrival times in request-rate mode (default {CONSTANT})",
    )
    load.add_argument(
        "-l",
        "--latency-threshold",
        type=int,
        default=0,
        metavar="MS",
        help="end the sweep at the first level whose latency reaches this (0: no limit); "
        "that level is not reported, as in perf_analyzer",
    )
    load.add_argument(
        "--binary-search",
        action="store_true",
        help="binary search of the range for the highest level under --latency-threshold "
        "(a level meets it when stable and under the limit)",
    )
    calls = load.add_mutually_exclusive_group()
    calls.add_argument(
        "-a",
        "--async",
        dest="async_mode",
        action="store_true",
        help="asynchronous calls (the default): request-rate mode is bounded by "
        "--max-outstanding only",
    )
    calls.add_argument(
        "--sync",
        action="store_true",
        help="perf_analyzer's synchronous calls: concurrency mode is the same closed loop; "
        "request-rate mode keeps at most --max-threads requests in flight",
    )
    load.add_argument(
        "--max-threads",
        type=int,
        default=None,
        help="perf_analyzer's worker threads (default 16). Request-rate mode without -a: "
        "at most this many requests in flight, as its synchronous workers. Concurrency mode "
        "and -a: no effect on the load, as in perf_analyzer (one event loop sends here)",
    )
    load.add_argument(
        "--max-outstanding",
        type=int,
        default=None,
        help=f"request-rate mode: most requests in flight (default {DEFAULT_MAX_OUTSTANDING}; "
        "later sends count as delayed)",
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


def _add_data_arguments(parser: argparse.ArgumentParser) -> None:
    data = parser.add_argument_group("input data")
    data.add_argument(
        "--shape",
        action="append",
        default=[],
        metavar="NAME:D1,D2,...",
        help="dims of an input without the batch dim (needed for -1 dims); repeatable",
    )
    data.add_argument(
        "--input-data",
        action="append",
        default=[],
        help="random (default), zero, a perf_analyzer JSON file, or a directory with one "
        "file per input named after it (raw bytes of one row; BYTES: one string per line)",
    )
    data.add_argument(
        "--string-length",
        type=int,
        default=None,
        help=f"length of generated BYTES data (default {DEFAULT_STRING_LENGTH})",
    )
    data.add_argument("--string-data", default=None, help="fixed value for generated BYTES data")
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
    data.add_argument(
        "--output-tensor-format",
        dest="output_format",
        choices=["binary", "json"],
        default="binary",
        help="HTTP output tensor encoding asked of the server",
    )
    data.add_argument("--seed", type=int, default=0, help="seed for random data and arrivals")


def _add_measure_arguments(parser: argparse.ArgumentParser) -> None:
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
        default=None,
        help=f"requests per window in count_windows mode (default {DEFAULT_WINDOW_REQUESTS})",
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
    warmup = measure.add_mutually_exclusive_group()
    warmup.add_argument(
        "--warmup",
        type=float,
        default=None,
        metavar="SECONDS",
        help=f"load applied at each level before measuring (default {DEFAULT_WARMUP_S:g}; "
        "not in perf_analyzer)",
    )
    warmup.add_argument(
        "--warmup-request-count",
        type=int,
        default=0,
        help="warm up each level with exactly this many requests instead of --warmup",
    )
    measure.add_argument(
        "--collect-metrics",
        action="store_true",
        help="scrape the server's GPU metrics (nv_gpu_*) while measuring",
    )
    measure.add_argument(
        "--metrics-url",
        default=None,
        help="metrics endpoint (default: the -u host, port 8002, /metrics)",
    )
    measure.add_argument(
        "--metrics-interval",
        type=int,
        default=None,
        metavar="MS",
        help=f"time between scrapes (default {DEFAULT_METRICS_INTERVAL_MS})",
    )


def _add_output_arguments(parser: argparse.ArgumentParser) -> None:
    output = parser.add_argument_group("output")
    output.add_argument(
        "-f", "--latency-report-file", dest="filename", default=None, help="CSV file to write"
    )
    output.add_argument(
        "--verbose-csv",
        action="store_true",
        help="add perf_analyzer's extra CSV columns (avg latency, request/response, response "
        "wait, GPU metrics)",
    )
    output.add_argument("--plot", default=None, help="PNG of latency vs. throughput to write")
    output.add_argument("-v", "--verbose", action="store_true", help="print every window")
    output.add_argument("--no-progress", action="store_true", help="no progress display on stderr")


def _add_refused_arguments(parser: argparse.ArgumentParser) -> None:
    # Listed once in the help rather than one by one, so the usage line stays readable.
    refused = parser.add_argument_group(
        "perf_analyzer options rayton perf refuses (each fails, saying why)",
        ", ".join(REFUSED_OPTIONS),
    )
    for flag, (nargs, reason) in REFUSED_OPTIONS.items():
        refused.add_argument(
            flag, action=_Refuse, reason=reason, nargs=nargs, help=argparse.SUPPRESS
        )
