"""A closed-loop load spread over several client processes, measured over one window.

One Python client process tops out at a rate the reference Triton can exceed on a few cores;
past it the load generator, not the server, sets the rate. Here each process runs
:meth:`rayton_perf.runner.Profiler.sustained_load` with its share of the concurrency, and the
parent marks the window's start and end in all of them at once, reading each one's finished
requests and its own CPU time at both marks. The processes are spawned, so they import the
caller's main module: a script using this starts its work under ``if __name__ == "__main__"``.

    with ClientProcesses(config, concurrency=32, processes=2) as clients:
        time.sleep(warmup_s)
        start = clients.mark()
        time.sleep(window_s)
        window = clients.mark() - start  # a ClientWindow: seconds, requests, cpu_s
"""

from __future__ import annotations

import asyncio
import dataclasses
import multiprocessing
import time
from multiprocessing.connection import Connection

from rayton_perf.config import PerfConfig, PerfError
from rayton_perf.runner import Profiler

# Longest wait for a client process to open its connection and start its load, or to answer.
READY_TIMEOUT_S = 60.0
_MARK = "mark"
_STOP = "stop"


@dataclasses.dataclass(frozen=True)
class ClientWindow:
    """What all client processes did between two marks."""

    seconds: float
    requests: int
    cpu_s: float


@dataclasses.dataclass(frozen=True)
class ClientMark:
    """All client processes at one instant: requests finished so far, CPU seconds used."""

    at: float  # time.monotonic() in the parent
    requests: int
    cpu_s: float

    def __sub__(self, earlier: ClientMark) -> ClientWindow:
        return ClientWindow(
            self.at - earlier.at, self.requests - earlier.requests, self.cpu_s - earlier.cpu_s
        )


def concurrency_shares(concurrency: int, processes: int) -> list[int]:
    """``concurrency`` split as evenly as it goes over at most ``processes`` processes."""
    if concurrency < 1 or processes < 1:
        raise ValueError("concurrency and processes must be >= 1")
    used = min(concurrency, processes)
    base, extra = divmod(concurrency, used)
    return [base + (1 if index < extra else 0) for index in range(used)]


class ClientProcesses:
    """Client processes running one load level until the block ends.

    Args:
        config: the model, server and request settings every process uses.
        concurrency: requests in flight over all processes.
        processes: how many processes share them.
    """

    def __init__(self, config: PerfConfig, concurrency: int, processes: int) -> None:
        self._config = config
        self._shares = concurrency_shares(concurrency, processes)
        self._context = multiprocessing.get_context("spawn")  # no forked event loop or sockets
        self._children: list[tuple[multiprocessing.process.BaseProcess, Connection]] = []

    def __enter__(self) -> ClientProcesses:
        try:
            for share in self._shares:
                parent_end, child_end = self._context.Pipe()
                process = self._context.Process(
                    target=_client_main, args=(self._config, share, child_end), daemon=True
                )
                process.start()
                child_end.close()
                self._children.append((process, parent_end))
            for _, pipe in self._children:
                _answer(pipe)  # each one's load is running
        except BaseException:
            self._end()
            raise
        return self

    def __exit__(self, *exc_info: object) -> None:
        errors = self._end()
        if errors and exc_info[0] is None:
            raise PerfError("; ".join(errors))

    def mark(self) -> ClientMark:
        """Every process's finished requests and CPU time, now."""
        at = time.monotonic()
        for _, pipe in self._children:
            pipe.send(_MARK)
        answers = [_answer(pipe) for _, pipe in self._children]
        return ClientMark(at, sum(a[0] for a in answers), sum(a[1] for a in answers))

    def _end(self) -> list[str]:
        errors = []
        for process, pipe in self._children:
            try:
                pipe.send(_STOP)
                _answer(pipe)
            except (OSError, EOFError, PerfError) as err:
                errors.append(str(err))
            process.join(timeout=READY_TIMEOUT_S)
            if process.is_alive():
                process.kill()
                process.join()
            pipe.close()
        self._children = []
        return errors


def _answer(pipe: Connection) -> tuple[int, float]:
    if not pipe.poll(READY_TIMEOUT_S):
        raise PerfError("a client process did not answer")
    kind, value = pipe.recv()
    if kind == "error":
        raise PerfError(value)
    return value


def _client_main(config: PerfConfig, concurrency: int, pipe: Connection) -> None:
    try:
        asyncio.run(_drive(config, concurrency, pipe))
    except Exception as err:
        pipe.send(("error", f"{type(err).__name__}: {err}"))


async def _drive(config: PerfConfig, concurrency: int, pipe: Connection) -> None:
    loop = asyncio.get_running_loop()
    async with Profiler(config) as profiler, profiler.sustained_load(concurrency) as load:
        pipe.send(("ok", (0, 0.0)))
        while True:
            # The pipe is read on a thread so the load keeps running meanwhile.
            command = await loop.run_in_executor(None, pipe.recv)
            if load.failed:
                break
            if command == _STOP:
                break
            load.buffer.swap()  # only the count is read: the per-request records are dropped
            pipe.send(("ok", (load.buffer.completed, time.process_time())))
    pipe.send(("ok", (load.buffer.completed, time.process_time())))
