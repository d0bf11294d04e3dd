"""Classification extension: Triton's ``"<value>:<index>[:<label>]"`` top-N strings."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from deployments.core import classification
from deployments.core.classification import apply_classification, classify, top_k_indices
from repo_adapter.errors import InferenceServerError, StatusCode
from repo_adapter.inference_types import InferResponse, InferTensor, RequestedOutput


def strings(tensor: InferTensor) -> list:
    return np.vectorize(bytes.decode, otypes=[object])(tensor.data).tolist()


def test_batched_float_rows_with_labels():
    scores = np.array([[0.1, 0.873412, 0.02, 0.5], [0.4, 0.3, 0.2, 0.1]], dtype=np.float32)
    tensor = InferTensor("PROB", "FP32", scores, parameters={"p": 1})
    result = classify(tensor, 2, ["tench", "tabby", "goldfish", "shark"], batched=True)
    assert result.name == "PROB" and result.datatype == "BYTES"
    assert result.shape == (2, 2) and result.data.dtype == np.object_
    assert result.parameters == {"p": 1}
    assert strings(result) == [
        ["0.873412:1:tabby", "0.500000:3:shark"],
        ["0.400000:0:tench", "0.300000:1:tabby"],
    ]


def test_unbatched_tensor_is_one_row_over_all_elements():
    scores = np.array([[1.0, 5.0], [3.0, 4.0]], dtype=np.float64)
    result = classify(InferTensor("OUT", "FP64", scores), 3, None, batched=False)
    assert result.shape == (3,)
    assert strings(result) == ["5.000000:1", "4.000000:3", "3.000000:2"]


def test_batched_rows_flatten_the_remaining_dimensions():
    scores = np.arange(12, dtype=np.float32).reshape(2, 3, 2)
    result = classify(InferTensor("OUT", "FP32", scores), 2, None, batched=True)
    assert strings(result) == [["5.000000:5", "4.000000:4"], ["11.000000:5", "10.000000:4"]]


def test_class_count_is_clipped_to_row_size():
    result = classify(InferTensor("OUT", "FP32", np.ones((3, 2), np.float32)), 10, None, True)
    assert result.shape == (3, 2)


def test_ties_rank_by_ascending_index():
    scores = np.array([0.25, 0.5, 0.25, 0.5, 0.25], dtype=np.float32)
    result = classify(InferTensor("OUT", "FP32", scores), 5, None)
    assert strings(result) == ["0.500000:1", "0.500000:3", "0.250000:0", "0.250000:2", "0.250000:4"]


def test_missing_and_empty_labels_add_no_suffix():
    scores = np.array([[0.1, 0.2, 0.3, 0.4]], dtype=np.float32)
    result = classify(InferTensor("OUT", "FP32", scores), 4, ["a", "", "c"], batched=True)
    assert strings(result) == [["0.400000:3", "0.300000:2:c", "0.200000:1", "0.100000:0:a"]]


def test_labels_are_utf8():
    result = classify(InferTensor("OUT", "FP32", np.array([1.0], np.float32)), 1, ["chat noir é"])
    assert result.data.tolist() == ["1.000000:0:chat noir é".encode()]


@pytest.mark.parametrize(
    ("datatype", "values", "expected"),
    [
        ("INT32", [-7, 3, 12], ["12:2", "3:1", "-7:0"]),
        ("UINT8", [200, 7, 255], ["255:2", "200:0", "7:1"]),
        ("INT8", [-128, 127, 0], ["127:1", "0:2", "-128:0"]),
        ("INT64", [-(2**63), 2**63 - 1, 0], [f"{2**63 - 1}:1", "0:2", f"{-(2**63)}:0"]),
        ("UINT64", [0, 2**64 - 1, 5], [f"{2**64 - 1}:1", "5:2", "0:0"]),
        ("UINT16", [1, 2, 3], ["3:2", "2:1", "1:0"]),
    ],
)
def test_integer_outputs_print_without_decimals(datatype, values, expected):
    dtype = {"INT32": np.int32, "UINT8": np.uint8, "INT8": np.int8, "INT64": np.int64,
             "UINT64": np.uint64, "UINT16": np.uint16}[datatype]  # fmt: skip
    result = classify(InferTensor("OUT", datatype, np.array(values, dtype=dtype)), 3, None)
    assert strings(result) == expected


def test_float_formatting_matches_std_to_string():
    values = np.array([1e20, -0.0000004, 123.4567891, -2.5], dtype=np.float32)
    result = classify(InferTensor("OUT", "FP32", values), 4, None)
    # "%f" of the float widened to double, as std::to_string(float) prints it.
    assert strings(result) == [
        "100000002004087734272.000000:0",
        "123.456787:2",
        "-0.000000:1",
        "-2.500000:3",
    ]


def test_nan_ranks_last():
    values = np.array([np.nan, 0.5, -np.inf, np.inf], dtype=np.float32)
    result = classify(InferTensor("OUT", "FP32", values), 4, None)
    assert strings(result) == ["inf:3", "0.500000:1", "-inf:2", "nan:0"]


@pytest.mark.parametrize(
    ("datatype", "array"),
    [
        ("BOOL", np.array([True, False])),
        ("FP16", np.array([0.5, 0.25], dtype=np.float16)),
        ("BF16", np.array([0.5, 0.25], dtype=ml_dtypes.bfloat16)),
        ("BYTES", np.array([b"a", b"b"], dtype=np.object_)),
    ],
)
def test_unsupported_datatypes(datatype, array):
    with pytest.raises(InferenceServerError) as info:
        classify(InferTensor("OUT", datatype, array), 1, None)
    assert info.value.code == StatusCode.INVALID_ARG
    assert info.value.message == (
        f"class result not available for output due to unsupported type '{datatype}'"
    )


def test_rows_over_the_element_limit_are_refused():
    too_big = np.zeros(classification.MAX_CLASSIFICATION_ELEMENTS + 1, dtype=np.uint8)
    with pytest.raises(InferenceServerError, match="classification output tensor too large"):
        classify(InferTensor("OUT", "UINT8", too_big), 1, None)
    # The limit is per batch row, as in Triton.
    rows = np.zeros((2, classification.MAX_CLASSIFICATION_ELEMENTS // 2 + 1), dtype=np.uint8)
    assert classify(InferTensor("OUT", "UINT8", rows), 1, None, batched=True).shape == (2, 1)


def test_empty_batch_and_empty_rows():
    empty_batch = classify(InferTensor("OUT", "FP32", np.zeros((0, 5), np.float32)), 3, None, True)
    assert empty_batch.shape == (0, 3)
    empty_rows = classify(InferTensor("OUT", "FP32", np.zeros((2, 0), np.float32)), 3, None, True)
    assert empty_rows.shape == (2, 0)


def test_scalar_output_with_batching_flag():
    result = classify(InferTensor("OUT", "FP32", np.array(0.5, np.float32)), 2, None, True)
    assert strings(result) == ["0.500000:0"]


@pytest.mark.parametrize(
    "dtype", [np.float32, np.float64, np.int8, np.int32, np.int64, np.uint8, np.uint64]
)
@pytest.mark.parametrize("k", [1, 5, 64])
def test_partition_path_matches_full_stable_sort(dtype, k):
    """The argpartition shortcut gives exactly the full sort's answer, ties included."""
    rng = np.random.default_rng(k)
    info = np.iinfo(dtype) if np.dtype(dtype).kind in "iu" else None
    rows = rng.integers(0, 6, size=(7, 4096)).astype(dtype)  # many ties
    if info is not None:
        rows[:, ::97] = info.max
        rows[:, 1::89] = info.min
    expected = np.argsort(classification._ascending_key(rows), axis=1, kind="stable")[:, :k]
    assert classification._PARTITION_MIN_ELEMENTS <= 4096 and k * 8 <= 4096  # fast path taken
    np.testing.assert_array_equal(top_k_indices(rows, k), expected)
    # Reference by hand for one row: largest first, ties by ascending index.
    row = rows[3].tolist()
    by_hand = sorted(range(len(row)), key=lambda i: (-int(row[i]) if info else -row[i], i))[:k]
    assert top_k_indices(rows[3:4], k)[0].tolist() == by_hand


def test_partition_path_with_nan_falls_back_to_sorting():
    rows = np.random.default_rng(3).random((2, 2048), dtype=np.float32)
    rows[0, 10] = np.nan
    rows[1, 20] = 2.0
    top = top_k_indices(rows, 3)
    assert 10 not in top[0].tolist()
    assert top[1, 0] == 20


def test_apply_classification_replaces_only_requested_outputs():
    scores = np.array([[0.2, 0.8]], dtype=np.float32)
    other = InferTensor("RAW", "FP32", scores)
    response = InferResponse("m", "1", [InferTensor("PROB", "FP32", scores), other])
    requested = [RequestedOutput("PROB", class_count=1), RequestedOutput("RAW")]
    result = apply_classification(response, requested, {"PROB": ["no", "yes"]}, batched=True)
    assert result is response
    assert strings(response.output("PROB")) == [["0.800000:1:yes"]]
    assert response.output("RAW") is other


def test_apply_classification_without_requests_is_a_no_op():
    outputs = [InferTensor("PROB", "FP32", np.ones(2, np.float32))]
    response = InferResponse("m", "1", list(outputs))
    apply_classification(response, [RequestedOutput("PROB")])
    assert response.outputs == outputs
