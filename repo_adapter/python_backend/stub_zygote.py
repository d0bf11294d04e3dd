"""The stub zygote: a process that has imported what a stub needs and forks the stubs.

``python -m repo_adapter.python_backend.stub_zygote SOCKET_FD``. A python interpreter that
imports the stub's modules (numpy, the protobuf schema, ``triton_python_backend_utils``)
costs most of a CPU-second; a fork of one that already has costs milliseconds. Model
loads, restarts after a crash and on-demand loads under a memory budget start stubs while
other models serve, so the host (:mod:`repo_adapter.backends.stub_launcher`) keeps one
zygote per process and asks it for each stub.

The zygote's socket carries :class:`SpawnStub` (with the stub's four descriptors attached)
one way, :class:`StubSpawned` and :class:`StubExited` the other. A forked stub takes the
host's environment, import path and working directory of the moment it was asked for,
then runs :func:`repo_adapter.python_backend.stub_main.main` exactly as a stub started by
its own interpreter would. The zygote reaps its stubs and reports each exit status, and it
exits when its host closes the socket; the stubs exit when the host closes their channels.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import pickle
import selectors
import signal
import socket
import sys
import traceback
from dataclasses import dataclass

# One message per datagram (SOCK_SEQPACKET); an environment and an import path fit easily.
MAX_MESSAGE_BYTES = 1 << 20
STUB_FDS = 4  # batches, control, the two arenas
# A forked stub keeps the zygote's command line; its process name (``ps -o comm``) says
# what it is, as Triton's ``triton_python_backend_stub`` does.
STUB_PROCESS_NAME = b"rayton_stub"
_PR_SET_NAME = 15


@dataclass(frozen=True)
class SpawnStub:
    """Fork a stub for the attached descriptors, in the host's current surroundings."""

    request_id: int
    environment: dict[str, str]
    import_path: list[str]
    working_directory: str


@dataclass(frozen=True)
class StubSpawned:
    """The stub of ``request_id`` runs as ``pid`` (0 with ``error`` when the fork failed)."""

    request_id: int
    pid: int
    error: str = ""


@dataclass(frozen=True)
class StubExited:
    """A stub ended: ``returncode`` as :class:`subprocess.Popen` reports it (``-N``: signal N)."""

    pid: int
    returncode: int


def send(sock: socket.socket, message: object, fds: tuple[int, ...] = ()) -> None:
    socket.send_fds(sock, [pickle.dumps(message)], list(fds))


def receive(sock: socket.socket) -> tuple[object, list[int]] | None:
    """The next message and the descriptors that came with it; None once the peer closed."""
    data, fds, _flags, _address = socket.recv_fds(sock, MAX_MESSAGE_BYTES, STUB_FDS)
    if not data:
        for fd in fds:
            os.close(fd)
        return None
    return pickle.loads(data), fds


def _returncode(status: int) -> int:
    return -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)


def _run_stub(request: SpawnStub, fds: list[int]) -> int:
    """In the forked child: become the stub the host asked for; its exit code."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_NAME, STUB_PROCESS_NAME, 0, 0, 0)
    os.environ.clear()
    os.environ.update(request.environment)
    sys.path[:] = request.import_path
    with contextlib.suppress(OSError):
        os.chdir(request.working_directory)
    if "numpy.random" in sys.modules:  # the zygote's seed would be every stub's
        sys.modules["numpy.random"].seed()
    from repo_adapter.python_backend import stub_main

    sys.argv = [stub_main.__file__, *map(str, fds)]
    try:
        stub_main.main(sys.argv)
        return 0
    except SystemExit as stop:  # sys.exit(): None is success, as for an interpreter
        if stop.code is None:
            return 0
        return stop.code if isinstance(stop.code, int) else 1
    except BaseException:
        traceback.print_exc()
        return 1


def _fork_stub(
    host: socket.socket,
    selector: selectors.BaseSelector,
    wakeup: tuple[int, int],
    request: SpawnStub,
    fds: list[int],
) -> int:
    pid = os.fork()
    if pid:
        return pid
    code = 1
    try:
        signal.set_wakeup_fd(-1)
        selector.close()
        host.close()
        for fd in wakeup:
            os.close(fd)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)  # as a fresh interpreter
        code = _run_stub(request, fds)
        atexit._run_exitfuncs()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def _reap(host: socket.socket) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        send(host, StubExited(pid, _returncode(status)))


def serve(host: socket.socket) -> None:
    """Fork a stub for each request until the host closes the socket."""
    # A Ctrl-C meant for the server reaches its whole process group: the zygote leaves it to
    # the host and the stubs, and ends with the host's socket.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    wakeup = wakeup_read, wakeup_write = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(wakeup_write)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # only to wake the selector
    selector = selectors.DefaultSelector()
    selector.register(host, selectors.EVENT_READ)
    selector.register(wakeup_read, selectors.EVENT_READ)
    while True:
        for key, _events in selector.select():
            if key.fileobj is host:
                received = receive(host)
                if received is None:
                    return
                request, fds = received
                assert isinstance(request, SpawnStub)
                try:
                    pid = _fork_stub(host, selector, wakeup, request, fds)
                except OSError as err:
                    send(host, StubSpawned(request.request_id, 0, str(err)))
                else:
                    send(host, StubSpawned(request.request_id, pid))
                finally:
                    for fd in fds:
                        os.close(fd)
            else:
                with contextlib.suppress(BlockingIOError):
                    while os.read(wakeup_read, 512):
                        pass
        _reap(host)


def main(argv: list[str]) -> None:
    # What every stub imports, once, before the first fork.
    from repo_adapter.python_backend import stub_main  # noqa: F401

    host = socket.socket(fileno=int(argv[1]))
    try:
        serve(host)
    finally:
        host.close()


if __name__ == "__main__":
    # The host's messages name this module's classes, not ``__main__``'s.
    from repo_adapter.python_backend import stub_zygote

    stub_zygote.main(sys.argv)
