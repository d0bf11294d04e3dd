"""Input data: shapes, generation, perf_analyzer JSON files, batching (no server)."""

from __future__ import annotations

import base64
import json

import numpy as np
import pytest

from rayton_perf.config import PerfError
from rayton_perf.inputs import (
    MAX_PREPARED_REQUESTS,
    InputSpec,
    batch_requests,
    generate_step,
    load_json_data,
    prepare_requests,
    resolve_specs,
    shape_steps,
)
from rayton_perf.server_stats import ModelInfo, TensorMeta


def _model(*inputs: TensorMeta, max_batch_size: int = 8) -> ModelInfo:
    return ModelInfo(
        name="m",
        version="",
        platform="python",
        max_batch_size=max_batch_size,
        inputs=list(inputs),
        outputs=[TensorMeta("OUT", "FP32", [4])],
    )


IDENT = _model(TensorMeta("IN", "FP32", [4]))


def test_resolve_specs_and_batch_rules():
    assert resolve_specs(IDENT, 8, {}) == [InputSpec("IN", "FP32", [4])]
    with pytest.raises(PerfError, match="max_batch_size"):
        resolve_specs(IDENT, 9, {})
    unbatched = _model(TensorMeta("IN", "FP32", [4]), max_batch_size=0)
    with pytest.raises(PerfError, match="does not support batching"):
        resolve_specs(unbatched, 2, {})


def test_resolve_specs_needs_shape_for_variable_dims():
    model = _model(TensorMeta("IN", "FP32", [-1, 3]))
    with pytest.raises(PerfError, match="dynamic shape"):
        resolve_specs(model, 1, {})
    assert resolve_specs(model, 1, {"IN": [5, 3]})[0].dims == [5, 3]
    with pytest.raises(PerfError, match="does not match"):
        resolve_specs(model, 1, {"IN": [5, 4]})
    with pytest.raises(PerfError, match="does not match"):
        resolve_specs(model, 1, {"IN": [5]})
    with pytest.raises(PerfError, match="unknown inputs"):
        resolve_specs(model, 1, {"NOPE": [1]})
    # Data files may carry the shape themselves.
    assert resolve_specs(model, 1, {}, provided={"IN"})[0].dims == [-1, 3]


@pytest.mark.parametrize(
    ("datatype", "dtype"),
    [
        ("FP32", np.float32),
        ("FP16", np.float16),
        ("INT64", np.int64),
        ("UINT8", np.uint8),
        ("BOOL", np.bool_),
        ("BYTES", np.object_),
    ],
)
def test_generate_step_types(datatype, dtype):
    spec = InputSpec("X", datatype, [2, 3])
    rng = np.random.default_rng(0)
    for mode in ("random", "zero"):
        array = generate_step([spec], mode, rng, string_length=5)["X"]
        assert array.shape == (2, 3)
        assert array.dtype == dtype
    text = generate_step([spec], "random", rng, string_length=5)["X"]
    if datatype == "BYTES":
        assert all(isinstance(v, bytes) and len(v) == 5 for v in text.flat)
    elif datatype not in ("BOOL",):
        assert (text >= 0).all() and (text < 100).all()


def test_generate_zero_is_zero_and_string_data_is_used():
    rng = np.random.default_rng(0)
    assert not generate_step([InputSpec("X", "INT32", [3])], "zero", rng)["X"].any()
    strings = generate_step([InputSpec("S", "BYTES", [2])], "random", rng, string_data="hi")["S"]
    assert list(strings) == [b"hi", b"hi"]
    with pytest.raises(PerfError):
        generate_step([InputSpec("X", "FP32", [1])], "ones", rng)


def test_prepare_requests_generated_adds_batch_dim():
    [request] = prepare_requests(IDENT, 3, {}, "random", seed=1)
    assert request["IN"].shape == (3, 4)
    assert request["IN"].dtype == np.float32
    again = prepare_requests(IDENT, 3, {}, "random", seed=1)[0]["IN"]
    np.testing.assert_array_equal(request["IN"], again)  # seeded: reproducible
    unbatched = _model(TensorMeta("IN", "FP32", [4]), max_batch_size=0)
    assert prepare_requests(unbatched, 1, {}, "zero")[0]["IN"].shape == (4,)


def _write(tmp_path, document) -> str:
    path = tmp_path / "data.json"
    path.write_text(json.dumps(document))
    return str(path)


def test_json_forms(tmp_path):
    raw = np.array([1, 2, 3, 4], dtype="<f4").tobytes()
    document = {
        "data": [
            {"IN": [1, 2, 3, 4]},
            {"IN": [[5, 6], [7, 8]]},
            {"IN": {"content": [9, 10, 11, 12], "shape": [4]}},
            {"IN": {"b64": base64.b64encode(raw).decode()}},
            {"IN": {"content": {"b64": base64.b64encode(raw).decode()}}},
        ]
    }
    requests = prepare_requests(IDENT, 1, {}, _write(tmp_path, document))
    values = [r["IN"].tolist() for r in requests]
    one_to_four = [[1, 2, 3, 4]]
    assert values == [one_to_four, [[5, 6, 7, 8]], [[9, 10, 11, 12]], one_to_four, one_to_four]
    assert all(r["IN"].dtype == np.float32 for r in requests)


def test_json_batches_consecutive_steps(tmp_path):
    document = {"data": [{"IN": [i] * 4} for i in range(3)]}
    requests = prepare_requests(IDENT, 2, {}, _write(tmp_path, document))
    # request k stacks steps k, k+1 (mod 3), as perf_analyzer batches.
    assert [r["IN"][:, 0].tolist() for r in requests] == [[0, 1], [1, 2], [2, 0]]


def test_json_streams_are_flattened(tmp_path):
    document = {"data": [[{"IN": [0] * 4}, {"IN": [1] * 4}], [{"IN": [2] * 4}]]}
    requests = prepare_requests(IDENT, 1, {}, _write(tmp_path, document))
    assert [int(r["IN"][0, 0]) for r in requests] == [0, 1, 2]


def test_json_shape_for_variable_dims(tmp_path):
    model = _model(TensorMeta("IN", "INT32", [-1]))
    document = {"data": [{"IN": {"content": [1, 2, 3], "shape": [3]}}]}
    [request] = prepare_requests(model, 1, {}, _write(tmp_path, document))
    assert request["IN"].tolist() == [[1, 2, 3]]
    # Without a shape in the file, --shape supplies it.
    flat = {"data": [{"IN": [1, 2]}]}
    [request] = prepare_requests(model, 1, {"IN": [2]}, _write(tmp_path, flat))
    assert request["IN"].shape == (1, 2)
    with pytest.raises(PerfError, match="dynamic shape"):
        prepare_requests(model, 1, {}, _write(tmp_path, flat))


def test_json_bytes_and_bool():
    from tritonclient.utils import serialize_byte_tensor

    model = _model(TensorMeta("S", "BYTES", [2]), TensorMeta("B", "BOOL", [2]))
    packed = serialize_byte_tensor(np.array([b"x", b"yz"], dtype=np.object_)).item()
    steps = load_json_data(
        {
            "data": [
                {"S": ["a", "bc"], "B": [True, False]},
                {"S": {"b64": base64.b64encode(packed).decode()}, "B": [False, True]},
            ]
        },
        model,
    )
    shaped = shape_steps(steps, resolve_specs(model, 1, {}))
    assert shaped[0]["S"].tolist() == [b"a", b"bc"]
    assert shaped[0]["B"].tolist() == [True, False]
    assert shaped[1]["S"].tolist() == [b"x", b"yz"]


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ({"nodata": []}, "data field"),
        ({"data": []}, "non-empty"),
        ({"data": [5]}, "malformed"),
        ({"data": [{"OTHER": [1]}]}, "not found in the model"),
        ({"data": [{}]}, "missing tensor IN"),
        ({"data": [{"IN": "text"}]}, "malformed"),
        ({"data": [{"IN": {"shape": [4]}}]}, "missing content"),
        ({"data": [{"IN": {"b64": 5}}]}, "b64"),
        ({"data": [{"IN": {"b64": "AAA"}}]}, "base64|multiple"),
        ({"data": [{"IN": ["a", "b", "c", "d"]}]}, "numbers"),
        ({"data": [{"IN": {"content": [1], "shape": [-1]}}]}, "non-negative"),
    ],
)
def test_json_errors(document, message):
    with pytest.raises(PerfError, match=message):
        load_json_data(document, IDENT)


def test_json_value_count_must_match_shape(tmp_path):
    with pytest.raises(PerfError, match="do not fit"):
        prepare_requests(IDENT, 1, {}, _write(tmp_path, {"data": [{"IN": [1, 2, 3]}]}))


def test_json_file_errors(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(PerfError, match="cannot read"):
        prepare_requests(IDENT, 1, {}, str(bad))
    with pytest.raises(PerfError, match="neither random"):
        prepare_requests(IDENT, 1, {}, str(tmp_path / "missing.json"))
    with pytest.raises(PerfError, match="directories"):
        prepare_requests(IDENT, 1, {}, str(tmp_path))


def test_batch_requests_refuses_mixed_shapes_and_caps_count():
    steps = [{"IN": np.zeros(2)}, {"IN": np.zeros(3)}]
    with pytest.raises(PerfError, match="different shapes"):
        batch_requests(steps, 2, True)
    many = [{"IN": np.zeros(1)}] * (MAX_PREPARED_REQUESTS + 5)
    assert len(batch_requests(many, 1, True)) == MAX_PREPARED_REQUESTS
