"""A decoupled request's response stream: sends from any thread, read in order on the loop."""

from __future__ import annotations

import asyncio
import threading

from repo_adapter.errors import InferenceServerError, StatusCode
from repo_adapter.inference_types import InferResponse
from repo_adapter.response_stream import ResponseStream


def response(index: int) -> InferResponse:
    return InferResponse("m", "1", [], id=str(index))


async def test_responses_sent_from_threads_arrive_in_order_until_the_final_one():
    stream = ResponseStream()

    def send() -> None:
        for index in range(1000):
            stream.send(response(index), False)
        stream.send(None, True)
        stream.send(response(1000), False)  # after the final one: dropped

    threading.Thread(target=send).start()
    items = [item async for item in stream]
    assert [item.result.id for item in items[:-1]] == [str(i) for i in range(1000)]
    assert (items[-1].result, items[-1].final) == (None, True)
    assert stream.closed


async def test_fail_ends_the_stream_unless_its_final_response_came():
    stream = ResponseStream()
    stream.send(response(0), False)
    stream.fail(InferenceServerError("gone", StatusCode.UNAVAILABLE))
    stream.fail(InferenceServerError("twice", StatusCode.INTERNAL))
    items = [item async for item in stream]
    assert [item.final for item in items] == [False, True]
    assert items[1].result.message == "gone"


async def test_a_cancelled_stream_drops_what_comes_and_says_so():
    stream = ResponseStream()
    stream.cancel()
    stream.send(response(0), True)
    assert stream.cancelled and stream.closed
    reader = asyncio.ensure_future(anext(aiter(stream)))
    await asyncio.sleep(0.05)
    assert not reader.done()  # nothing was kept
    reader.cancel()
