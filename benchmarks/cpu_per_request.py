"""CPU time per request of each process of a serving system, by role.

``python -m benchmarks.cpu_per_request [--systems rayton,rayton-grpc,triton,triton-grpc]
[--levels mlp:16,mlp:32,cnn:32,mlp:16:8]``

``--levels copy_native:16,copy_onnx:16`` adds the C-backend overhead pair: a C backend that
copies its input (the same ``.so`` on both servers) against the same copy as an ONNX model.

``--shared-memory none,system`` runs each level with the tensors in the request body and
again with them in system shared-memory regions (``rayton perf --shared-memory system``;
rayton runs with ``--allow-client-shm true``).

Throughput alone hides where a request's cost goes when the load generator shares the
machine's cores with the server. This starts each system as :mod:`benchmarks.run` does, warms
each level up, then drives it for three measurement windows while reading the CPU time (user +
system, from ``/proc``) of every process in the server's process session and of the load
generator (this process). Prints milliseconds of CPU per request for each role, as a Markdown
table.

``--alternate ROUNDS`` starts every system's server at once and, at each level, measures the
systems in turn ROUNDS times, so that a drift in the machine's speed (minutes long on a shared
VM) falls on all of them alike; each system's figures sum its windows. The servers not being
measured idle meanwhile (rayton's at a fifth to a third of a core), which costs the measured
one throughput but not CPU per request.

``--client-processes N`` spreads the load over N client processes
(:mod:`benchmarks.client_processes`), for rates one Python client cannot reach: one window as
long as the three, counted by the clients, with the CPU of all N as the load generator's.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import itertools
import os
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

from benchmarks.client_processes import ClientProcesses
from benchmarks.models import MODELS, OVERHEAD_MODELS, write_repositories
from benchmarks.run import RunningSystem, parse_level, start_system
from rayton_perf.config import PerfConfig
from rayton_perf.runner import run_level
from tests.support.processes import session_pids, stat_fields

_TICKS_PER_S = os.sysconf("SC_CLK_TCK")
# (substring of the command line, role), first match wins.
_ROLES = (
    ("ServeReplica:rayton-grpc", "rayton gRPC frontend replica"),
    ("ServeReplica:rayton-server", "rayton server application replica"),
    ("ServeReplica:", "model replica"),
    ("haproxy", "HAProxy (Serve ingress)"),
    # Forked stubs keep their zygote's command line.
    ("repo_adapter.python_backend.stub_zygote", "rayton python stubs and their zygote"),
    ("triton_python_backend_stub", "Triton python backend stub"),
    ("tritonserver", "tritonserver"),
)
_OTHER = "Ray / Serve control plane and the rest"
CLIENT = "load generator (tritonclient aio)"


def role_of(command_line: str) -> str:
    return next((role for key, role in _ROLES if key in command_line), _OTHER)


def cpu_seconds(pid: int) -> float:
    fields = stat_fields(pid)
    return (int(fields[11]) + int(fields[12])) / _TICKS_PER_S  # utime + stime


def session_cpu_by_process(session_id: int) -> dict[tuple[int, str], float]:
    """CPU seconds used so far by each live process of a session, by (pid, command line)."""
    used: dict[tuple[int, str], float] = {}
    for pid in session_pids(session_id):
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            used[pid, command.strip()] = cpu_seconds(pid)
        except (OSError, ValueError):
            continue  # exited meanwhile
    return used


def used_between(
    before: dict[tuple[int, str], float], after: dict[tuple[int, str], float]
) -> dict[tuple[int, str], float]:
    """CPU seconds each process of ``after`` used since ``before``, matched by pid: a Ray
    worker's command line is its title, which names the method it is running at the moment
    (``ray::ServeController`` one reading, ``ray::ServeController.listen_for_change`` the next),
    and a process matched by command line would count its whole life in the window."""
    earlier = {pid: used for (pid, _), used in before.items()}
    return {key: used - earlier.get(key[0], 0.0) for key, used in after.items()}


def session_cpu_by_role(session_id: int) -> dict[str, float]:
    """CPU seconds used so far by the live processes of a session, summed per role."""
    totals: dict[str, float] = defaultdict(float)
    for (_, command), used in session_cpu_by_process(session_id).items():
        totals[role_of(command)] += used
    return totals


@dataclasses.dataclass
class CpuShare:
    """CPU per request of one system at one level (``by_rest_process``: the processes of the
    control-plane-and-rest role, each on its own)."""

    throughput: float
    ms_per_request: dict[str, float]
    by_rest_process: dict[str, float] = dataclasses.field(default_factory=dict)
    requests: int = 0  # the requests the figures are per


def combined(windows: list[CpuShare]) -> CpuShare:
    """Several windows of one system at one level as one: each role's CPU over all their
    requests, and their mean rate."""
    requests = sum(window.requests for window in windows)

    def per_request(pick: Callable[[CpuShare], dict[str, float]]) -> dict[str, float]:
        totals: dict[str, float] = defaultdict(float)
        for window in windows:
            for name, share in pick(window).items():
                totals[name] += share * window.requests
        return {name: total / requests for name, total in totals.items()}

    return CpuShare(
        sum(window.throughput for window in windows) / len(windows),
        per_request(lambda window: window.ms_per_request),
        per_request(lambda window: window.by_rest_process),
        requests,
    )


async def measure_level(config: PerfConfig, concurrency: int, session_id: int) -> CpuShare:
    await run_level(config, concurrency=concurrency)  # warm-up level, not counted
    measured = dataclasses.replace(config, warmup_s=0.0, max_trials=3)
    server_before = session_cpu_by_process(session_id)
    client_before = time.process_time()
    result = await run_level(measured, concurrency=concurrency)
    client_used = time.process_time() - client_before
    server_after = session_cpu_by_process(session_id)
    requests = result.request_count  # three windows, all of them reported
    shares, rest = _server_shares(server_before, server_after, requests)
    shares[CLIENT] = client_used * 1000 / requests
    return CpuShare(result.throughput, dict(shares), dict(rest), requests)


def measure_spread(
    config: PerfConfig, concurrency: int, session_id: int, processes: int
) -> CpuShare:
    """As :func:`measure_level`, with the load spread over ``processes`` client processes."""
    window_s = config.measurement_interval_ms * 3 / 1000
    with ClientProcesses(config, concurrency, processes) as clients:
        time.sleep(config.warmup_s)
        server_before = session_cpu_by_process(session_id)
        start = clients.mark()
        time.sleep(window_s)
        window = clients.mark() - start
        server_after = session_cpu_by_process(session_id)
    if window.requests == 0:
        raise RuntimeError(f"no request finished in {window_s:g} s")
    shares, rest = _server_shares(server_before, server_after, window.requests)
    shares[CLIENT] = window.cpu_s * 1000 / window.requests
    rate = window.requests * config.batch_size / window.seconds
    return CpuShare(rate, shares, rest, window.requests)


def _server_shares(
    before: dict[tuple[int, str], float], after: dict[tuple[int, str], float], requests: int
) -> tuple[dict[str, float], dict[str, float]]:
    """Each role's CPU per request, and the rest role's process by process."""
    shares: dict[str, float] = defaultdict(float)
    rest: dict[str, float] = defaultdict(float)
    for key, used in used_between(before, after).items():
        share = used * 1000 / requests
        role = role_of(key[1])
        shares[role] += share
        if role == _OTHER:
            rest[key[1][:70]] += share
    return shares, rest


def render_rest(results: dict[tuple[str, str], CpuShare]) -> str:
    """The control-plane-and-rest role of each column, process by process (most first)."""
    lines = []
    for (system, level), share in results.items():
        if not share.by_rest_process:
            continue
        lines.append(f"{_OTHER}, {system} {level} (ms CPU per request):")
        for command, value in sorted(share.by_rest_process.items(), key=lambda kv: -kv[1]):
            if value >= 0.002:
                lines.append(f"  {value:.3f}  {command}")
    return "\n".join(lines)


def render(results: dict[tuple[str, str], CpuShare]) -> str:
    columns = list(results)
    roles = sorted({role for share in results.values() for role in share.ms_per_request})
    header = " | ".join(f"{system} {level}" for system, level in columns)
    lines = [f"| ms CPU per request | {header} |", "|---" * (len(columns) + 1) + "|"]
    lines.append(
        "| throughput (infer/s) | "
        + " | ".join(f"{results[c].throughput:.0f}" for c in columns)
        + " |"
    )
    for role in roles:
        cells = []
        for column in columns:
            value = results[column].ms_per_request.get(role)
            cells.append("" if value is None or value < 0.0005 else f"{value:.3f}")
        lines.append(f"| {role} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


Case = tuple[tuple[str, int, int], str]  # (model, concurrency, rows per request), shared memory


def case_label(case: Case) -> str:
    (model, concurrency, batch), shared = case
    label = f"{model} b={batch} c={concurrency}"
    return label if shared == "none" else f"{label} shm={shared}"


def measure_case(
    name: str, url: str, session_id: int, case: Case, args: argparse.Namespace
) -> CpuShare:
    """One window (three with one client process) of system ``name`` at ``url``."""
    (model, concurrency, batch), shared = case
    config = PerfConfig(
        model_name=model,
        url=url,
        protocol="grpc" if name.endswith("grpc") else "http",
        batch_size=batch,
        measurement_interval_ms=args.window_ms,
        warmup_s=args.warmup_s,
        shared_memory=shared,
        output_shared_memory_size=1 << 20,
    )
    if args.client_processes > 1:
        return measure_spread(config, concurrency, session_id, args.client_processes)
    return asyncio.run(measure_level(config, concurrency, session_id))


def measure_alternating(
    systems: list[str],
    cases: list[Case],
    repos: dict[str, Path],
    logs: Path,
    args: argparse.Namespace,
) -> dict[tuple[str, str], CpuShare]:
    """Every server up at once (``name`` and ``name-grpc`` share one), and at each level the
    systems measured in turn, ``args.alternate`` times: a drift in the machine's speed then
    falls on every system alike. Each system's figures sum its windows."""
    servers: dict[str, RunningSystem] = {}
    results: dict[tuple[str, str], CpuShare] = {}
    try:
        for name in systems:
            base = name.removesuffix("-grpc")
            if base not in servers:
                servers[base] = start_system(base, repos, logs)
        for case in cases:
            windows: dict[str, list[CpuShare]] = defaultdict(list)
            for _ in range(args.alternate):
                for name in systems:
                    server = servers[name.removesuffix("-grpc")]
                    url = server.grpc_url if name.endswith("-grpc") else server.url
                    windows[name].append(measure_case(name, url, server.session_id, case, args))
            for name in systems:
                share = combined(windows[name])
                results[(name, case_label(case))] = share
                print(f"  {name} {case_label(case)}: {share.throughput:.0f} infer/s", flush=True)
    finally:
        for server in servers.values():
            server.stop()
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--systems", default="rayton,rayton-grpc,triton,triton-grpc")
    parser.add_argument(
        "--levels",
        default="mlp:16,mlp:32,cnn:32,mlp:16:8",
        help="model:concurrency[:rows per request], comma-separated",
    )
    parser.add_argument(
        "--shared-memory",
        default="none",
        help="none, system, or both comma-separated: where the tensors travel",
    )
    parser.add_argument(
        "--rest-by-process",
        action="store_true",
        help="also list the control-plane-and-rest role process by process",
    )
    parser.add_argument(
        "--client-processes",
        type=int,
        default=1,
        help="spread the load over this many client processes (1: in this process)",
    )
    parser.add_argument(
        "--alternate",
        type=int,
        default=0,
        metavar="ROUNDS",
        help="start every system's server at once and measure the systems in turn at each "
        "level, ROUNDS times, summing each system's windows (the other servers idle "
        "meanwhile: their rates are not comparable, their CPU per request is)",
    )
    parser.add_argument("--window-ms", type=int, default=3000)
    parser.add_argument("--warmup-s", type=float, default=3.0)
    args = parser.parse_args(argv)
    levels = [parse_level(item) for item in args.levels.split(",")]
    systems = args.systems.split(",")
    cases = list(itertools.product(levels, args.shared_memory.split(",")))
    results: dict[tuple[str, str], CpuShare] = {}
    with tempfile.TemporaryDirectory(prefix="rayton-cpu-") as tmp:
        root = Path(tmp)
        asked = {model for model, _, _ in levels}
        extra = tuple(m for m in OVERHEAD_MODELS if m.name in asked)
        rayton_repo, reference_repo = write_repositories(root, MODELS + extra)
        repos = {"rayton": rayton_repo, "reference": reference_repo}
        if args.alternate:
            results = measure_alternating(systems, cases, repos, root, args)
        else:
            for name in systems:
                system = start_system(name, repos, root)
                try:
                    for case in cases:
                        share = measure_case(name, system.url, system.session_id, case, args)
                        label = case_label(case)
                        results[(name, label)] = share
                        print(f"  {name} {label}: {share.throughput:.0f} infer/s", flush=True)
                finally:
                    system.stop()
    print(render(results))
    if args.rest_by_process:
        print(render_rest(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
