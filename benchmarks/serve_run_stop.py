"""How long ``serve run serve_config.yaml`` takes to stop on Ctrl-C, by ingress and drain period.

``python -m benchmarks.serve_run_stop`` serves the committed config (the example repository,
free ports, its own Ray temp dir and process session) three ways: Serve's Python proxy, fast
ingress (HAProxy), and fast ingress with 2 s draining periods; for each it prints the seconds
until ready and from SIGINT until ``serve run`` exited and every process of its session was gone.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from cluster.local import FAST_INGRESS_ENV
from tests.support.ports import free_port
from tests.support.processes import server_ready, session_pids, start_session

ROOT = Path(__file__).resolve().parents[1]
SHORT_DRAINS = {
    "RAY_SERVE_DIRECT_INGRESS_MIN_DRAINING_PERIOD_S": "2",
    "RAY_SERVE_PROXY_MIN_DRAINING_PERIOD_S": "2",
}


def measure(extra_env: dict[str, str]) -> tuple[float, float, float]:
    """(seconds to ready, seconds from SIGINT to exit, seconds until no process is left)."""
    scratch = Path(tempfile.mkdtemp(prefix="rt", dir="/tmp"))  # short: AF_UNIX socket paths
    config = yaml.safe_load((ROOT / "serve_config.yaml").read_text())
    port = free_port()
    config["http_options"]["port"] = port
    for app in config["applications"]:
        for key in ("grpc_port", "metrics_port"):
            if key in app["args"]:
                app["args"][key] = free_port()
    (scratch / "serve_config.yaml").write_text(yaml.safe_dump(config))
    (scratch / "examples").mkdir()
    (scratch / "examples" / "model_repository").symlink_to(ROOT / "examples" / "model_repository")
    env = dict(os.environ, RAY_AUTH_MODE="disabled", RAY_TMPDIR=str(scratch), **extra_env)
    env.pop("RAY_ADDRESS", None)
    serve = Path(sys.executable).parent / "serve"
    server = start_session(
        [str(serve), "run", "serve_config.yaml"],
        cwd=scratch,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        start = time.monotonic()
        while not server_ready(f"127.0.0.1:{port}") and time.monotonic() - start < 300:
            time.sleep(1)
        ready_s = time.monotonic() - start
        server.send_signal(signal.SIGINT)
        stopped = time.monotonic()
        with contextlib.suppress(subprocess.TimeoutExpired):  # then measured as "left"
            server.wait(120)
        exit_s = time.monotonic() - stopped
        while session_pids(server.pid) and time.monotonic() - stopped < 120:
            time.sleep(0.2)
        gone_s = time.monotonic() - stopped
    finally:
        for pid in session_pids(server.pid):
            os.kill(pid, signal.SIGKILL)
        shutil.rmtree(scratch, ignore_errors=True)
    return ready_s, exit_s, gone_s


def main() -> int:
    for label, extra in (
        ("Python proxy", {}),
        ("fast ingress", dict(FAST_INGRESS_ENV)),
        ("fast ingress, 2 s drain periods", {**FAST_INGRESS_ENV, **SHORT_DRAINS}),
    ):
        ready_s, exit_s, gone_s = measure(extra)
        print(
            f"{label}: ready after {ready_s:.0f} s; exited {exit_s:.1f} s after SIGINT, "
            f"no process left after {gone_s:.1f} s",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
