"""Python models that kill their own process on a poison request, and the client helpers
the fault tests use against them."""

from __future__ import annotations

import contextlib
import json
import threading
import time
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import tritonclient.http as httpclient

ECHO = """\
import os

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            data = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            if np.any(data < 0):
                os._exit(3)  # the whole replica process goes, mid-request
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", data)]))
        return responses
"""
# ECHO in a stub process that, on -2, kills the replica running the stub (the parent of
# the stub's zygote), as native code crashing inside the replica would; it refuses to where
# that process is not a replica.
KILLS_ITS_REPLICA = ECHO.replace(
    "            if np.any(data < 0):",
    """            if np.any(data <= -2):
                with open(f"/proc/{os.getppid()}/stat") as zygote:
                    replica = int(zygote.read().rsplit(")", 1)[1].split()[1])
                with open(f"/proc/{replica}/cmdline", "rb") as process:
                    if b"ServeReplica" in process.read():
                        os.kill(replica, 9)
            if np.any(data < 0):""",
)
assert KILLS_ITS_REPLICA != ECHO
CONFIG = """\
backend: "python"
max_batch_size: 4
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 2 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 2 ] } ]
"""
PROMPT_S = 30.0  # a failed request ends within this (Serve's health checks find a dead actor)
RECOVERY_S = 120.0  # a replaced replica serves within this on a busy 2-core machine


def infer(url: str, model: str, value: float, timeout_s: float = 60.0) -> np.ndarray:
    tensor = httpclient.InferInput("IN", [1, 2], "FP32")
    tensor.set_data_from_numpy(np.full((1, 2), value, np.float32))
    with httpclient.InferenceServerClient(url, network_timeout=timeout_s) as client:
        return client.infer(model, [tensor]).as_numpy("OUT")


def serves(url: str, model: str) -> bool:
    try:
        return infer(url, model, 1.0, timeout_s=10).tolist() == [[1.0, 1.0]]
    except Exception:
        return False


def wait_until(predicate, timeout_s: float) -> float | None:
    """Seconds until ``predicate()`` held, or None."""
    start = time.monotonic()
    while time.monotonic() - start < timeout_s:
        if predicate():
            return time.monotonic() - start
        time.sleep(0.5)
    return None


def replica_pids(url: str, model: str) -> list[int]:
    with urllib.request.urlopen(f"http://{url}/v2/rayton/status", timeout=30) as response:
        status = json.loads(response.read())
    return [replica["pid"] for replica in status["models"][model]["replicas"]]


@dataclass(frozen=True)
class Outcome:
    """One request of :func:`steady_load`: when it began, how long it took, whether it got
    the model's answer."""

    begun: float
    seconds: float
    ok: bool


@contextlib.contextmanager
def steady_load(url: str, model: str, clients: int = 4) -> Iterator[list[Outcome]]:
    """``clients`` threads asking ``model`` (an :data:`ECHO` model) for 2.0 back-to-back
    until the block ends; yields the list their outcomes are appended to."""
    stop = threading.Event()
    outcomes: list[Outcome] = []

    def client() -> None:
        while not stop.is_set():
            begun = time.monotonic()
            try:
                ok = infer(url, model, 2.0, timeout_s=PROMPT_S).tolist() == [[2.0, 2.0]]
            except Exception:
                ok = False
            outcomes.append(Outcome(begun, time.monotonic() - begun, ok))

    with ThreadPoolExecutor(clients) as pool:
        for _ in range(clients):
            pool.submit(client)
        try:
            yield outcomes
        finally:
            stop.set()
