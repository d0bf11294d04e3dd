"""Where a replica runs each request of a sequence model: here, or forwarded to the replica
the directory names; a forwarded request that missed its replica fails as lost."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from deployments.core.sequence_routing import SequenceRouting, sequence_name
from repo_adapter.errors import InferenceServerError, StatusCode
from repo_adapter.inference_types import InferRequest, InferResponse, InferTensor
from repo_adapter.response_stream import StreamedResponse


class DictDirectory:
    """The directory's semantics over one dict, shared by the replicas of a test."""

    def __init__(self) -> None:
        self.owners: dict[str, str] = {}

    async def claim(self, sequence: str, replica: str) -> str | None:
        previous, self.owners[sequence] = self.owners.get(sequence), replica
        return previous

    async def owner(self, sequence: str) -> str | None:
        return self.owners.get(sequence)

    def release(self, sequence: str, replica: str) -> None:
        if self.owners.get(sequence) == replica:
            del self.owners[sequence]


class Cluster:
    """Replicas named r0, r1, ... forwarding to each other in process."""

    def __init__(self, count: int, idle_s: float = 60.0) -> None:
        self.directory = DictDirectory()
        self.ran: list[tuple[str, object]] = []  # (replica, sequence id) per request run
        self.gone: set[str] = set()
        self.replicas = {
            f"r{i}": SequenceRouting("m", f"r{i}", self.directory, self, idle_s)
            for i in range(count)
        }

    def here(self, replica: str):
        async def run(request: InferRequest) -> InferResponse:
            self.ran.append((replica, request.parameters.get("sequence_id")))
            return InferResponse("m", "1", [InferTensor("OUT", "INT32", np.zeros(1, np.int32))])

        return run

    async def infer(self, replica: str, request: InferRequest) -> InferResponse:
        return await self.replicas[replica].infer(request, self.here(replica))

    async def forward(self, replica: str, request: InferRequest) -> InferResponse:
        reached = (
            replica
            if replica not in self.gone
            else next(r for r in self.replicas if r not in self.gone)
        )
        routing = self.replicas[reached]
        return await routing.infer_forwarded(request, replica, self.here(reached))

    async def forward_stream(self, replica: str, request: InferRequest):
        yield StreamedResponse(await self.forward(replica, request), True)

    def drop(self, replica: str, sequence: str) -> None:
        if replica not in self.gone:
            self.replicas[replica].drop(sequence, replica)


def request(sequence_id: object, start: bool = False, end: bool = False) -> InferRequest:
    parameters = {"sequence_id": sequence_id, "sequence_start": start, "sequence_end": end}
    return InferRequest("m", inputs=[], parameters=parameters)


def test_names_keep_integer_and_string_ids_apart_and_ignore_missing_ones():
    assert sequence_name(request(7)) == "i:7"
    assert sequence_name(request("7")) == "s:7"
    assert sequence_name(request(0)) is None and sequence_name(request("")) is None
    assert sequence_name(request(True)) is None
    assert sequence_name(InferRequest("m", inputs=[])) is None


async def test_a_sequence_started_on_one_replica_runs_there_wherever_it_enters():
    cluster = Cluster(2)
    await cluster.infer("r0", request(7, start=True))
    await cluster.infer("r1", request(7))
    await cluster.infer("r0", request(7))
    await cluster.infer("r1", request(7, end=True))
    assert cluster.ran == [("r0", 7)] * 4
    assert cluster.directory.owners == {}  # the END released it


async def test_a_request_of_an_unknown_sequence_runs_here_where_the_batcher_refuses_it():
    cluster = Cluster(2)
    await cluster.infer("r1", request(99))
    assert cluster.ran == [("r1", 99)]


async def test_a_start_moves_a_running_sequence_to_the_replica_it_entered():
    cluster = Cluster(2)
    await cluster.infer("r0", request("a", start=True))
    await cluster.infer("r1", request("a", start=True))
    await cluster.infer("r0", request("a"))
    assert [replica for replica, _ in cluster.ran] == ["r0", "r1", "r1"]


async def test_a_lost_replica_fails_its_own_sequences_and_new_ones_run_on_the_others():
    cluster = Cluster(2)
    await cluster.infer("r0", request(1, start=True))
    await cluster.infer("r1", request(2, start=True))
    cluster.gone.add("r0")
    with pytest.raises(InferenceServerError) as lost:
        await cluster.infer("r1", request(1))
    assert lost.value.code == StatusCode.UNAVAILABLE
    assert "sequence 1 of model 'm' was lost" in str(lost.value)
    await cluster.infer("r1", request(2))
    await cluster.infer("r1", request(3, start=True))
    assert cluster.ran[-2:] == [("r1", 2), ("r1", 3)]


async def test_sequences_idle_longer_than_the_model_allows_are_released():
    cluster = Cluster(1, idle_s=0.05)
    await cluster.infer("r0", request(5, start=True))
    assert cluster.directory.owners == {"i:5": "r0"}
    await asyncio.sleep(0.1)
    await cluster.infer("r0", request(6, start=True))
    await asyncio.sleep(0)  # the release is not awaited
    assert cluster.directory.owners == {"i:6": "r0"}


async def test_a_streamed_request_is_forwarded_too():
    cluster = Cluster(2)
    await cluster.infer("r0", request(8, start=True))
    items = [item async for item in cluster.replicas["r1"].infer_stream(request(8), lambda r: None)]
    assert len(items) == 1 and items[0].final
    assert cluster.ran[-1] == ("r0", 8)
