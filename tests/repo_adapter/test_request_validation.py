"""Request validation with core ``InferenceRequest::Normalize``'s checks, order and wording.

The messages are the ones tritonserver answers (checked against the real server by
``tests/conformance``); these unit tests pin them without a server.
"""

from __future__ import annotations

import numpy as np
import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from repo_adapter.errors import InferenceServerError
from repo_adapter.inference_types import InferRequest, InferTensor, RequestedOutput
from repo_adapter.request_validation import RequestValidator, reshaped

BATCHED = """
name: "m" max_batch_size: 8
input [ { name: "A" data_type: TYPE_FP32 dims: [ 4 ] },
        { name: "B" data_type: TYPE_FP32 dims: [ 1 ] reshape: { shape: [ ] } optional: true } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] } ]
"""
PLAIN = """
name: "p" max_batch_size: 0
input [ { name: "IN" data_type: TYPE_FP32 dims: [ -1, 2 ] reshape: { shape: [ 2, -1 ] } } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ -1 ] } ]
"""


def validator(text: str) -> RequestValidator:
    return RequestValidator(text_format.Parse(text, mc.ModelConfig()))


def request(*tensors: tuple[str, tuple, str], request_id: str = "", outputs=()) -> InferRequest:
    return InferRequest(
        model_name="m",
        id=request_id,
        inputs=[InferTensor(n, dt, np.zeros(shape, np.float32)) for n, shape, dt in tensors],
        outputs=[RequestedOutput(name) for name in outputs],
    )


def error_of(v: RequestValidator, req: InferRequest) -> str:
    with pytest.raises(InferenceServerError) as info:
        v.validate(req)
    return info.value.message


def test_valid_request_returns_rows_and_normalize_applies_reshape():
    v = validator(BATCHED)
    req = request(("A", (3, 4), "FP32"), ("B", (3, 1), "FP32"))
    assert v.normalize(req) == 3
    assert req.inputs[0].data.shape == (3, 4)
    assert req.inputs[1].data.shape == (3,)  # dims [1] reshaped to [] under the batch dim
    plain = request(("IN", (5, 2), "FP32"))
    assert validator(PLAIN).normalize(plain) == 1
    assert plain.inputs[0].data.shape == (2, 5)  # the wildcard moves to the reshape's -1


def test_reshaped_carries_wildcards_in_order():
    assert reshaped((7, 3), (-1, 3), (3, -1)) == (3, 7)
    assert reshaped((2, 2), (2, 2), (4,)) == (4,)
    assert reshaped((4,), (4,), (2, -1)) == (2, -1)  # nothing to carry: numpy infers it


@pytest.mark.parametrize(
    "req,message",
    [
        (
            request(("A", (1, 3), "FP32")),
            "[request id: <id_unknown>] unexpected shape for input 'A' for model 'm'. Expected "
            "[-1,4], got [1,3]. NOTE: Setting a non-zero max_batch_size",
        ),
        (
            request(("A", (1, 4), "INT32"), request_id="r7"),
            "[request id: r7] inference input 'A' data-type is 'INT32', but model 'm' expects "
            "'FP32'",
        ),
        (
            request(("A", (9, 4), "FP32")),
            "[request id: <id_unknown>] inference request batch-size must be <= 8 for 'm'",
        ),
        (
            request(("A", (2, 4), "FP32"), ("B", (3, 1), "FP32")),
            "[request id: <id_unknown>] input 'B' batch size does not match other inputs for 'm'",
        ),
        (
            request(("A", (), "FP32")),
            "[request id: <id_unknown>] input 'A' has no shape but model requires batch "
            "dimension for 'm'",
        ),
        (
            request(),
            "[request id: <id_unknown>] expected number of inputs between 1 and 2 but got 0 "
            "inputs for model 'm'. Got input(s) [], but missing required input(s) ['A'].",
        ),
        (
            request(("A", (1, 4), "FP32"), ("B", (1, 1), "FP32"), ("C", (1, 1), "FP32")),
            # Core's quirk: with nothing missing the list collapses to "]".
            "but got 3 inputs for model 'm'. Got input(s) ['A','B','C'], but missing required "
            "input(s) ].",
        ),
        (request(("X", (1, 4), "FP32")), "unexpected inference input 'X' for model 'm'"),
        (
            request(("A", (1, 4), "FP32"), outputs=["NOPE"]),
            "unexpected inference output 'NOPE' for model 'm'",
        ),
        (
            request(("A", (1, 4), "FP32"), ("A", (1, 4), "FP32")),
            "[request id: <id_unknown>] input 'A' already exists in request",
        ),
    ],
)
def test_errors_read_like_triton(req, message):
    assert message in error_of(validator(BATCHED), req)


def test_only_input_counts_are_checked_like_core():
    # One input given, one required: core accepts the count even though it is the optional one.
    assert validator(BATCHED).validate(request(("B", (1, 1), "FP32"))) == 1


def test_non_batching_shape_error_has_no_batch_note():
    message = error_of(validator(PLAIN), request(("IN", (3,), "FP32")))
    assert message == (
        "[request id: <id_unknown>] unexpected shape for input 'IN' for model 'p'. "
        "Expected [-1,2], got [3]. "
    )
