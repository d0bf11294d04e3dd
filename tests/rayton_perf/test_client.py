"""The streams ``--streaming`` sends on, against a stand-in for tritonclient's aio stream."""

from __future__ import annotations

import asyncio

import pytest
from tritonclient.grpc import InferResult
from tritonclient.grpc import service_pb2 as pb
from tritonclient.utils import InferenceServerException

from rayton_perf.client import InferStream


class PairingServer:
    """``stream_infer`` as tritonclient's aio client offers it: reads requests two at a time
    and answers each pair in reverse order; a request for model ``bad`` gets an error."""

    def __init__(self, end_after: int | None = None) -> None:
        self.headers = None
        self.end_after = end_after  # requests answered before the stream "breaks"

    def stream_infer(self, inputs_iterator, headers=None):
        self.headers = headers

        async def responses():
            pair, answered = [], 0
            async for request in inputs_iterator:
                pair.append(request)
                if len(pair) < 2:
                    continue
                for sent in reversed(pair):
                    if self.end_after is not None and answered == self.end_after:
                        raise ConnectionError("stream broke")
                    answered += 1
                    if sent["model_name"] == "bad":
                        yield None, InferenceServerException("model 'bad' failed")
                    else:
                        yield InferResult(pb.ModelInferResponse(id=sent["request_id"])), None
                pair = []

        return responses()


async def test_responses_find_their_requests_by_id_and_errors_the_oldest():
    server = PairingServer()
    stream = InferStream(server, {"x-token": "t"})
    first = asyncio.ensure_future(stream.infer("m", ["in"]))
    second = asyncio.ensure_future(stream.infer("m", ["in"]))
    results = await asyncio.gather(first, second)  # answered second, then first
    assert [r.get_response().id for r in results] == ["0", "1"]
    assert server.headers == {"x-token": "t"}
    bad = asyncio.ensure_future(stream.infer("bad", ["in"]))
    good = asyncio.ensure_future(stream.infer("m", ["in"]))
    # the error comes first and carries no id: it answers the oldest request waiting
    with pytest.raises(InferenceServerException, match="model 'bad' failed"):
        await bad
    assert (await good).get_response().id == "3"
    await stream.close()


async def test_a_stream_that_breaks_fails_what_waits_and_what_comes_after():
    stream = InferStream(PairingServer(end_after=0))
    waiting = [asyncio.ensure_future(stream.infer("m", ["in"])) for _ in range(2)]
    for request in waiting:
        with pytest.raises(ConnectionError, match="stream broke"):
            await request
    with pytest.raises(ConnectionError):
        await stream.infer("m", ["in"])
    await stream.close()
