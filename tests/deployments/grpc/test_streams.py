"""A stream's replies: requests answered concurrently, replies in request order (no Ray)."""

from __future__ import annotations

import asyncio

import pytest
from tritonclient.grpc import service_pb2 as pb

from deployments.grpc.streams import answer_or_error, stream_replies
from repo_adapter.errors import InferenceServerError, StatusCode


async def requests_of(*items):
    for item in items:
        yield item


async def test_replies_come_in_request_order_while_requests_run_concurrently():
    started: list[str] = []

    async def answer(name: str) -> bytes:
        started.append(name)
        await asyncio.sleep(0.05 if name == "slow" else 0)
        return name.encode()

    replies = [reply async for reply in stream_replies(requests_of("slow", "a", "b"), answer)]
    assert replies == [b"slow", b"a", b"b"]
    assert started == ["slow", "a", "b"]  # "a" and "b" did not wait for "slow" to finish


async def test_a_failed_request_is_an_error_reply_and_the_stream_goes_on():
    async def answer(name: str) -> bytes:
        async def reply() -> bytes:
            if name == "bad":
                raise InferenceServerError("unknown model: 'bad'", StatusCode.NOT_FOUND)
            return pb.ModelStreamInferResponse().SerializeToString()

        return await answer_or_error(reply(), request_id=name)

    replies = [
        pb.ModelStreamInferResponse.FromString(reply)
        async for reply in stream_replies(requests_of("good", "bad", "good"), answer)
    ]
    assert [reply.error_message for reply in replies] == ["", "unknown model: 'bad'", ""]
    assert replies[1].infer_response.id == "bad"


async def test_a_read_that_fails_ends_the_stream_after_the_earlier_replies():
    async def broken():
        yield "a"
        raise ConnectionError("client went away")

    async def answer(name: str) -> bytes:
        return name.encode()

    replies = []
    with pytest.raises(ConnectionError):
        async for reply in stream_replies(broken(), answer):
            replies.append(reply)
    assert replies == [b"a"]
