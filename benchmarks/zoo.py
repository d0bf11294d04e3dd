"""A model zoo: a generated repository of many small python and ONNX models, and its start-up cost.

``python -m benchmarks.zoo write DIR --models 40`` writes the repository (half python models
with a config, half ONNX MLPs without one, auto-completed to Triton's two CPU instances, plus
one model that asks for a GPU). ``python -m benchmarks.zoo measure --models 40`` serves a fresh
one with ``rayton serve`` in its own process session and prints, as JSON, the seconds until the
start-up table printed (every model settled) and until every loadable model answered, the
memory of the whole process session (the Ray cluster included), and each model's state.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.support.ports import free_port
from tests.support.processes import (
    rayton_serve_command,
    rayton_serve_env,
    session_pids,
    start_session,
)

PYTHON_MODEL = """\
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            value = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", value + 1)]))
        return responses
"""

PYTHON_CONFIG = """\
backend: "python"
max_batch_size: 8
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] } ]
dynamic_batching { }
"""

GPU_CONFIG = PYTHON_CONFIG + "instance_group [ { kind: KIND_GPU count: 1 } ]\n"
GPU_MODEL = "needs_gpu"


def write_zoo(root: Path, models: int = 40, gpu_model: bool = True) -> list[str]:
    """Write ``models`` models (plus the GPU one) under ``root``; returns the loadable names."""
    from examples.builders import save_onnx_mlp

    names = []
    for index in range(models):
        if index % 2 == 0:
            name = f"python_{index:02d}"
            (root / name / "1").mkdir(parents=True, exist_ok=True)
            (root / name / "config.pbtxt").write_text(PYTHON_CONFIG)
            (root / name / "1" / "model.py").write_text(PYTHON_MODEL)
        else:
            name = f"onnx_{index:02d}"
            (root / name / "1").mkdir(parents=True, exist_ok=True)
            save_onnx_mlp(root / name / "1" / "model.onnx", (16, 32, 4), seed=index)
        names.append(name)
    if gpu_model:
        (root / GPU_MODEL / "1").mkdir(parents=True, exist_ok=True)
        (root / GPU_MODEL / "config.pbtxt").write_text(GPU_CONFIG)
        (root / GPU_MODEL / "1" / "model.py").write_text(PYTHON_MODEL)
    return names


def session_rss_bytes(session_id: int) -> int:
    """Resident memory of every process of a process session (Ray's processes included)."""
    total = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if os.getsid(int(entry.name)) != session_id:
                continue
            for line in (entry / "status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) * 1024
        except (OSError, ProcessLookupError, ValueError):
            continue
    return total


def measure(
    models: int,
    http_port: int,
    grpc_port: int,
    cpu_models: str = "shared",
    timeout_s: float = 900.0,
) -> dict:
    """Serve a fresh zoo with ``rayton serve``; time to the start-up table, memory, states."""
    import urllib.error
    import urllib.request

    # Ray's temp dir under /tmp whatever TMPDIR says: its AF_UNIX socket paths must stay short.
    with tempfile.TemporaryDirectory(prefix="rt", dir="/tmp") as scratch:
        root = Path(scratch) / "zoo"
        names = write_zoo(root, models)
        env = rayton_serve_env(scratch)
        command = rayton_serve_command(root, http_port, grpc_port, "--cpu-models", cpu_models)
        start = time.monotonic()
        stderr_path = Path(scratch) / "stderr.log"
        stderr_log = stderr_path.open("w")
        server = start_session(
            command, env=env, stdout=subprocess.PIPE, stderr=stderr_log, text=True
        )
        lines: list[str] = []
        peak = 0
        try:
            assert server.stdout is not None
            table_s = None
            for line in server.stdout:
                lines.append(line.rstrip())
                peak = max(peak, session_rss_bytes(server.pid))
                if line.startswith("Ctrl-C to stop"):
                    table_s = time.monotonic() - start
                    break
                if time.monotonic() - start > timeout_s:
                    break
            if table_s is None:
                raise RuntimeError(
                    f"rayton serve printed no start-up table (exit code {server.poll()}):\n"
                    + "\n".join(lines[-20:])
                    + "\n--- stderr ---\n"
                    + stderr_path.read_text()[-4000:]
                )
            url = f"http://127.0.0.1:{http_port}/v2/repository/index"
            request = urllib.request.Request(url, data=b"{}", method="POST")
            with urllib.request.urlopen(request, timeout=60) as response:
                index = json.loads(response.read())
            health = f"http://127.0.0.1:{http_port}/v2/health/ready"
            try:
                with urllib.request.urlopen(health, timeout=60) as response:
                    server_ready = response.status == 200
            except urllib.error.HTTPError:
                server_ready = False
            time.sleep(5)  # settle: replicas finish their start-up work
            memory = session_rss_bytes(server.pid)
        finally:
            server.send_signal(signal.SIGINT)
            deadline = time.monotonic() + 120
            while session_pids(server.pid) and time.monotonic() < deadline:
                time.sleep(0.5)
            left = session_pids(server.pid)
            for pid in left:
                os.kill(pid, signal.SIGKILL)
            server.wait(30)
            stderr_log.close()
        states = {e["name"]: e.get("state", "") for e in index}
        reasons = {e["name"]: e.get("reason", "") for e in index if e.get("reason")}
        return {
            "cpu_models": cpu_models,
            "models": models + 1,
            "loadable": len(names),
            "ready": sum(1 for n in names if states.get(n) == "READY"),
            "seconds_to_table": round(table_s, 1) if table_s is not None else None,
            "server_ready": server_ready,
            "session_rss_gib": round(memory / 2**30, 2),
            "peak_session_rss_gib": round(peak / 2**30, 2),
            "gpu_model": {"state": states.get(GPU_MODEL), "reason": reasons.get(GPU_MODEL)},
            "not_ready": {n: s for n, s in states.items() if s != "READY" and n != GPU_MODEL},
            "left_after_sigint": len(left),
        }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    write = sub.add_parser("write", help="write a zoo repository")
    write.add_argument("directory", type=Path)
    write.add_argument("--models", type=int, default=40)
    run = sub.add_parser("measure", help="serve a fresh zoo and measure start-up and memory")
    run.add_argument("--models", type=int, default=40)
    run.add_argument("--cpu-models", choices=("shared", "dedicated"), default="shared")
    run.add_argument("--http-port", type=int, default=None, help="default: a free port")
    run.add_argument("--grpc-port", type=int, default=None, help="default: a free port")
    args = parser.parse_args(argv)
    if args.command == "write":
        names = write_zoo(args.directory, args.models)
        print(f"wrote {len(names) + 1} models to {args.directory}")
        return 0
    http_port, grpc_port = args.http_port or free_port(), args.grpc_port or free_port()
    print(json.dumps(measure(args.models, http_port, grpc_port, args.cpu_models), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
