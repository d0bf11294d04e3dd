"""A sequence's request forwarded to the holder's own port (behind HAProxy): two replicas on
real loopback ports with rayton's HTTP server, each running its sequences in memory; sums,
streams, errors and a lost holder as the sender sees them."""

from __future__ import annotations

import asyncio
import socket

import numpy as np
import pytest

from deployments.apps.sequence_ports import PortForwarder
from deployments.core.sequence_routing import SequenceRouting
from deployments.http import sequence_calls
from deployments.http.messages import HttpReply, HttpRequest
from deployments.http.server import HttpServer
from repo_adapter.errors import InferenceServerError, StatusCode
from repo_adapter.inference_types import InferRequest, InferResponse, InferTensor
from repo_adapter.response_stream import StreamedResponse
from tests.deployments.core.test_sequence_routing import DictDirectory


class Directory(DictDirectory):
    """The directory with the replicas' addresses, as the directory actor keeps them."""

    def __init__(self) -> None:
        super().__init__()
        self.addresses: dict[str, str] = {}

    async def address(self, replica: str) -> str | None:
        return self.addresses.get(replica)


class Replica:
    """One replica: its routing, its sequences' sums, and rayton's server on its port."""

    def __init__(self, name: str, directory: Directory) -> None:
        self.name = name
        self.forwarder = PortForwarder("m", directory)
        self.routing = SequenceRouting("m", name, directory, self.forwarder, 60.0)
        self.sums: dict[object, int] = {}
        self.fail_with: InferenceServerError | None = None
        self.server = HttpServer(self._handle)
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        directory.addresses[name] = f"127.0.0.1:{self.sock.getsockname()[1]}"
        self.task: asyncio.Task | None = None

    async def _handle(self, request: HttpRequest) -> HttpReply:
        assert request.path.startswith(sequence_calls.PATHS)
        return await sequence_calls.answer(request, self)

    async def here(self, request: InferRequest) -> InferResponse:
        if self.fail_with is not None:
            raise self.fail_with
        sequence = request.parameters["sequence_id"]
        if request.parameters.get("sequence_start"):
            self.sums[sequence] = 0
        self.sums[sequence] += int(request.inputs[0].data[0])
        outputs = [InferTensor("SUM", "INT32", np.array([self.sums[sequence]], np.int32))]
        return InferResponse("m", "1", outputs, parameters={"holder": self.name})

    async def here_stream(self, request: InferRequest):
        for _ in range(3):
            response = await self.here(request)
            yield StreamedResponse(response, final=False)
        yield StreamedResponse(None, final=True)

    # what sequence_calls.answer asks of the holder (the model slot's entries)
    async def infer_forwarded(self, request: InferRequest, sent_to: str) -> InferResponse:
        return await self.routing.infer_forwarded(request, sent_to, self.here)

    def stream_forwarded(self, request: InferRequest, sent_to: str):
        return self.routing.stream_forwarded(request, sent_to, self.here_stream)

    def drop_sequence(self, sequence: str, sent_to: str) -> None:
        self.routing.drop(sequence, sent_to)

    async def infer(self, request: InferRequest) -> InferResponse:
        return await self.routing.infer(request, self.here)

    async def start(self) -> None:
        self.task = asyncio.get_running_loop().create_task(self.server.serve(self.sock))
        await asyncio.sleep(0)

    async def stop(self) -> None:
        self.server.should_exit = True
        if self.task is not None:
            await asyncio.wait_for(self.task, 5)
        await self.forwarder.close()


def add(sequence: object, value: int = 1, start: bool = False, end: bool = False):
    parameters = {"sequence_id": sequence, "sequence_start": start, "sequence_end": end}
    tensor = InferTensor("IN", "INT32", np.array([value], np.int32))
    return InferRequest("m", inputs=[tensor], parameters=parameters)


@pytest.fixture
async def replicas():
    directory = Directory()
    pair = [Replica("r0", directory), Replica("r1", directory)]
    for replica in pair:
        await replica.start()
    yield pair
    for replica in pair:
        await replica.stop()


def total(response: InferResponse) -> int:
    return int(response.outputs[0].data[0])


async def test_requests_entering_another_replica_run_on_the_holder_through_its_port(replicas):
    r0, r1 = replicas
    assert total(await r0.infer(add(7, 5, start=True))) == 5
    reply = await r1.infer(add(7, 2))
    assert total(reply) == 7 and reply.parameters == {"holder": "r0"}
    assert total(await r1.infer(add(7, 3, end=True))) == 10
    assert r0.sums == {7: 10} and r1.sums == {}
    assert reply.outputs[0].datatype == "INT32"


async def test_a_forwarded_stream_keeps_its_responses_and_final_flag(replicas):
    r0, r1 = replicas
    await r0.infer(add("s", 1, start=True))
    request = add("s", 1)
    items = [item async for item in r1.routing.infer_stream(request, r1.here_stream)]
    assert [total(i.result) for i in items[:3]] == [2, 3, 4]
    assert [i.final for i in items] == [False, False, False, True] and items[3].result is None


async def test_the_holders_error_reaches_the_sender_with_its_code(replicas):
    r0, r1 = replicas
    await r0.infer(add(8, start=True))
    r0.fail_with = InferenceServerError("bad input", StatusCode.INVALID_ARG)
    with pytest.raises(InferenceServerError) as caught:
        await r1.infer(add(8))
    assert caught.value.code == StatusCode.INVALID_ARG and caught.value.message == "bad input"


async def test_a_stopped_holder_loses_its_sequences_with_unavailable(replicas):
    r0, r1 = replicas
    await r0.infer(add(9, start=True))
    await r0.stop()
    with pytest.raises(InferenceServerError) as caught:
        await r1.infer(add(9))
    assert caught.value.code == StatusCode.UNAVAILABLE
    assert "sequence 9 of model 'm' was lost" in caught.value.message
    assert total(await r1.infer(add(10, start=True))) == 1  # new sequences run on


async def test_a_port_that_now_answers_for_another_process_loses_the_sequence(replicas):
    r0, r1 = replicas
    await r0.infer(add(11, start=True))

    async def other(request: HttpRequest) -> HttpReply:
        return HttpReply(404, b'{"error": "no route"}')

    host, port = r0.sock.getsockname()
    r0.server.should_exit = True
    await asyncio.wait_for(r0.task, 5)
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    stranger = HttpServer(other)
    task = asyncio.get_running_loop().create_task(stranger.serve(sock))
    try:
        with pytest.raises(InferenceServerError) as caught:
            await r1.infer(add(11))
        assert caught.value.code == StatusCode.UNAVAILABLE
    finally:
        stranger.should_exit = True
        await asyncio.wait_for(task, 5)


async def test_a_call_meant_for_another_replica_is_refused_as_lost(replicas):
    r0, _ = replicas
    await r0.infer(add(12, start=True))
    misdirected = PortForwarder("m", _SamePort(r0))  # replica r9's port is r0's now
    try:
        with pytest.raises(InferenceServerError) as caught:
            await misdirected.forward("r9", add(12))
    finally:
        await misdirected.close()
    assert caught.value.code == StatusCode.UNAVAILABLE and r0.sums[12] == 1


async def test_a_start_elsewhere_drops_the_sequence_from_its_old_holder(replicas):
    r0, r1 = replicas
    await r0.infer(add(13, start=True))
    await r1.infer(add(13, start=True))  # Triton starts it again: on r1 now
    for _ in range(100):
        if "i:13" not in r0.routing._held:
            break
        await asyncio.sleep(0.01)
    assert "i:13" not in r0.routing._held
    assert total(await r0.infer(add(13, 4))) == 5  # forwarded to r1
    assert r1.sums[13] == 5


class _SamePort:
    """Addresses that give every replica the port of ``replica``."""

    def __init__(self, replica: Replica) -> None:
        self._replica = replica

    async def address(self, replica: str) -> str | None:
        return f"127.0.0.1:{self._replica.sock.getsockname()[1]}"
