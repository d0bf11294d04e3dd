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


def test_json_validation_data_is_refused_not_ignored():
    document = {"data": [{"IN": [1, 2, 3, 4]}], "validation_data": [{"OUT": [1, 2, 3, 4]}]}
    with pytest.raises(PerfError, match="does not validate outputs"):
        load_json_data(document, IDENT)


# ---------------------------------------------------------------------------------------------
# --input-data DIR: one file per input, named after it (perf_analyzer's ReadDataFromDir)

MIXED = _model(
    TensorMeta("IMAGE", "FP32", [2, 2]),
    TensorMeta("IDS", "INT64", [3]),
    TensorMeta("TEXT", "BYTES", [2]),
)


def _data_dir(tmp_path, files: dict[str, bytes]):
    directory = tmp_path / "data"
    directory.mkdir(parents=True)
    for name, content in files.items():
        (directory / name).write_bytes(content)
    return directory


def _mixed_files(**changes: bytes) -> dict[str, bytes]:
    files = {
        "IMAGE": np.array([0.5, 1.5, 2.5, 3.5], dtype="<f4").tobytes(),
        "IDS": np.array([7, -8, 2**40], dtype="<i8").tobytes(),
        "TEXT": b"hello world\nsecond\n",
    }
    files.update(changes)
    return files


def test_directory_fp32_int64_bytes(tmp_path):
    directory = _data_dir(tmp_path, _mixed_files())
    [request] = prepare_requests(MIXED, 1, {}, str(directory))
    assert request["IMAGE"].dtype == np.float32
    assert request["IMAGE"].tolist() == [[[0.5, 1.5], [2.5, 3.5]]]  # row-major, batch dim added
    assert request["IDS"].dtype == np.int64
    assert request["IDS"].tolist() == [[7, -8, 2**40]]
    assert request["TEXT"].tolist() == [[b"hello world", b"second"]]


def test_directory_batch_repeats_the_row(tmp_path):
    # perf_analyzer's directory is one batch-1 step: -b N sends it N times per request.
    directory = _data_dir(tmp_path, _mixed_files())
    [request] = prepare_requests(MIXED, 3, {}, str(directory))
    assert request["IMAGE"].shape == (3, 2, 2)
    assert request["IDS"].tolist() == [[7, -8, 2**40]] * 3
    assert request["TEXT"].shape == (3, 2)
    # The file holds one row, not a batch: 3 rows of data are the wrong size for -b 3.
    big = _data_dir(tmp_path / "b", {"IN": np.zeros(12, dtype="<f4").tobytes()})
    with pytest.raises(PerfError, match="has byte size 48, expect 16"):
        prepare_requests(IDENT, 3, {}, str(big))


def test_directory_without_batching_and_with_shape(tmp_path):
    unbatched = _model(TensorMeta("IN", "UINT8", [-1]), max_batch_size=0)
    directory = _data_dir(tmp_path, {"IN": b"\x89PNG\r\n"})
    [request] = prepare_requests(unbatched, 1, {"IN": [6]}, str(directory))
    assert request["IN"].shape == (6,)
    assert request["IN"].tobytes() == b"\x89PNG\r\n"
    with pytest.raises(PerfError, match="contains dynamic shape"):
        prepare_requests(unbatched, 1, {}, str(directory))
    with pytest.raises(PerfError, match="has byte size 6, expect 5"):
        prepare_requests(unbatched, 1, {"IN": [5]}, str(directory))


def test_directory_bf16_and_bool(tmp_path):
    model = _model(TensorMeta("H", "BF16", [2]), TensorMeta("B", "BOOL", [3]))
    halves = (np.array([1.0, -2.0], dtype=np.float32).view(np.uint32) >> 16).astype("<u2")
    files = {"H": halves.tobytes(), "B": bytes([1, 0, 1])}
    [request] = prepare_requests(model, 1, {}, str(_data_dir(tmp_path, files)))
    assert request["H"].tolist() == [[1.0, -2.0]]  # 2 bytes per BF16 element on the wire
    assert request["B"].tolist() == [[True, False, True]]


@pytest.mark.parametrize(
    ("text", "elements"),
    [
        (b"a\nb", [b"a", b"b"]),  # no final newline
        (b"a\nb\n", [b"a", b"b"]),  # a final newline ends the last line
        (b"\nb\n", [b"", b"b"]),  # an empty line is an empty string
        (b"a b\r\nc\n", [b"a b\r", b"c"]),  # only \n splits, as std::getline
    ],
)
def test_directory_bytes_lines(tmp_path, text, elements):
    model = _model(TensorMeta("S", "BYTES", [2]))
    [request] = prepare_requests(model, 1, {}, str(_data_dir(tmp_path, {"S": text})))
    assert request["S"].tolist() == [elements]


@pytest.mark.parametrize(
    ("files", "message"),
    [
        (
            _mixed_files(IMAGE=b"\0" * 12),
            "^provided data for input IMAGE has byte size 12, expect 16$",
        ),
        (
            _mixed_files(IDS=np.zeros(4, dtype="<i8").tobytes()),
            "^provided data for input IDS has byte size 32, expect 24$",
        ),
        (_mixed_files(TEXT=b"one\n"), "^provided data for input TEXT has 1 elements, expect 2$"),
        (_mixed_files(TEXT=b"a\nb\nc"), "has 3 elements, expect 2"),
        (_mixed_files(IMAGE=b""), "^file '.*/data/IMAGE' is empty$"),
        (
            _mixed_files(EXTRA=b"x"),
            "^Provided data file 'EXTRA' does not correspond to a valid model input or output.$",
        ),
        (_mixed_files(OUT=b"\0" * 16), "data file 'OUT' holds expected data for output 'OUT'"),
    ],
)
def test_directory_errors(tmp_path, files, message):
    with pytest.raises(PerfError, match=message):
        prepare_requests(MIXED, 1, {}, str(_data_dir(tmp_path, files)))


def test_directory_missing_file_names_the_path(tmp_path):
    files = _mixed_files()
    del files["IDS"]
    directory = _data_dir(tmp_path, files)
    with pytest.raises(PerfError, match=r"^failed to open file '.*/data/IDS' \(a data directory"):
        prepare_requests(MIXED, 1, {}, str(directory))


def test_directory_optional_input_still_needs_its_file(tmp_path):
    # perf_analyzer's ReadDataFromDir opens a file for every input, optional ones too.
    model = _model(TensorMeta("IN", "FP32", [4]), TensorMeta("MASK", "FP32", [4], optional=True))
    directory = _data_dir(tmp_path, {"IN": np.zeros(4, dtype="<f4").tobytes()})
    with pytest.raises(PerfError, match=r"failed to open file '.*MASK'"):
        prepare_requests(model, 1, {}, str(directory))
    (directory / "MASK").write_bytes(np.ones(4, dtype="<f4").tobytes())
    [request] = prepare_requests(model, 1, {}, str(directory))
    assert request["MASK"].tolist() == [[1.0] * 4]


def test_directory_subdirectory_named_after_an_input_is_not_a_file(tmp_path):
    directory = _data_dir(tmp_path, {})
    (directory / "IN").mkdir()
    with pytest.raises(PerfError, match="failed to open file"):
        prepare_requests(IDENT, 1, {}, str(directory))


def test_batch_requests_refuses_mixed_shapes_and_caps_count():
    steps = [{"IN": np.zeros(2)}, {"IN": np.zeros(3)}]
    with pytest.raises(PerfError, match="different shapes"):
        batch_requests(steps, 2, True)
    many = [{"IN": np.zeros(1)}] * (MAX_PREPARED_REQUESTS + 5)
    assert len(batch_requests(many, 1, True)) == MAX_PREPARED_REQUESTS
