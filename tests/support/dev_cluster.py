"""``rayton cluster`` (a head and worker nodes on this machine) in a process session of its
own, for the multi-node tests: its address and its workers' node ids."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from tests.support.processes import ServerProcess

RAYTON = str(Path(sys.executable).parent / "rayton")


class RaytonCluster:
    """``rayton cluster --workers 2`` started in a session of its own; ``stop`` ends it."""

    def __init__(self, log: Path, env: dict[str, str], gpus_per_worker: int = 0) -> None:
        self.server = ServerProcess(
            [RAYTON, "cluster", "--workers", "2", "--gpus-per-worker", str(gpus_per_worker)],
            log,
            env,
        )
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            for line in log.read_text().splitlines():
                if line.startswith("{"):
                    self.description = json.loads(line)
                    return
            if self.server.process.poll() is not None:
                break
            time.sleep(0.5)
        self.server.stop()
        raise RuntimeError(f"rayton cluster did not start; see {log}")

    @property
    def address(self) -> str:
        return self.description["address"]

    @property
    def worker_ids(self) -> list[str]:
        return [worker["node_id"] for worker in self.description["workers"]]


def rayton_status(url: str) -> dict:
    """``rayton status --url URL --json``."""
    result = subprocess.run(
        [RAYTON, "status", "--url", url, "--json"], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)
