"""Stubs forked by the process's stub zygote (``repo_adapter.backends.stub_launcher``)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import sys
import time

from repo_adapter.backends.stub_launcher import launcher
from repo_adapter.errors import InferenceServerError
from repo_adapter.python_backend.stub_channel import Arena
from repo_adapter.python_backend.stub_zygote import STUB_PROCESS_NAME
from tests.repo_adapter.backends.test_python_stub import (
    RESTART_S,
    ok,
    probe_request,
    write_probe,
)
from tests.support.processes import process_name, stat_fields

# Writes what its stub process sees at initialize() to the file $SURROUNDINGS_OUT names.
SURROUNDINGS = """
import json
import os
import sys

import numpy as np


class TritonPythonModel:
    def initialize(self, args):
        with open(os.environ["SURROUNDINGS_OUT"], "w") as out:
            json.dump(
                {
                    "marker": os.environ.get("SURROUNDINGS_MARKER"),
                    "cwd": os.getcwd(),
                    "path": sys.path,
                    "random": float(np.random.rand()),
                },
                out,
            )

    def execute(self, requests):
        return []
"""
SURROUNDINGS_CONFIG = """
backend: "python"
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] } ]
"""


def parent_pid(pid: int) -> int:
    return int(stat_fields(pid)[1])


def test_a_stub_is_forked_by_the_zygote_and_named_as_a_stub(load, tmp_path):
    backend = load("probe", write_probe(tmp_path))
    stub_pid = backend._stub.process.pid

    zygote = launcher().zygote_pid()
    assert zygote is not None and parent_pid(zygote) == os.getpid()
    assert parent_pid(stub_pid) == zygote
    assert process_name(stub_pid) == STUB_PROCESS_NAME


def test_a_stub_takes_the_hosts_environment_path_and_directory_of_the_moment(
    load, tmp_path, monkeypatch
):
    load("probe", write_probe(tmp_path / "first"))  # the zygote runs before the changes
    root = tmp_path / "repository"
    for name in ("one", "two"):
        (root / name / "1").mkdir(parents=True)
        (root / name / "config.pbtxt").write_text(SURROUNDINGS_CONFIG)
        (root / name / "1" / "model.py").write_text(SURROUNDINGS)
    extra = tmp_path / "extra-imports"
    monkeypatch.setenv("SURROUNDINGS_MARKER", "set after the zygote started")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [*sys.path, str(extra)])

    seen = []
    for name in ("one", "two"):
        out = tmp_path / f"{name}.json"
        monkeypatch.setenv("SURROUNDINGS_OUT", str(out))
        load(name, root)
        seen.append(json.loads(out.read_text()))

    for surroundings in seen:
        assert surroundings["marker"] == "set after the zygote started"
        assert surroundings["cwd"] == str(tmp_path)
        assert str(extra) in surroundings["path"]
    assert seen[0]["random"] != seen[1]["random"]  # numpy's seed is not the zygote's


def test_exit_statuses_reach_the_host(load, tmp_path):
    backend = load("probe", write_probe(tmp_path))
    stub = backend._stub.process
    backend.unload()
    assert stub.wait(10) == 0 and stub.poll() == 0

    channels = [socket.socketpair() for _ in range(2)]
    arenas = [Arena.create("launcher-test") for _ in range(2)]
    waiting = launcher().spawn(
        (*(theirs.fileno() for _, theirs in channels), *(arena.fd for arena in arenas))
    )
    try:
        assert waiting.poll() is None  # for its StartInstance
        waiting.kill()
        assert waiting.wait(10) == -signal.SIGKILL
    finally:
        for ours, theirs in channels:
            ours.close()
            theirs.close()
        for arena in arenas:
            arena.close()


async def test_a_lost_zygote_stops_its_stubs_which_restart_through_a_new_one(load, tmp_path):
    backend = load("probe", write_probe(tmp_path))
    stub = backend._stub.process
    zygote = launcher().zygote_pid()
    assert zygote is not None

    os.kill(zygote, signal.SIGKILL)

    assert stub.wait(10) == -signal.SIGKILL
    deadline = time.monotonic() + RESTART_S
    while True:
        try:
            (result,) = await backend.execute([probe_request(4.0)])
            break
        except InferenceServerError:
            assert time.monotonic() < deadline, "the instance did not serve again"
            await asyncio.sleep(0.1)
    assert ok(result).output("OUT").data.tolist() == [[4.0]]
    new_pid = int(result.output("PID").data[0, 0])
    assert new_pid != stub.pid
    assert parent_pid(new_pid) == launcher().zygote_pid() != zygote
