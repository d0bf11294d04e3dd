"""A soak: mixed valid and malformed traffic on both protocols for N minutes.

``python -m benchmarks.soak --minutes 10`` starts ``rayton serve`` on the example repository
plus the test models (free loopback ports, its own Ray temp dir and process session), then runs
``--clients`` threads per protocol, each sending valid requests (checked for the right answer)
and, every ``--invalid-every``-th request, a malformed one from the fuzz suite's generators
(which must get a client error). Every 30 s it samples the resident memory of each process of
the server's session. At the end it prints requests and errors by kind, throughput, and memory
at the start (after a 60 s warm-up), the peak and the end per process kind, and exits 1 when a
valid request failed or a malformed one got a server error. Not part of the test suite.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import grpc
import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from tests.support.malformed import CLIENT_CODES, grpc_case, http_case, send_http
from tests.support.ports import free_port
from tests.support.processes import (
    rayton_serve_command,
    rayton_serve_env,
    server_ready,
    session_pids,
    start_session,
)

ROOT = Path(__file__).resolve().parents[1]
SAMPLE_EVERY_S = 30.0
WARM_UP_S = 60.0


class Tally:
    """Counts by kind, from many threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.counts: collections.Counter[str] = collections.Counter()
        self.examples: dict[str, str] = {}

    def add(self, kind: str, example: str = "") -> None:
        with self._lock:
            self.counts[kind] += 1
            if example and kind not in self.examples:
                self.examples[kind] = example[:300]


def _repository(scratch: Path) -> Path:
    repository = scratch / "repository"
    repository.mkdir()
    for model in (ROOT / "examples" / "model_repository").iterdir():
        if model.is_dir():
            (repository / model.name).symlink_to(model)
    for name in ("batch_recorder", "bytes_identity"):
        (repository / name).symlink_to(ROOT / "tests" / "deployments" / "model_repository" / name)
    return repository


def http_client(url: str, stop: threading.Event, tally: Tally, invalid_every: int, seed: int):
    data = np.array([[1.0, 2.0]], np.float32)
    sent = 0
    with httpclient.InferenceServerClient(url) as client:
        while not stop.is_set():
            sent += 1
            if sent % invalid_every == 0:
                method, path, headers, body, applied = http_case(seed + sent)
                try:
                    status, reply = send_http(url, method, path, headers, body)
                except OSError as err:
                    tally.add("http malformed: connection error", f"{applied}: {err}")
                    continue
                # 501: Triton's refusal of an unsupported feature (a compression type)
                server_error = status >= 500 and status != 501
                kind = "server error" if server_error else "client error" if status >= 400 else "ok"
                tally.add(f"http malformed: {kind}", f"{applied}: {status} {reply[:120]!r}")
                continue
            tensor = httpclient.InferInput("IN", [1, 2], "FP32")
            tensor.set_data_from_numpy(data)
            try:
                out = client.infer("batch_recorder", [tensor]).as_numpy("OUT")
                ok = np.array_equal(out, data)
                tally.add("http valid: ok" if ok else "http valid: wrong answer")
            except Exception as err:
                tally.add("http valid: failed", repr(err))


def grpc_client(url: str, stop: threading.Event, tally: Tally, invalid_every: int, seed: int):
    data = np.array([[3.0, 4.0]], np.float32)
    sent = 0
    with grpcclient.InferenceServerClient(url) as client, grpc.insecure_channel(url) as channel:
        raw = channel.unary_unary("/inference.GRPCInferenceService/ModelInfer")
        while not stop.is_set():
            sent += 1
            if sent % invalid_every == 0:
                message, applied = grpc_case(seed + sent)
                try:
                    raw(message, timeout=30)
                    tally.add("grpc malformed: ok")
                except grpc.RpcError as err:
                    kind = "client error" if err.code() in CLIENT_CODES else "server error"
                    tally.add(f"grpc malformed: {kind}", f"{applied}: {err.code()} {err.details()}")
                continue
            tensor = grpcclient.InferInput("IN", [1, 2], "FP32")
            tensor.set_data_from_numpy(data)
            try:
                out = client.infer("batch_recorder", [tensor]).as_numpy("OUT")
                ok = np.array_equal(out, data)
                tally.add("grpc valid: ok" if ok else "grpc valid: wrong answer")
            except Exception as err:
                tally.add("grpc valid: failed", repr(err))


def _rss_by_process(session: int) -> dict[str, int]:
    """Resident bytes per process of the session, keyed ``<pid> <short command>`` (a Ray
    worker's title names the task it runs now, so the report matches processes by pid)."""
    found = {}
    for pid in session_pids(session):
        try:
            with open(f"/proc/{pid}/statm") as f:
                resident_pages = int(f.read().split()[1])
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                words = f.read().split(b"\0")
        except OSError:
            continue
        name = next((w.decode() for w in words if w.startswith(b"ray::")), "")
        name = name or " ".join(os.path.basename(w.decode()) for w in words[:2])
        found[f"{pid} {name[:60]}"] = resident_pages * os.sysconf("SC_PAGE_SIZE")
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--clients", type=int, default=4, help="threads per protocol")
    parser.add_argument("--invalid-every", type=int, default=10)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()

    scratch = Path(tempfile.mkdtemp(prefix="rt", dir="/tmp"))  # short: AF_UNIX socket paths
    port, grpc_port = free_port(), free_port()
    command = rayton_serve_command(_repository(scratch), port, grpc_port)
    server = start_session(
        command, env=rayton_serve_env(scratch), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    url, grpc_url = f"127.0.0.1:{port}", f"127.0.0.1:{grpc_port}"
    tally, stop = Tally(), threading.Event()
    samples: list[tuple[float, dict[str, int]]] = []
    try:
        deadline = time.monotonic() + 300
        while not server_ready(url) and time.monotonic() < deadline:
            time.sleep(1)
        if not server_ready(url):
            print("rayton serve did not become ready in 300 s")
            return 1
        threads = [
            threading.Thread(
                target=fn, args=(u, stop, tally, args.invalid_every, args.seed + i * 997)
            )
            for i in range(args.clients)
            for fn, u in ((http_client, url), (grpc_client, grpc_url))
        ]
        started = time.monotonic()
        for thread in threads:
            thread.start()
        end = started + args.minutes * 60
        while time.monotonic() < end:
            samples.append((time.monotonic() - started, _rss_by_process(server.pid)))
            time.sleep(min(SAMPLE_EVERY_S, max(end - time.monotonic(), 0)))
        samples.append((time.monotonic() - started, _rss_by_process(server.pid)))
        stop.set()
        for thread in threads:
            thread.join(60)
        elapsed = time.monotonic() - started
    finally:
        stop.set()
        server.send_signal(signal.SIGINT)
        with contextlib.suppress(subprocess.TimeoutExpired):
            server.wait(120)
        for pid in session_pids(server.pid):
            os.kill(pid, signal.SIGKILL)
        shutil.rmtree(scratch, ignore_errors=True)
    return report(tally, samples, elapsed, args)


def report(tally: Tally, samples, elapsed: float, args) -> int:
    total = sum(tally.counts.values())
    print(
        f"soak: {args.minutes:g} min, {args.clients} clients per protocol, "
        f"1 in {args.invalid_every} requests malformed"
    )
    print(f"{total} requests in {elapsed:.0f} s ({total / elapsed:.0f}/s)")
    for kind, count in sorted(tally.counts.items()):
        print(f"  {kind:40s} {count:8d}")
    for kind, example in sorted(tally.examples.items()):
        if "ok" not in kind and "client error" not in kind:
            print(f"  e.g. {kind}: {example}")
    by_pid = [(t, {key.split()[0]: (key, rss) for key, rss in s.items()}) for t, s in samples]
    baseline = next((s for t, s in by_pid if t >= WARM_UP_S), by_pid[0][1])
    last = by_pid[-1][1]
    print(f"resident memory (MB) after {WARM_UP_S:.0f} s warm-up -> peak -> end:")
    for pid in sorted(baseline, key=lambda p: -baseline[p][1]):
        process = baseline[pid][0]
        peak = max(s.get(pid, ("", 0))[1] for _, s in by_pid)
        start, end = baseline[pid][1] / 1e6, last.get(pid, ("", 0))[1] / 1e6
        print(
            f"  {process:66s} {start:7.1f} -> {peak / 1e6:7.1f} -> {end:7.1f} ({end - start:+.1f})"
        )
    bad = [
        k
        for k in tally.counts
        if k.endswith(("failed", "wrong answer", "server error", "connection error"))
    ]
    print(json.dumps({"bad": {k: tally.counts[k] for k in bad}}))
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
