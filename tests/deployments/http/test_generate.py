"""Triton's generate extension, Ray-free: a JSON body to an inference request (shapes from
the config's dims, parameters), responses to JSON documents and server-sent events."""

from __future__ import annotations

import json

import numpy as np
import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from deployments.http.generate import (
    NOT_ONE_RESPONSE,
    generate_reply,
    generate_request,
    generate_stream_reply,
    response_document,
)
from repo_adapter.errors import InferenceServerError, StatusCode
from repo_adapter.inference_types import InferResponse, InferTensor
from repo_adapter.response_stream import StreamedResponse

CONFIG = text_format.Parse(
    """
    name: "m"
    max_batch_size: 4
    input [
      { name: "text_input" data_type: TYPE_STRING dims: [ 1 ] },
      { name: "vec" data_type: TYPE_FP32 dims: [ 2, -1 ] },
      { name: "steps" data_type: TYPE_INT32 dims: [ 1 ] }
    ]
    """,
    mc.ModelConfig(),
)


def body(document) -> bytes:
    return json.dumps(document).encode()


def test_inputs_take_their_configs_shape_with_a_batch_of_one_and_the_rest_are_parameters():
    request = generate_request(
        body(
            {
                "text_input": "hello",
                "vec": [1, 2, 3, 4, 5, 6],
                "steps": 3,
                "temperature": 0.5,
                "parameters": {"stream": True},
            }
        ),
        CONFIG,
        "2",
    )
    assert (request.model_name, request.model_version) == ("m", "2")
    text, vec, steps = request.inputs
    assert (text.datatype, text.data.shape, text.data.tolist()) == ("BYTES", (1, 1), [[b"hello"]])
    assert (vec.datatype, vec.data.shape) == ("FP32", (1, 2, 3))
    assert (steps.datatype, steps.data.tolist()) == ("INT32", [[3]])
    assert request.parameters == {"temperature": 0.5, "stream": True}


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ({"text_input": ["a", "b"]}, "The schema can not convert input 'text_input'"),
        ({"vec": [1, 2, 3]}, "The schema can not convert input 'vec'"),
        ({"steps": "x"}, "Unable to parse 'data' for input 'steps'"),
        ({"parameters": {"nested": {"a": 1}}}, "parameter 'nested' of a generate request"),
    ],
)
def test_values_that_do_not_fit_are_refused(document, message):
    with pytest.raises(InferenceServerError) as refused:
        generate_request(body(document), CONFIG, "")
    assert refused.value.message.startswith(message)


def test_a_response_document_has_one_element_outputs_as_scalars_and_sorted_keys():
    response = InferResponse(
        "m",
        "1",
        [
            InferTensor("text_output", "BYTES", np.array([[b"hi"]], dtype=np.object_)),
            InferTensor("OUT", "FP32", np.array([[1.5, 2.5]], np.float32)),
        ],
    )
    assert response_document(response) == (
        b'{"OUT":[1.5,2.5],"model_name":"m","model_version":"1","text_output":"hi"}'
    )


async def items(*streamed: StreamedResponse):
    for item in streamed:
        yield item


def answer(value: int) -> InferResponse:
    return InferResponse("m", "1", [InferTensor("n", "INT32", np.array([value], np.int32))])


async def test_generate_needs_exactly_one_response():
    one = await generate_reply(
        items(StreamedResponse(answer(1), False), StreamedResponse(None, True))
    )
    assert (one.status, json.loads(one.body)["n"]) == (200, 1)
    two = await generate_reply(
        items(StreamedResponse(answer(1), False), StreamedResponse(answer(2), True))
    )
    assert (two.status, json.loads(two.body)) == (200, {"error": NOT_ONE_RESPONSE})
    error = InferenceServerError("model failed", StatusCode.INTERNAL)
    failed = await generate_reply(items(StreamedResponse(error, True)))
    assert (failed.status, json.loads(failed.body)) == (400, {"error": "model failed"})


async def read_events(reply) -> bytes:
    return b"".join([chunk async for chunk in reply.stream]) if reply.stream else reply.body


async def test_generate_stream_sends_each_response_as_an_event_its_status_the_firsts():
    reply = await generate_stream_reply(
        items(
            StreamedResponse(answer(0), False),
            StreamedResponse(InferenceServerError("later"), False),
            StreamedResponse(answer(1), True),
        )
    )
    assert reply.status == 200 and reply.headers["Content-Type"].startswith("text/event-stream")
    events = (await read_events(reply)).split(b"\n\n")
    assert [json.loads(e.removeprefix(b"data: ")).get("n") for e in events[:3:2]] == [0, 1]
    assert json.loads(events[1].removeprefix(b"data: ")) == {"error": "later"}
    empty = await generate_stream_reply(items(StreamedResponse(None, True)))
    assert (empty.status, await read_events(empty)) == (200, b"")
    first_failed = await generate_stream_reply(
        items(StreamedResponse(InferenceServerError("no"), True))
    )
    assert (first_failed.status, await read_events(first_failed)) == (
        400,
        b'data: {"error":"no"}\n\n',
    )
