"""A whole model zoo under ``rayton serve`` on this machine, and Ctrl-C while it deploys.

The figures (seconds to the start-up table, memory of the whole process session) are printed
for the record; the targets are tracked in BENCHMARKS.md (``python -m benchmarks.zoo``).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from benchmarks.zoo import measure, write_zoo
from tests.support.ports import free_port
from tests.support.processes import (
    rayton_serve_command,
    rayton_serve_env,
    session_pids,
    start_session,
)

pytestmark = pytest.mark.cluster


def test_a_40_model_zoo_serves_every_model_and_stops_clean():
    result = measure(40, free_port(), free_port())
    print("zoo:", json.dumps(result))
    assert result["ready"] == result["loadable"] == 40, result["not_ready"]
    assert result["seconds_to_table"] is not None
    assert result["gpu_model"]["state"] == "UNAVAILABLE"
    assert "needs 1 GPU" in result["gpu_model"]["reason"]
    assert result["server_ready"]  # a model this cluster has no GPU for does not block it
    assert result["left_after_sigint"] == 0


def test_ctrl_c_while_deploying_leaves_no_process(tmp_path):
    write_zoo(tmp_path / "zoo", 12, gpu_model=False)
    ray_tmp = Path(tempfile.mkdtemp(prefix="rt", dir="/tmp"))  # AF_UNIX paths: <108 bytes
    # Dedicated: many replicas, so the deploy is still running when the signal comes.
    command = rayton_serve_command(
        tmp_path / "zoo", free_port(), free_port(), "--cpu-models", "dedicated"
    )
    log = (tmp_path / "stderr.log").open("w")
    server = start_session(
        command, env=rayton_serve_env(ray_tmp), stdout=subprocess.PIPE, stderr=log, text=True
    )
    try:
        assert server.stdout is not None
        for line in server.stdout:
            if line.startswith("loading models"):
                break
        time.sleep(2)  # the controller is deploying the model applications
        assert server.poll() is None, (tmp_path / "stderr.log").read_text()[-3000:]
        server.send_signal(signal.SIGINT)
        deadline = time.monotonic() + 90
        while session_pids(server.pid) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert session_pids(server.pid) == [], "processes left after Ctrl-C during the deploy"
        assert "rayton is serving" not in server.stdout.read()
    finally:
        for pid in session_pids(server.pid):
            os.kill(pid, signal.SIGKILL)
        server.wait(30)
        shutil.rmtree(ray_tmp, ignore_errors=True)
