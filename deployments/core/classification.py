"""Triton's classification extension, transport-neutral.

A requested output with ``class_count`` N > 0 is replaced by a BYTES tensor holding, per batch
row, the N largest elements as ``"<value>:<index>[:<label>]"`` (server ``classification.cc``).
The value is printed as C++ ``std::to_string`` does: ``%f`` (6 decimals) for floating point, a
plain integer for integer outputs. The label is line ``index`` of the output's
``label_filename``; missing or empty labels add no suffix.

Ties: Triton sorts with a non-stable ``std::sort``, so the order of equal values is unspecified
there; here equal values are ranked by ascending index, deterministically. NaN ranks below every
number.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from repo_adapter.errors import InferenceServerError
from repo_adapter.inference_types import InferResponse, InferTensor, RequestedOutput

# Triton refuses to classify rows larger than this (pathological CPU / memory use).
MAX_CLASSIFICATION_ELEMENTS = 1_000_000

_INTEGER_TYPES = frozenset(
    ("UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64")
)
_FLOAT_TYPES = frozenset(("FP32", "FP64"))

# Rows at least this long use argpartition instead of a full sort when few classes are asked.
_PARTITION_MIN_ELEMENTS = 1024


def classify(
    tensor: InferTensor,
    class_count: int,
    labels: Sequence[str] | None = None,
    batched: bool = False,
) -> InferTensor:
    """Replace an output tensor by its top-``class_count`` classification strings.

    Args:
        tensor: the model's output.
        class_count: N, the number of classes requested (> 0).
        labels: class labels by index (the output's label file), or None.
        batched: True when the model batches (``max_batch_size > 0``), so the first dimension is
            the batch and each row is classified separately.

    Returns:
        A BYTES tensor of shape ``[batch, min(N, row elements)]`` when batched, else
        ``[min(N, elements)]``, with the same name and parameters.

    Raises:
        InferenceServerError: INVALID_ARG for unsupported datatypes (BOOL, FP16, BF16, BYTES)
            or rows over :data:`MAX_CLASSIFICATION_ELEMENTS` elements.
    """
    if tensor.datatype not in _INTEGER_TYPES and tensor.datatype not in _FLOAT_TYPES:
        raise InferenceServerError(
            f"class result not available for output due to unsupported type '{tensor.datatype}'"
        )
    data = np.asarray(tensor.data)
    has_batch = batched and data.ndim > 0
    if has_batch:
        # Explicit row length: reshape(batch, -1) is ambiguous for an empty batch.
        rows = data.reshape(data.shape[0], int(np.prod(data.shape[1:], dtype=np.int64)))
    else:
        rows = data.reshape(1, -1)
    if rows.shape[1] > MAX_CLASSIFICATION_ELEMENTS:
        raise InferenceServerError("classification output tensor too large")

    k = min(int(class_count), rows.shape[1])
    indices = top_k_indices(rows, k)
    values = np.take_along_axis(rows, indices, axis=1)
    strings = _format_classes(values, indices, tensor.datatype in _FLOAT_TYPES, labels)
    shape = (rows.shape[0], k) if has_batch else (k,)
    return InferTensor(tensor.name, "BYTES", strings.reshape(shape), dict(tensor.parameters))


def top_k_indices(rows: np.ndarray, k: int) -> np.ndarray:
    """Column indices of the ``k`` largest values of each row, largest first.

    Equal values are ranked by ascending index and NaN ranks last, whichever path is taken.
    """
    n = rows.shape[1]
    if k == 0:
        return np.empty((rows.shape[0], 0), dtype=np.intp)
    key = _ascending_key(rows)
    if n >= _PARTITION_MIN_ELEMENTS and k * 8 <= n and not _has_nan(key):
        return _top_k_partition(key, k)
    return np.argsort(key, axis=1, kind="stable")[:, :k]


def _ascending_key(rows: np.ndarray) -> np.ndarray:
    """An array whose ascending order is ``rows``' descending order, without overflow.

    Bitwise NOT reverses the order of every integer type exactly (no ``-INT_MIN`` overflow,
    unsigned included); negation does it for floats and keeps NaN as NaN, which sorts last.
    """
    if rows.dtype.kind in "iu":
        return np.invert(rows)
    return np.negative(rows, dtype=np.result_type(rows.dtype, np.float32))


def _has_nan(key: np.ndarray) -> bool:
    return key.dtype.kind == "f" and bool(np.isnan(key).any())


def _top_k_partition(key: np.ndarray, k: int) -> np.ndarray:
    """Top-k by partitioning: O(n) per row, then a sort of only the k winners.

    Values strictly better than the k-th are all taken; ties with the k-th are filled in index
    order, which reproduces the full stable sort exactly.
    """
    kth = np.partition(key, k - 1, axis=1)[:, k - 1 : k]
    better = key < kth
    tied = key == kth
    still_needed = k - better.sum(axis=1, keepdims=True)
    chosen = better | (tied & (np.cumsum(tied, axis=1) <= still_needed))
    # np.nonzero walks rows in order and columns ascending, so each row yields k sorted columns.
    columns = np.nonzero(chosen)[1].reshape(key.shape[0], k)
    order = np.argsort(np.take_along_axis(key, columns, axis=1), axis=1, kind="stable")
    return np.take_along_axis(columns, order, axis=1)


def _format_classes(
    values: np.ndarray,
    indices: np.ndarray,
    is_float: bool,
    labels: Sequence[str] | None,
) -> np.ndarray:
    """``"<value>:<index>[:<label>]"`` as a flat object array of UTF-8 ``bytes``."""
    # std::to_string: "%f" for float/double; integers (incl. 8-bit, promoted to int) plainly.
    texts = np.char.mod("%f" if is_float else "%d", values.reshape(-1)).tolist()
    flat_indices = indices.reshape(-1).tolist()
    label_count = len(labels) if labels else 0
    result = np.empty(len(texts), dtype=np.object_)
    result[:] = [
        (
            f"{text}:{index}:{labels[index]}"
            if index < label_count and labels[index]
            else f"{text}:{index}"
        ).encode("utf-8")
        for text, index in zip(texts, flat_indices, strict=True)
    ]
    return result


def apply_classification(
    response: InferResponse,
    requested_outputs: Sequence[RequestedOutput],
    labels: Mapping[str, Sequence[str]] | None = None,
    batched: bool = False,
) -> InferResponse:
    """Classify, in place, every output of ``response`` whose request asked for ``class_count``.

    Args:
        response: the model's response; its classified outputs are replaced.
        requested_outputs: the request's outputs (``InferRequest.outputs``).
        labels: output name -> labels (from ``label_filename``), for outputs that have them.
        batched: whether the model batches (``max_batch_size > 0``).

    Returns:
        ``response``, for chaining.
    """
    class_counts = {out.name: out.class_count for out in requested_outputs if out.class_count > 0}
    if not class_counts:
        return response
    labels = labels or {}
    response.outputs = [
        classify(tensor, class_counts[tensor.name], labels.get(tensor.name), batched)
        if tensor.name in class_counts
        else tensor
        for tensor in response.outputs
    ]
    return response
