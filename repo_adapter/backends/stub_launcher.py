"""Starting python model stubs: forked by this process's stub zygote, watched like children.

:class:`StubLauncher` keeps one zygote (:mod:`repo_adapter.python_backend.stub_zygote`) per
process, started at the first stub and again after it ends, and asks it for each stub.
:class:`LaunchedStub` is what the stub's backend holds instead of a ``subprocess.Popen``:
its pid, ``poll``, ``wait`` and ``kill``, with exit statuses the zygote reports. Should the
zygote end, its stubs are stopped with it, and their backends restart them as after a crash.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import itertools
import logging
import os
import signal
import socket
import subprocess
import sys
import threading

from repo_adapter.python_backend.stub_zygote import (
    SpawnStub,
    StubExited,
    StubSpawned,
    receive,
    send,
)

logger = logging.getLogger(__name__)

ZYGOTE_MODULE = "repo_adapter.python_backend.stub_zygote"
SPAWN_TIMEOUT_S = 120.0  # the zygote's own start (its imports) on a busy machine included


class StubLaunchError(OSError):
    """The zygote could not start, or could not fork the stub."""


class LaunchedStub:
    """A stub process forked by the zygote: the part of ``subprocess.Popen`` a backend uses."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self._exited = threading.Event()

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """The exit status (``-N``: killed by signal N).

        Raises:
            subprocess.TimeoutExpired: the stub still runs after ``timeout`` seconds.
        """
        if not self._exited.wait(timeout):
            raise subprocess.TimeoutExpired(f"stub {self.pid}", timeout or 0.0)
        assert self.returncode is not None
        return self.returncode

    def kill(self) -> None:
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)

    def _ended(self, returncode: int) -> None:
        self.returncode = returncode
        self._exited.set()


class _Zygote:
    """One running zygote: its process, its socket and the thread reading its reports."""

    def __init__(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-m", ZYGOTE_MODULE, str(theirs.fileno())],
                pass_fds=(theirs.fileno(),),
                env={**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)},
                stdin=subprocess.DEVNULL,
            )
        except OSError:
            ours.close()
            raise
        finally:
            theirs.close()
        self.socket = ours
        self.lock = threading.Lock()
        self.spawning: dict[int, concurrent.futures.Future[LaunchedStub]] = {}
        self.stubs: dict[int, LaunchedStub] = {}
        self.alive = True
        threading.Thread(target=self._read, name="stub-zygote", daemon=True).start()

    def ask(self, request: SpawnStub, fds: tuple[int, ...]) -> concurrent.futures.Future:
        spawned: concurrent.futures.Future[LaunchedStub] = concurrent.futures.Future()
        with self.lock:
            if not self.alive:
                raise StubLaunchError("the stub zygote has ended")
            self.spawning[request.request_id] = spawned
        try:
            send(self.socket, request, fds)
        except OSError:  # the zygote went just now: its reader fails the rest
            with self.lock:
                self.spawning.pop(request.request_id, None)
            raise
        return spawned

    def _read(self) -> None:
        try:
            while (received := receive(self.socket)) is not None:
                message, _fds = received
                if isinstance(message, StubSpawned):
                    self._spawned(message)
                elif isinstance(message, StubExited):
                    with self.lock:
                        stub = self.stubs.pop(message.pid, None)
                    if stub is not None:
                        stub._ended(message.returncode)
        except OSError:
            pass
        self._lost()

    def _spawned(self, message: StubSpawned) -> None:
        with self.lock:
            spawned = self.spawning.pop(message.request_id)
            if message.pid:
                stub = self.stubs[message.pid] = LaunchedStub(message.pid)
        if message.pid:
            spawned.set_result(stub)
        else:
            error = StubLaunchError(f"the stub zygote could not fork: {message.error}")
            spawned.set_exception(error)

    def _lost(self) -> None:
        """The zygote ended: nothing reports its stubs' exits now, so they end too."""
        with self.lock:
            self.alive = False
            spawning, self.spawning = list(self.spawning.values()), {}
            stubs, self.stubs = list(self.stubs.values()), {}
        code = self.process.wait()
        if stubs or spawning:
            logger.warning(
                "the python stub zygote (pid %d) ended with code %d; stopping its %d stubs",
                self.process.pid,
                code,
                len(stubs),
            )
        for spawned in spawning:
            spawned.set_exception(StubLaunchError(f"the stub zygote ended with code {code}"))
        for stub in stubs:
            stub.kill()
            stub._ended(-signal.SIGKILL)
        self.socket.close()


class StubLauncher:
    """Starts stub processes through this process's zygote."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._zygote: _Zygote | None = None
        self._ids = itertools.count(1)

    def spawn(self, fds: tuple[int, ...]) -> LaunchedStub:
        """A stub running ``stub_main`` on ``fds`` (its channels' and arenas' descriptors),
        in this process's environment, import path and working directory as they are now.

        Raises:
            StubLaunchError: the zygote could not be started or could not fork.
        """
        request = SpawnStub(
            next(self._ids),
            dict(os.environ),
            [p for p in sys.path if p],
            os.getcwd(),
        )
        with self._lock:
            if self._zygote is None or not self._zygote.alive:
                self._zygote = _Zygote()
            zygote = self._zygote
        spawned = zygote.ask(request, fds)
        try:
            return spawned.result(timeout=SPAWN_TIMEOUT_S)
        except concurrent.futures.TimeoutError:
            raise StubLaunchError(
                f"the stub zygote did not fork in {SPAWN_TIMEOUT_S:.0f} s"
            ) from None

    def zygote_pid(self) -> int | None:
        """The running zygote's pid, if one runs."""
        zygote = self._zygote
        return zygote.process.pid if zygote is not None and zygote.alive else None


_launcher = StubLauncher()


def launcher() -> StubLauncher:
    """This process's launcher."""
    return _launcher
