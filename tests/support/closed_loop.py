"""A closed-loop load of real ``tritonclient`` HTTP clients, each in a thread: what the
model-management tests and benchmarks send (one FP32 value in, one integer output read)."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import tritonclient.http as httpclient


@dataclass
class LoadOutcome:
    """What came back: how often each value of the output was answered, the errors, and each
    answered request's latency in milliseconds."""

    answers: Counter = field(default_factory=Counter)
    errors: list[str] = field(default_factory=list)
    latencies_ms: list[float] = field(default_factory=list)

    @property
    def answered(self) -> int:
        return sum(self.answers.values())

    def percentile_ms(self, q: float) -> float:
        ordered = sorted(self.latencies_ms)
        return ordered[min(len(ordered) - 1, int(q / 100 * len(ordered)))] if ordered else 0.0


def closed_loop(
    url: str,
    model: str,
    output: str,
    clients: int = 8,
    total: int = 0,
    seconds: float = 0.0,
    value: float = 1.0,
    until: Callable[[LoadOutcome], bool] | None = None,
) -> LoadOutcome:
    """``clients`` threads send ``[[value]]`` as ``IN`` to ``model`` at ``url`` (host:port or
    http://host:port), one request at a time each, until ``total`` requests were sent (or,
    with ``total`` 0, for ``seconds``); each answer counted by ``output``'s first value.

    ``until``, asked before each request, ends the load early once it holds: what a test
    waits for on a busy machine, with ``seconds`` as the bound."""
    outcome = LoadOutcome()
    lock = threading.Lock()
    deadline = time.monotonic() + seconds
    sent = 0

    def more() -> bool:
        nonlocal sent
        with lock:
            if until is not None and until(outcome):
                return False
            sent += 1
            return sent <= total if total else time.monotonic() < deadline

    def client_loop() -> None:
        client = httpclient.InferenceServerClient(url.removeprefix("http://"))
        tensor = httpclient.InferInput("IN", [1, 1], "FP32")
        tensor.set_data_from_numpy(np.full((1, 1), value, np.float32))
        try:
            while more():
                start = time.perf_counter()
                try:
                    answer = int(client.infer(model, [tensor]).as_numpy(output).flat[0])
                except Exception as err:  # recorded: callers assert there are none
                    with lock:
                        outcome.errors.append(str(err))
                    continue
                with lock:
                    outcome.answers[answer] += 1
                    outcome.latencies_ms.append((time.perf_counter() - start) * 1e3)
        finally:
            client.close()

    threads = [threading.Thread(target=client_loop) for _ in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=seconds + 900)
    return outcome
