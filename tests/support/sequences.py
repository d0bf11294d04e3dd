"""A stateful python model for tests of sequences across replicas, and the clients that
send its sequences (HTTP, gRPC and a gRPC stream, mixed within a sequence)."""

from __future__ import annotations

import os
import queue
import signal
import threading
import time
from collections.abc import Callable

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from cluster.grpc_routing import NO_REPLICA_ANSWERED
from tests.support.crashing_models import replica_pids

MODEL = "sequence_pair"
WAIT_S = 60.0
CONFIG = """
name: "sequence_pair"
backend: "python"
max_batch_size: 4
sequence_batching {
  max_sequence_idle_microseconds: 120000000
  control_input [
    { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] }
  ]
  oldest { max_candidate_sequences: 8 max_queue_delay_microseconds: 2000 }
}
instance_group [ { kind: KIND_CPU count: 2 } ]
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [
  { name: "SUM" data_type: TYPE_INT32 dims: [ 1 ] },
  { name: "HOLDER" data_type: TYPE_INT32 dims: [ 1 ] }
]
"""
# The running sum of each sequence in this instance's memory, and the pid of the replica
# that started the instance's stub process (the parent of the stub's zygote): a request run
# where its sequence is not held would restart the sum at its value.
MODEL_PY = """
import os

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.sums = {}
        with open(f"/proc/{os.getppid()}/stat") as zygote:
            self.replica = int(zygote.read().rsplit(")", 1)[1].split()[1])

    def execute(self, requests):
        responses = []
        for request in requests:
            value = int(pb_utils.get_input_tensor_by_name(request, "IN").as_numpy().reshape(-1)[0])
            start = pb_utils.get_input_tensor_by_name(request, "START").as_numpy().reshape(-1)[0]
            key = request.correlation_id()
            self.sums[key] = (0 if start else self.sums.get(key, 0)) + value
            responses.append(
                pb_utils.InferenceResponse(
                    [
                        pb_utils.Tensor("SUM", np.array([[self.sums[key]]], np.int32)),
                        pb_utils.Tensor("HOLDER", np.array([[self.replica]], np.int32)),
                    ]
                )
            )
        return responses
"""


class BrokenConnectionError(Exception):
    """A request whose connection broke before an answer (not an answer from the server)."""


class SequenceClient:
    """One thread's clients: HTTP, gRPC, and a gRPC stream; a request goes by the one named."""

    def __init__(self, http_url: str, grpc_url: str) -> None:
        self.http = httpclient.InferenceServerClient(http_url, connection_timeout=WAIT_S)
        self.grpc = grpcclient.InferenceServerClient(grpc_url)
        self.results: queue.Queue = queue.Queue()
        self.grpc.start_stream(callback=self._received)

    def close(self) -> None:
        self.grpc.stop_stream()
        self.grpc.close()
        self.http.close()

    def send(self, how: str, sequence: int | str, start: bool, end: bool) -> tuple[int, int]:
        """(SUM, HOLDER) of one request adding 1 to ``sequence``; BrokenConnectionError where
        no replica answered it (HTTP/2's reset, HAProxy's answer for a replica gone)."""
        try:
            return self._send(how, sequence, start, end)
        except InferenceServerException as err:
            if "Stream removed" in str(err) or NO_REPLICA_ANSWERED in str(err):
                raise BrokenConnectionError(f"{how}: {err}") from None
            raise

    def _send(self, how: str, sequence: int | str, start: bool, end: bool) -> tuple[int, int]:
        module = httpclient if how == "http" else grpcclient
        tensor = module.InferInput("IN", [1, 1], "INT32")
        tensor.set_data_from_numpy(np.array([[1]], np.int32))
        flags = {"sequence_id": sequence, "sequence_start": start, "sequence_end": end}
        if how == "http":
            result = self.http.infer(MODEL, [tensor], **flags)
        elif how == "grpc":
            result = self.grpc.infer(MODEL, [tensor], client_timeout=WAIT_S, **flags)
        else:
            try:
                self.grpc.async_stream_infer(MODEL, [tensor], **flags)
            except InferenceServerException:  # it broke while idle: send on a new one
                self._restart_stream()
                self.grpc.async_stream_infer(MODEL, [tensor], **flags)
            result, error = self.results.get(timeout=WAIT_S)
            if error is not None and error.status() is not None:
                # The stream itself broke (a request's error on a stream carries no code):
                # its server end is gone. Open another, as a client must.
                self._restart_stream()
                raise BrokenConnectionError(f"stream: {error}")
            if error is not None:
                raise error
        return int(result.as_numpy("SUM")[0, 0]), int(result.as_numpy("HOLDER")[0, 0])

    def _restart_stream(self) -> None:
        self.grpc.stop_stream()
        self.results = queue.Queue()  # without the broken stream's error
        self.grpc.start_stream(callback=self._received)

    def _received(self, result: object, error: InferenceServerException | None) -> None:
        self.results.put((result, error))


TRANSPORTS = ("http", "grpc", "stream")


def run_sequences(
    urls: tuple[str, str],
    sequences: list[int | str],
    steps: int,
    pause_at: int | None = None,
    paused: Callable[[], None] | None = None,
) -> dict[int | str, list[object]]:
    """Each sequence in a thread of its own, adding 1 per request over a transport that
    changes every request; per sequence, each request's (SUM, HOLDER) or its error. With
    ``pause_at``, every thread waits after that many requests until ``paused()`` returned."""
    outcomes: dict[int | str, list[object]] = {s: [] for s in sequences}
    barrier = threading.Barrier(len(sequences) + 1) if pause_at is not None else None

    def one(index: int, sequence: int | str) -> None:
        client = SequenceClient(*urls)
        try:
            for step in range(steps):
                if barrier is not None and step == pause_at:
                    barrier.wait(WAIT_S)  # all here
                    barrier.wait(WAIT_S)  # the main thread did its part
                how = TRANSPORTS[(index + step) % len(TRANSPORTS)]
                try:
                    outcomes[sequence].append(
                        client.send(how, sequence, start=step == 0, end=step == steps - 1)
                    )
                except (InferenceServerException, BrokenConnectionError) as err:
                    outcomes[sequence].append(err)
                except Exception as err:  # HTTP's connection closed without an answer
                    broken = BrokenConnectionError(f"{how}: {type(err).__name__}: {err}")
                    outcomes[sequence].append(broken)
        finally:
            client.close()

    threads = [
        threading.Thread(target=one, args=(index, sequence))
        for index, sequence in enumerate(sequences)
    ]
    for thread in threads:
        thread.start()
    if barrier is not None:
        barrier.wait(WAIT_S)
        assert paused is not None
        paused()
        barrier.wait(WAIT_S)
    for thread in threads:
        thread.join(WAIT_S * 3)
    return outcomes


def sequence_ids(count: int, offset: int) -> list[int | str]:
    """Integer and string correlation ids, alternately."""
    return [offset + i if i % 2 else f"seq-{offset + i}" for i in range(count)]


def write_sequence_model(root, replicas: int, per_node: int | None = None) -> None:
    """``sequence_pair`` under ``root`` with ``replicas`` instances (one replica each), at
    most ``per_node`` on one node."""
    (root / MODEL / "1").mkdir(parents=True)
    config = CONFIG.replace("count: 2", f"count: {replicas}")
    if per_node is not None:
        parameter = f'key: "MAX_REPLICAS_PER_NODE" value: {{ string_value: "{per_node}" }}'
        config += f"parameters {{ {parameter} }}\n"
    (root / MODEL / "config.pbtxt").write_text(config)
    (root / MODEL / "1" / "model.py").write_text(MODEL_PY)


def sums(results: list[object]) -> list[object]:
    return [r[0] if isinstance(r, tuple) else r for r in results]


def check_mixed_sequences(urls: tuple[str, str], replicas: int) -> None:
    """32 sequences of 50 requests over mixed transports: every sum right, each sequence on
    one replica, every replica holding some."""
    outcomes = run_sequences(urls, sequence_ids(32, 1000), 50)
    wrong = {s: r for s, r in outcomes.items() if sums(r) != list(range(1, 51))}
    assert not wrong, list(wrong.items())[:2]
    holders = {sequence: {r[1] for r in results} for sequence, results in outcomes.items()}
    assert all(len(h) == 1 for h in holders.values()), holders  # one replica per sequence
    # several replicas hold sequences (a replica just started may not take STARTs yet)
    used = set().union(*holders.values())
    assert 1 < len(used) <= replicas, used


def wait_until_dead(pid: int, timeout_s: float = 10.0) -> None:
    """Wait until process ``pid`` is gone or a zombie: its sockets are closed."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as stat:
                if stat.read().rsplit(")", 1)[1].split()[0] in ("Z", "X"):
                    return
        except FileNotFoundError:
            return
        time.sleep(0.01)
    raise AssertionError(f"process {pid} still runs {timeout_s} s after SIGKILL")


def check_a_replica_kill(
    urls: tuple[str, str], replicas: int, interruptions: bool = False
) -> tuple[int, int, int]:
    """32 sequences of 50 requests; after 20 each, one replica is killed: its sequences fail
    with UNAVAILABLE from then on, the others run to their end, and 8 sequences started
    afterwards succeed.

    ``interruptions``: whether a surviving sequence's request may meet a broken connection
    instead of an answer (behind HAProxy, a gRPC stream or an idle HTTP connection that went
    through the killed replica), provided it did not run: the sequence's next answers
    continue its sum. Returns (sequences lost, sequences kept, requests interrupted).
    """
    http_url, _ = urls
    killed: list[int] = []

    def kill_one_replica() -> None:
        pids = replica_pids(http_url, MODEL)
        assert len(pids) == replicas, pids
        killed.append(pids[0])
        os.kill(pids[0], signal.SIGKILL)
        wait_until_dead(pids[0])

    sequences = sequence_ids(32, 2000)
    outcomes = run_sequences(urls, sequences, 50, pause_at=20, paused=kill_one_replica)
    holder: dict[int | str, int] = {}
    for sequence, results in outcomes.items():
        holder[sequence] = results[0][1] if isinstance(results[0], tuple) else -1
        expected = [(step + 1, holder[sequence]) for step in range(20)]
        assert results[:20] == expected, (sequence, results[:20])
    lost = [s for s in sequences if holder[s] == killed[0]]
    kept = [s for s in sequences if holder[s] != killed[0]]
    assert lost and kept, holder
    interrupted = 0
    for sequence in kept:  # the surviving replicas' sequences run to their end
        later = outcomes[sequence][20:]
        assert len(later) == 30, (sequence, later)
        answers = [r for r in later if not isinstance(r, BrokenConnectionError)]
        interrupted += len(later) - len(answers)
        expected = [(21 + step, holder[sequence]) for step in range(len(answers))]
        assert answers == expected, (sequence, [str(r) for r in later])
    assert interruptions or not interrupted, interrupted
    for sequence in lost:  # the next answer says it was lost: it is not restarted silently
        later = outcomes[sequence][20:]
        answers = [r for r in later if not isinstance(r, BrokenConnectionError)]
        assert all(isinstance(r, InferenceServerException) for r in answers), (sequence, later)
        # A known defect: behind Serve's proxy a lost sequence's request can, rarely, time out
        # instead of answering UNAVAILABLE (1 request of one sequence in 1 of 4 CI runs). It
        # still fails and never runs; more than one such request fails the test.
        timed_out = [
            r for r in later if isinstance(r, BrokenConnectionError) and "timed out" in str(r)
        ]
        assert interruptions or len(answers) + len(timed_out) == len(later), (sequence, later)
        assert len(timed_out) <= 1, (sequence, later)
        first = answers[0]
        assert "was lost" in str(first) or "stopped before answering" in str(first), first
        # (a stream's error is a message alone: Triton's stream responses carry no code)
        assert str(first.status()) in ("503", "StatusCode.UNAVAILABLE", "None"), first
    after = run_sequences(urls, sequence_ids(8, 3000), 10)
    assert all(sums(results) == list(range(1, 11)) for results in after.values()), after
    return len(lost), len(kept), interrupted
