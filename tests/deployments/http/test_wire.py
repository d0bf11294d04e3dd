"""Definitions shared by HTTP decoding and encoding (``deployments/http/wire.py``): the
raw-input spec, and JSON read and written as Triton's parser and writer do."""

from __future__ import annotations

import json

import numpy as np
import pytest

from deployments.http import RawInputSpec, json_dumps
from repo_adapter.errors import StatusCode
from tests.deployments.http.codec_helpers import HEADER_LENGTH, decode, fails

pytestmark = pytest.mark.usefixtures("json_backend")  # every test on each JSON path (conftest)


# --------------------------------------------------------------------------------------------
# raw-input spec


def test_raw_input_spec_from_model_config():
    from tritonclient.grpc import model_config_pb2 as mc

    config = mc.ModelConfig(name="m", max_batch_size=4)
    config.input.add(name="IN", data_type=mc.TYPE_FP32, dims=[-1])
    assert RawInputSpec.from_model_config(config) == RawInputSpec("IN", "FP32", (-1,), 4)
    array = np.arange(3, dtype=np.float32)
    tensor = decode(array.tobytes(), {HEADER_LENGTH: "0"}, raw_input=config).input("IN")
    assert tensor.shape == (1, 3)
    config.input.add(name="IN2", data_type=mc.TYPE_FP32, dims=[1])
    assert RawInputSpec.from_model_config(config) is None


# --------------------------------------------------------------------------------------------
# JSON


def test_json_nan_and_infinity_are_accepted():
    body = b'{"inputs":[{"name":"X","datatype":"FP32","shape":[3],"data":[NaN,Infinity,-1]}]}'
    data = decode(body, {}).input("X").data
    assert np.isnan(data[0]) and data[1] == np.inf and data[2] == -1


def test_json_documents_are_compact():
    body = json_dumps({"name": "triton", "v": [1, 2], "n": np.int64(3)})
    assert body == b'{"name":"triton","v":[1,2],"n":3}'


@pytest.mark.parametrize(
    "body",
    [
        b'{"id":"\\ud800","inputs":[]}',
        b'{"inputs":[{"name":"X","datatype":"\\udfff","shape":[1],"data":[NaN]}]}',
        b'{"parameters":{"\\udc00":1},"inputs":[]}',
    ],
    ids=["id", "datatype-with-nan", "parameter-key"],
)
def test_lone_surrogate_escapes_are_refused_as_rapidjson_does(body):
    with fails(StatusCode.INVALID_ARG, r"^failed to parse the request JSON buffer: The surrogate"):
        decode(body, {})


def test_paired_surrogate_escapes_are_one_character():
    body = b'{"id":"\\ud83d\\ude00","inputs":[]}'
    assert decode(body, {}).id == "\U0001f600"


def test_json_documents_with_a_lone_surrogate_are_still_valid_json():
    assert json.loads(json_dumps({"error": "bad \ud800"})) == {"error": "bad \ud800"}
