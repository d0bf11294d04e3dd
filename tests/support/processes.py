"""Servers as child processes in their own session, stopped exactly: every pid of the session.

Ray's HAProxy and worker processes can outlive a server's own shutdown; a server started in
a new session can be ended completely without touching anything else on the machine.

Servers start with SIGINT and SIGQUIT at their default action, as from a terminal. A test
run launched in the background by a non-interactive shell (``make test &``, a CI runner)
inherits both as *ignored*, and an ignored disposition survives ``exec``: ``serve run`` then
never sees the Ctrl-C it is sent and never shuts down.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path


def default_signals() -> None:
    """``preexec_fn``: SIGINT and SIGQUIT back to their default action in the child."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGQUIT, signal.SIG_DFL)


def start_session(command: list[str], **popen_kwargs) -> subprocess.Popen:
    """``command`` in a new process session, with default signal actions (see above)."""
    return subprocess.Popen(
        command, start_new_session=True, preexec_fn=default_signals, **popen_kwargs
    )


def stat_fields(pid: int) -> list[str]:
    """``/proc/<pid>/stat`` from the state on (field 3 of proc(5) is index 0).

    Raises OSError when the process is gone.
    """
    # The command name (field 2) may hold spaces and parentheses: split after its last ")".
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def session_pids(sid: int) -> list[int]:
    """Live pids of process session ``sid`` (read from /proc; zombies excluded)."""
    return _live_pids(lambda fields: int(fields[3]) == sid)


def child_pids(parent: int) -> list[int]:
    """Live pids whose parent is ``parent``."""
    return _live_pids(lambda fields: int(fields[1]) == parent)


def descendant_pids(ancestor: int) -> list[int]:
    """Live pids below ``ancestor`` (children, their children, ...)."""
    found, frontier = [], [ancestor]
    while frontier:
        children = child_pids(frontier.pop())
        found += children
        frontier += children
    return found


def process_name(pid: int) -> bytes:
    """The process's name (``/proc/<pid>/comm``); empty once it is gone."""
    try:
        return Path(f"/proc/{pid}/comm").read_bytes().strip()
    except OSError:
        return b""


def _live_pids(selected: Callable[[list[str]], bool]) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = stat_fields(int(entry.name))
        except OSError:
            continue
        if selected(fields) and fields[0] != "Z":
            pids.append(int(entry.name))
    return pids


class ServerProcess:
    """A server command started in a new session; ``stop()`` ends the whole session.

    ``env`` is the server's whole environment (:func:`rayton_serve_env` builds one without an
    inherited ``RAY_ADDRESS``); without it, this process's. Ray's token auth is off unless
    ``env`` turns it on.
    """

    def __init__(self, command: list[str], log_path: Path, env: dict[str, str] | None = None):
        self.log = open(log_path, "w")  # noqa: SIM115 - closed in stop()
        self.process = start_session(
            command,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "RAY_AUTH_MODE": "disabled"}
            if env is None
            else {"RAY_AUTH_MODE": "disabled", **env},
        )

    def wait_http(self, url: str, timeout_s: float = 300) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"server exited with {self.process.returncode}:\n{self.log_tail()}"
                )
            try:
                with urllib.request.urlopen(url, timeout=2) as response:
                    if response.status == 200:
                        return
            except OSError:
                pass
            time.sleep(1)
        raise TimeoutError(f"{url} not ready after {timeout_s} s:\n{self.log_tail()}")

    def log_tail(self, chars: int = 3000) -> str:
        """The end of the server's output (the test's report shows it where the log file is
        out of reach, as on CI), and where the whole of it is."""
        self.log.flush()
        return f"{Path(self.log.name).read_text(errors='replace')[-chars:]}\n(log: {self.log.name})"

    def stop(self, timeout_s: float = 60) -> None:
        sid = self.process.pid
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=timeout_s)
        deadline = time.monotonic() + 20
        while session_pids(sid) and time.monotonic() < deadline:
            time.sleep(0.5)
        for pid in session_pids(sid):
            os.kill(pid, signal.SIGKILL)
        self.log.close()


def rayton_serve_command(
    repository: Path | str, http_port: int, grpc_port: int, *options: str
) -> list[str]:
    """``rayton serve`` of ``repository`` on loopback ports (free dashboard and metrics
    ports)."""
    from tests.support.ports import free_port

    return [
        str(Path(sys.executable).parent / "rayton"),
        "serve",
        "--model-repository",
        str(repository),
        "--http-port",
        str(http_port),
        "--grpc-port",
        str(grpc_port),
        "--dashboard-port",
        str(free_port()),
        "--metrics-port",
        str(free_port()),
        *options,
    ]


def rayton_serve_env(ray_tmp: Path | str) -> dict[str, str]:
    """The environment of a ``rayton serve`` with its own Ray temp dir (keep the path short:
    Ray's AF_UNIX socket paths must stay under 108 bytes) and never an inherited cluster."""
    env = dict(os.environ, RAY_AUTH_MODE="disabled", RAY_TMPDIR=str(ray_tmp))
    env.pop("RAY_ADDRESS", None)
    return env


def server_ready(url: str) -> bool:
    """Whether ``GET http://<url>/v2/health/ready`` answers 200 (False while it cannot)."""
    try:
        with urllib.request.urlopen(f"http://{url}/v2/health/ready", timeout=2) as response:
            return response.status == 200
    except OSError:
        return False
