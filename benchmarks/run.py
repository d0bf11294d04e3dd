"""Side-by-side benchmark: raw ONNX Runtime, rayton, the reference Triton, a hand-written app.

``python -m benchmarks.run [--runs 3] [--window-ms 3000] [--output BENCHMARKS.md]`` (or
``make bench``). Every system serves the same ONNX models with the same batching settings
(max_batch_size 32, 2 ms queue delay, one single-threaded ONNX Runtime instance), one system
at a time, driven by the same load generator (``rayton perf``'s library, tritonclient aio)
on the same machine. Reports medians over the runs and rayton's ratios to the others.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks import raw_ort
from benchmarks.models import MODELS, ONNX_MODELS, QUEUE_DELAY_US, write_repositories
from rayton_perf.config import PerfConfig
from rayton_perf.result import LevelResult
from rayton_perf.runner import run_level
from tests.support.ports import free_port
from tests.support.processes import ServerProcess, rayton_serve_command


@dataclass(frozen=True)
class Level:
    model: str
    batch: int
    concurrency: int

    @property
    def label(self) -> str:
        return f"{self.model} b={self.batch} c={self.concurrency}"


def parse_level(text: str) -> tuple[str, int, int]:
    """``model:concurrency[:rows]`` -> (model, concurrency, rows per request)."""
    model, concurrency, *rows = text.split(":")
    return model, int(concurrency), int(rows[0]) if rows else 1


LEVELS = (
    Level("mlp", 1, 1),
    Level("mlp", 1, 16),
    Level("mlp", 1, 32),
    Level("mlp", 8, 16),
    Level("convnet", 1, 1),
    Level("convnet", 1, 8),
    Level("preprocess", 1, 8),
    Level("pipeline", 1, 8),
)
# Opt-in levels (``--levels``), kept out of the default run to keep ``make bench`` short:
# ``pipeline_async:8``, the pipeline with concurrent BLS calls (benchmarks/notes.md);
# ``trivial:4``, a python model of 4 floats without batching (rayton and Triton only)
# Levels also measured over gRPC (rayton's and the reference Triton's)
GRPC_LEVELS = frozenset(
    (
        Level("mlp", 1, 1),
        Level("mlp", 1, 16),
        Level("mlp", 1, 32),
        Level("mlp", 8, 16),
        Level("convnet", 1, 8),
    )
)
# Levels also measured on gRPC streams (``rayton perf --streaming``: one stream per client)
STREAM_LEVELS = frozenset((Level("mlp", 1, 16),))


@dataclass
class SystemResults:
    name: str
    levels: dict[Level, list[LevelResult]] = field(default_factory=dict)

    def median_throughput(self, level: Level) -> float:
        return statistics.median(r.throughput for r in self.levels[level])

    def median_p50_us(self, level: Level) -> float:
        return statistics.median(r.latencies.p50_us for r in self.levels[level])


@dataclass(frozen=True)
class RunningSystem:
    """A started system: where to send requests, how to stop it, its process session."""

    url: str
    stop: Callable[[], None]
    session_id: int  # every server process runs in this session
    grpc_url: str = ""  # where it also answers gRPC ("" for none)


def start_system(name: str, repos: dict[str, Path], logs: Path) -> RunningSystem:
    """Start one system and wait until it serves."""
    port = free_port()
    python = sys.executable
    if name in ("rayton", "rayton-grpc", "rayton-dedicated", "rayton-2hosts", "rayton-inreplica"):
        grpc_port = free_port()
        # rayton-dedicated: HTTP with the model in an application of its own instead of the
        # shared CPU-model host (the default); rayton-2hosts: two replicas of that host;
        # rayton-inreplica: python instances on threads of the replica instead of in stub
        # processes of their own (the default).
        hosting = "dedicated" if name == "rayton-dedicated" else "shared"
        replicas = "2" if name == "rayton-2hosts" else "1"
        python_instances = "in-replica" if name == "rayton-inreplica" else "stub-process"
        server = ServerProcess(
            rayton_serve_command(
                repos["rayton"],
                port,
                grpc_port,
                "--cpu-models",
                hosting,
                "--host-replicas",
                replicas,
                "--python-instances",
                python_instances,
                "--allow-client-shm",  # for --shared-memory system levels (loopback only)
                "true",
            ),
            logs / f"{name}.log",
        )
        server.wait_http(f"http://127.0.0.1:{port}/v2/health/ready")
        http, grpc = f"127.0.0.1:{port}", f"127.0.0.1:{grpc_port}"
        url = grpc if name == "rayton-grpc" else http
        return RunningSystem(url, server.stop, server.process.pid, grpc)
    if name == "handwritten":
        server = ServerProcess(
            [
                python,
                "-m",
                "benchmarks.serve_handwritten",
                "--repository",
                str(repos["rayton"]),
                "--port",
                str(port),
                "--dashboard-port",
                str(free_port()),
            ],
            logs / "handwritten.log",
        )
        # every model's application, not the first to answer: the others would still be
        # starting (and taking CPU) during the first level
        for model in MODELS:
            if model.max_batch_size:  # the app serves the batched models only
                server.wait_http(f"http://127.0.0.1:{port}/v2/models/{model.name}/config")
        return RunningSystem(f"127.0.0.1:{port}", server.stop, server.process.pid)
    if name in ("triton", "triton-grpc"):
        from tests.reference_triton import ReferenceTriton

        triton = ReferenceTriton(repos["reference"])
        triton.start()
        url = triton.http_url.removeprefix("http://")
        if name == "triton-grpc":  # for the levels of benchmarks.cpu_per_request
            url = triton.grpc_url
        return RunningSystem(url, triton.stop, triton.session_id, triton.grpc_url)
    raise ValueError(name)


def measure_system(
    name: str,
    repos: dict[str, Path],
    logs: Path,
    window_ms: int,
    warmup_s: float,
    levels: tuple[Level, ...] = LEVELS,
) -> dict[str, dict[Level, LevelResult]]:
    """Every level over HTTP, and the :data:`GRPC_LEVELS` among them over gRPC too where the
    system answers it (the :data:`STREAM_LEVELS` on streams as well), on one start of the
    system: ``{name: ..., name + "-grpc": ..., name + "-stream": ...}``."""
    system = start_system(name, repos, logs)
    results: dict[str, dict[Level, LevelResult]] = {
        name: {},
        f"{name}-grpc": {},
        f"{name}-stream": {},
    }
    runs = [(level, "http") for level in levels]
    if system.grpc_url:
        runs += [(level, "grpc") for level in levels if level in GRPC_LEVELS]
        runs += [(level, "stream") for level in levels if level in STREAM_LEVELS]
    try:
        for level, protocol in runs:
            config = PerfConfig(
                model_name=level.model,
                url=system.url if protocol == "http" else system.grpc_url,
                protocol="http" if protocol == "http" else "grpc",
                batch_size=level.batch,
                measurement_interval_ms=window_ms,
                max_trials=3,
                warmup_s=warmup_s,
                streaming=protocol == "stream",
            )
            result = asyncio.run(run_level(config, concurrency=level.concurrency))
            label = name if protocol == "http" else f"{name}-{protocol}"
            results[label][level] = result
            print(
                f"  {label:12s} {level.label:22s} {result.throughput:8.1f} infer/s  "
                f"p50 {result.latencies.p50_us / 1000:6.2f} ms",
                flush=True,
            )
    finally:
        system.stop()
    return results


def machine_description() -> str:
    cpu = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    memory_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return f"{os.cpu_count()} cores ({cpu}), {memory_gib:.0f} GiB, {platform.platform()}"


def versions() -> str:
    from importlib.metadata import version

    names = ("ray", "onnxruntime", "tritonclient", "numpy", "nvidia-pytriton")
    return ", ".join(f"{n} {version(n)}" for n in names) + f", Python {platform.python_version()}"


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}" if a == a and b == b else "n/a"  # NaN: not measured


def _rate(value: float) -> str:
    return f"{value:.0f}" if value == value else "n/a"


def _stream_lines(systems: dict[str, SystemResults]) -> list[str]:
    """The :data:`STREAM_LEVELS` on gRPC streams, next to the same level's unary calls."""
    lines = []
    for level in sorted(STREAM_LEVELS, key=lambda lv: lv.label):
        cells = []
        for server in ("rayton", "triton"):
            stream, unary = systems.get(f"{server}-stream"), systems.get(f"{server}-grpc")
            if stream is None or level not in stream.levels:
                continue
            rate = stream.median_throughput(level)
            unary_rate = unary.median_throughput(level) if unary and level in unary.levels else 0
            cells.append(f"{server} {rate:.0f} infer/s (unary gRPC {unary_rate:.0f})")
        if cells:
            lines.append(
                f"`{level.label}` on gRPC streams (`rayton perf --streaming`, one stream per "
                f"client): {', '.join(cells)}."
            )
    return lines


def render(
    systems: dict[str, SystemResults], raw: dict[str, dict], runs: int, command: str, elapsed: float
) -> str:
    rayton, triton, hand = systems["rayton"], systems["triton"], systems["handwritten"]
    grpc = systems.get("rayton-grpc")
    lines: list[str] = ["# Benchmarks", ""]
    # The server's CPU per request leads (issue 27): its own command, kept in headline.md.
    headline = Path(__file__).with_name("headline.md").read_text().rstrip()
    lines += [headline, "", "## Throughput", ""]
    lines += [
        f"Command: `{command}` ({runs} run(s), medians; {elapsed / 60:.1f} min in all).",
        f"Machine: {machine_description()}.",
        f"Versions: {versions()}.",
        "",
        "Every system serves the same models with dynamic batching (a "
        f"{QUEUE_DELAY_US} µs queue delay) and one instance: "
        + ", ".join(
            f"`{m.name}` (max_batch_size {m.max_batch_size})" for m in MODELS if m.max_batch_size
        )
        + ". ONNX models run on one ONNX Runtime thread (reference Triton: a python model "
        "running ONNX Runtime, since the bundled server has no ORT backend); `preprocess` "
        "(640x480 UINT8 image -> normalised 3x64x64) and `pipeline` (the same, then a BLS call to "
        "the ONNX `cnn`) are the same `model.py` on both servers; the hand-written Serve app runs "
        "the same pre-processing function, and for `pipeline` the `cnn` in its own replica on "
        "the stacked batch (no BLS); `pipeline_async` (the pipeline with concurrent BLS calls) is "
        "an opt-in level (`--levels pipeline_async:8`), and so is `trivial` (a python model "
        "returning its 4 floats, no batching; rayton and Triton: `--levels trivial:4`). "
        "Load: `rayton perf`'s library "
        "(tritonclient aio, binary tensors), closed loop, on the same machine, one system at a "
        "time; rayton gRPC goes through HAProxy straight to the model's replicas. Rates in "
        "inferences (rows) per second.",
        "",
        "| level | rayton HTTP | rayton gRPC | Triton 2.51 HTTP | Triton 2.51 gRPC "
        "| hand-written Serve | rayton / Triton HTTP | rayton / Triton gRPC "
        "| rayton / hand-written | rayton gRPC / HTTP "
        "| p50 rayton / Triton / hand-written HTTP (ms) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    triton_grpc = systems.get("triton-grpc")

    def rate(results: SystemResults | None, level: Level) -> float:
        if results is None or level not in results.levels:
            return float("nan")
        return results.median_throughput(level)

    def p50_ms(results: SystemResults, level: Level) -> str:
        if level not in results.levels:
            return "n/a"
        return f"{results.median_p50_us(level) / 1000:.2f}"

    for level in LEVELS:
        r, g, t = rate(rayton, level), rate(grpc, level), rate(triton, level)
        tg, h = rate(triton_grpc, level), rate(hand, level)
        p50 = " / ".join(p50_ms(results, level) for results in (rayton, triton, hand))
        lines.append(
            f"| {level.label} | {_rate(r)} | {_rate(g)} | {_rate(t)} | {_rate(tg)} | {_rate(h)} "
            f"| {_ratio(r, t)} | {_ratio(g, tg)} | {_ratio(r, h)} | {_ratio(g, r)} | {p50} |"
        )
    lines += [
        "",
        "Raw ONNX Runtime in-process, one intra-op thread:",
        "",
        "| model | batch | rows/s | p50 per call (ms) |",
        "|---|---|---|---|",
    ]
    for model, per_batch in raw.items():
        for batch, values in per_batch.items():
            rows_per_s, p50_ms = values["rows_per_s"], values["p50_us"] / 1000
            lines.append(f"| {model} | {batch} | {rows_per_s:.0f} | {p50_ms:.2f} |")
    mlp_b8 = Level("mlp", 8, 16)
    best_raw = max(v["rows_per_s"] for v in raw["mlp"].values())
    convnet_c8 = Level("convnet", 1, 8)
    raw_convnet = raw["convnet"][8]["rows_per_s"]
    lines += [
        "",
        f"`mlp b=8 c=16` on rayton: {rayton.median_throughput(mlp_b8):.0f} rows/s = "
        f"{rayton.median_throughput(mlp_b8) / best_raw:.0%} of raw ONNX Runtime's best "
        f"single-thread batch throughput ({best_raw:.0f} rows/s).",
        f"`convnet c=8` on rayton: HTTP {rayton.median_throughput(convnet_c8):.0f} rows/s = "
        f"{rayton.median_throughput(convnet_c8) / raw_convnet:.0%} of raw ONNX Runtime at "
        f"batch 8 ({raw_convnet:.0f} rows/s)"
        + (
            f", gRPC {rate(grpc, convnet_c8) / raw_convnet:.0%}."
            if grpc is not None and convnet_c8 in grpc.levels
            else "."
        ),
        *_stream_lines(systems),
        "",
        "Batch sizes rayton executed (executions per batch size, last run, from the "
        "statistics extension):",
        "",
    ]
    for level in LEVELS:
        distribution = rayton.levels[level][-1].batch_size_distribution
        shown = ", ".join(f"{size}: {count}" for size, count in sorted(distribution.items()))
        lines.append(f"- {level.label}: {shown or 'n/a'}")
    notes = Path(__file__).with_name("notes.md")
    if notes.exists():
        lines += ["", notes.read_text().rstrip()]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--window-ms", type=int, default=2000)
    parser.add_argument("--warmup-s", type=float, default=2.0)
    parser.add_argument("--systems", default="rayton,triton,handwritten")
    parser.add_argument("--output", default="BENCHMARKS.md")
    parser.add_argument(
        "--levels",
        default=None,
        help="model:concurrency[:rows per request], comma-separated (default: every level; "
        "the report is written only for every level and system)",
    )
    args = parser.parse_args(argv)
    levels = LEVELS
    if args.levels:
        levels = tuple(Level(m, rows, c) for m, c, rows in map(parse_level, args.levels.split(",")))
    command = "python -m benchmarks.run " + " ".join(argv if argv is not None else sys.argv[1:])
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="rayton-bench-") as tmp:
        root = Path(tmp)
        rayton_repo, reference_repo = write_repositories(root)
        repos = {"rayton": rayton_repo, "reference": reference_repo}
        raw = {
            m.name: raw_ort.measure(
                rayton_repo / m.name / "1" / "model.onnx",
                m.input_dims,
                max_batch_size=m.max_batch_size,
            )
            for m in ONNX_MODELS
            if m.name in {level.model for level in LEVELS}
        }
        names = args.systems.split(",")
        systems = {
            label: SystemResults(label)
            for name in names
            for label in (name, f"{name}-grpc", f"{name}-stream")
        }
        for run in range(args.runs):
            print(f"run {run + 1}/{args.runs}", flush=True)
            for name in names:
                measured = measure_system(name, repos, root, args.window_ms, args.warmup_s, levels)
                for label, per_level in measured.items():
                    for level, result in per_level.items():
                        systems[label].levels.setdefault(level, []).append(result)
        if set(names) >= {"rayton", "triton", "handwritten"} and levels == LEVELS:
            report = render(systems, raw, args.runs, command, time.monotonic() - started)
            Path(args.output).write_text(report)
            print(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
