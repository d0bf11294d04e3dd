"""A stream's replies: requests answered concurrently, replies in request order, a request's
several replies together (no Ray)."""

from __future__ import annotations

import asyncio

import pytest
from tritonclient.grpc import service_pb2 as pb

from deployments.grpc.streams import replies_or_error, stream_replies
from repo_adapter.errors import InferenceServerError, StatusCode


async def requests_of(*items):
    for item in items:
        yield item


async def test_replies_come_in_request_order_while_requests_run_concurrently():
    started: list[str] = []

    async def answer(name: str):
        started.append(name)
        await asyncio.sleep(0.05 if name == "slow" else 0)
        yield name.encode()

    replies = [reply async for reply in stream_replies(requests_of("slow", "a", "b"), answer)]
    assert replies == [b"slow", b"a", b"b"]
    assert started == ["slow", "a", "b"]  # "a" and "b" did not wait for "slow" to finish


async def test_a_failed_request_is_an_error_reply_and_the_stream_goes_on():
    def answer(name: str):
        async def replies():
            if name == "bad":
                raise InferenceServerError("unknown model: 'bad'", StatusCode.NOT_FOUND)
            yield pb.ModelStreamInferResponse().SerializeToString()

        return replies_or_error(replies(), request_id=name)

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

    async def answer(name: str):
        yield name.encode()

    replies = []
    with pytest.raises(ConnectionError):
        async for reply in stream_replies(broken(), answer):
            replies.append(reply)
    assert replies == [b"a"]


async def test_a_requests_several_replies_go_out_together_after_the_earlier_requests():
    produced: list[str] = []

    async def answer(name: str):
        for index in range(3 if name == "many" else 1):
            await asyncio.sleep(0.02 if name == "many" else 0)
            produced.append(f"{name}{index}")
            yield f"{name}{index}".encode()

    replies = [reply async for reply in stream_replies(requests_of("many", "one"), answer)]
    assert replies == [b"many0", b"many1", b"many2", b"one0"]
    assert produced.index("one0") < produced.index("many2")  # "one" ran meanwhile


async def test_a_request_that_fails_after_some_replies_ends_with_its_error():
    async def replies():
        yield b"first"
        raise InferenceServerError("model went away", StatusCode.UNAVAILABLE)

    got = [reply async for reply in replies_or_error(replies(), request_id="r")]
    assert got[0] == b"first"
    assert pb.ModelStreamInferResponse.FromString(got[1]).error_message == "model went away"


async def test_a_sequences_requests_take_turns_and_others_do_not_wait():
    from deployments.grpc.streams import SequenceTurns

    turns, log = SequenceTurns(), []

    async def replies(name: str, delay: float):
        log.append(f"{name} start")
        await asyncio.sleep(delay)
        log.append(f"{name} end")
        yield name.encode()

    async def drain(key, name, delay):
        return [r async for r in turns.in_turn(key, replies(name, delay))]

    await asyncio.gather(
        drain(("m", 7), "first", 0.05),
        drain(("m", 7), "second", 0),
        drain(("m", 0), "unsequenced", 0),
    )
    assert log.index("first end") < log.index("second start")
    assert log.index("unsequenced end") < log.index("first end")
