"""The HTTP codec tests' helpers: bodies as tritonclient's HTTP client builds them, responses
as it parses them."""

from __future__ import annotations

import json
import re
from contextlib import contextmanager

import pytest
import tritonclient.http as httpclient
from tritonclient.http import InferenceServerClient

from deployments.http import decode_infer_request, encode_infer_response
from repo_adapter.errors import InferenceServerError
from repo_adapter.inference_types import InferRequest, InferResponse

HEADER_LENGTH = "Inference-Header-Content-Length"


def infer_input(name, array, datatype, binary=True):
    tensor = httpclient.InferInput(name, list(array.shape), datatype)
    tensor.set_data_from_numpy(array, binary_data=binary)
    return tensor


def client_request(inputs, outputs=None, **kwargs):
    """(body, headers) exactly as tritonclient's HTTP client sends them."""
    body, header_length = InferenceServerClient.generate_request_body(inputs, outputs, **kwargs)
    headers = {} if header_length is None else {HEADER_LENGTH: str(header_length)}
    return body, headers


def json_request(header, binary=b"", header_length=True):
    """(body, headers) for a hand-written JSON header plus optional binary data."""
    text = json.dumps(header).encode()
    headers = {HEADER_LENGTH: str(len(text))} if header_length else {}
    return text + binary, headers


def decode(body, headers, **kwargs):
    return decode_infer_request(body, headers, "model", "1", **kwargs)


def client_result(body, headers):
    """Parse an encoded response with tritonclient."""
    length = headers.get(HEADER_LENGTH)
    return InferenceServerClient.parse_response_body(
        body,
        header_length=int(length) if length is not None else None,
        content_encoding=headers.get("Content-Encoding"),
    )


def encode(outputs, request=None, accept_encoding=None, **kwargs):
    request = request or InferRequest("model", [], "1")
    response = InferResponse("model", "1", outputs, id=request.id)
    return encode_infer_response(response, request, accept_encoding, **kwargs)


def response_json(body, headers):
    length = headers.get(HEADER_LENGTH)
    return json.loads(body[: int(length)] if length is not None else body)


@contextmanager
def fails(code, pattern):
    with pytest.raises(InferenceServerError) as info:
        yield info
    assert info.value.code == code, info.value
    assert re.search(pattern, info.value.message), info.value.message
