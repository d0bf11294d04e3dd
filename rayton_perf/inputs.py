"""Input tensors for the load: generated (random|zero) or read from perf_analyzer data.

Data is made once, before any load runs. A *step* is one row of every input (batch 1);
request ``k`` of a batch-``b`` run stacks steps ``k .. k+b-1`` (cyclically), exactly how
perf_analyzer's data manager batches. The resulting InferInput objects are built once per
distinct request and then reused, so no request pays for data generation.

JSON format (perf_analyzer's ``--input-data <file>``)::

    {"data": [
        {"IN": [1, 2, 3, 4]},                                  # flat (or nested) values
        {"IN": {"content": [[1, 2], [3, 4]], "shape": [2, 2]}}, # with an explicit shape
        {"IN": {"b64": "AACAPwAAAEA="}}                         # raw little-endian bytes
    ]}

``data`` may also hold lists of steps (one list per stream); their steps are used in order.

Directory format (perf_analyzer's ``--input-data <dir>``): one file per model input, named
exactly after it, read as a single batch-1 step (see :func:`load_directory_data`).
"""

from __future__ import annotations

import base64
import json
import math
import string
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rayton_perf.config import PerfError
from rayton_perf.server_stats import ModelInfo, TensorMeta
from repo_adapter.datatypes import flatten_nested, protocol_to_numpy
from repo_adapter.errors import InferenceServerError

# Most distinct requests prepared up front; a data file with more steps is cycled through
# these many combinations (enough to defeat a response cache, small enough for memory).
MAX_PREPARED_REQUESTS = 1024
_RANDOM_INT_HIGH = 100  # keep generated integers small: they are often indices or lengths


@dataclass
class InputSpec:
    """An input the load sends, with its final per-row dims (no -1 left)."""

    name: str
    datatype: str
    dims: list[int]


def numpy_dtype(datatype: str) -> Any:
    """numpy dtype used to hold a Triton datatype."""
    try:
        # BF16 travels as FP32 arrays: tritonclient truncates them on the wire.
        return np.dtype(np.float32) if datatype == "BF16" else protocol_to_numpy(datatype)
    except InferenceServerError:
        raise PerfError(f"unsupported datatype {datatype!r}") from None


def resolve_specs(
    model: ModelInfo,
    batch_size: int,
    shapes: dict[str, list[int]],
    provided: set[str] | None = None,
) -> list[InputSpec]:
    """Decide the per-row dims of every input, as perf_analyzer does.

    ``--shape`` overrides the metadata dims (it must agree with the fixed ones); any -1
    left is an error, unless ``provided`` (inputs whose data file carries a shape) lists it.

    Args:
        model: discovered model.
        batch_size: ``-b``; > 1 needs a batching model.
        shapes: ``--shape`` values.
        provided: inputs with a shape given by the data file; their dims may stay variable.

    Raises:
        PerfError: bad batch size, unknown ``--shape`` name, conflicting or missing dims.
    """
    if batch_size > 1 and not model.batching:
        raise PerfError("can not specify batch size > 1 as the model does not support batching")
    if model.batching and batch_size > model.max_batch_size:
        raise PerfError(
            f"batch size {batch_size} exceeds the model's max_batch_size {model.max_batch_size}"
        )
    names = {t.name for t in model.inputs}
    unknown = sorted(set(shapes) - names)
    if unknown:
        raise PerfError(f"--shape names unknown inputs: {', '.join(unknown)}")
    specs = []
    for tensor in model.inputs:
        dims = list(tensor.dims)
        if tensor.name in shapes:
            dims = _apply_shape(tensor, shapes[tensor.name])
        if any(d < 0 for d in dims) and tensor.name not in (provided or set()):
            raise PerfError(
                f"input {tensor.name} contains dynamic shape, provide shapes to send along "
                "with the request (--shape NAME:d1,d2,...)"
            )
        specs.append(InputSpec(tensor.name, tensor.datatype, dims))
    return specs


def _apply_shape(tensor: TensorMeta, shape: list[int]) -> list[int]:
    if len(shape) != len(tensor.dims) or any(
        want >= 0 and want != got for want, got in zip(tensor.dims, shape, strict=True)
    ):
        raise PerfError(
            f"--shape {tensor.name}:{','.join(map(str, shape))} does not match the model's "
            f"dims {tensor.dims}"
        )
    return list(shape)


# ---------------------------------------------------------------------------------------------
# Generated data


def generate_step(
    specs: list[InputSpec],
    mode: str,
    rng: np.random.Generator,
    string_length: int = 128,
    string_data: str | None = None,
) -> dict[str, np.ndarray]:
    """One row of every input: ``random`` values or ``zero`` values.

    Random values are valid for their type (floats in [0, 1), small non-negative integers,
    printable strings) rather than raw random bytes, so models that index or decode their
    inputs still run.
    """
    if mode not in ("random", "zero"):
        raise PerfError(f"unknown input data mode {mode!r}")
    return {
        spec.name: _generate(spec, mode == "random", rng, string_length, string_data)
        for spec in specs
    }


def _generate(
    spec: InputSpec,
    random: bool,
    rng: np.random.Generator,
    string_length: int,
    string_data: str | None,
) -> np.ndarray:
    dtype = numpy_dtype(spec.datatype)
    shape = tuple(spec.dims)
    count = math.prod(shape)
    if spec.datatype == "BYTES":
        if string_data is not None:
            values = [string_data.encode()] * count
        elif random:
            alphabet = np.frombuffer((string.ascii_letters + string.digits).encode(), np.uint8)
            chars = rng.choice(alphabet, size=(count, string_length))
            values = [row.tobytes() for row in chars]
        else:
            values = [b"0" * string_length] * count
        return np.array(values, dtype=np.object_).reshape(shape)
    if not random:
        return np.zeros(shape, dtype=dtype)
    if spec.datatype == "BOOL":
        return rng.integers(0, 2, size=shape).astype(np.bool_)
    if np.issubdtype(dtype, np.integer):
        return rng.integers(0, _RANDOM_INT_HIGH, size=shape).astype(dtype)
    return rng.random(size=shape).astype(dtype)


# ---------------------------------------------------------------------------------------------
# JSON data files


RawStep = dict[str, tuple[np.ndarray, list[int] | None]]


def load_json_data(source: str | Path | dict[str, Any], model: ModelInfo) -> list[RawStep]:
    """Read perf_analyzer's JSON input format into steps of ``{name: (values, shape)}``.

    Args:
        source: path of the file or the already-parsed JSON object.
        model: the model, to check tensor names and datatypes.

    Returns:
        One dict per step mapping an input name to its flat values (numpy, already in the
        input's dtype) and the row shape the file gave, or None; :func:`shape_steps`
        applies the shapes.

    Raises:
        PerfError: unreadable file, missing ``data``, unknown or missing inputs, bad values.
    """
    if isinstance(source, dict):
        document = source
    else:
        try:
            document = json.loads(Path(source).read_text())
        except (OSError, ValueError) as err:
            raise PerfError(f"cannot read input data file {source}: {err}") from None
    if not isinstance(document, dict) or "data" not in document:
        raise PerfError("The json file doesn't contain data field")
    if "validation_data" in document:
        # perf_analyzer checks every response against it; reading past it would report a
        # run as validated when nothing was compared.
        raise PerfError(
            "the 'validation_data' field holds expected outputs, which perf_analyzer checks "
            "responses against; rayton perf does not validate outputs (remove the field)"
        )
    data = document["data"]
    if not isinstance(data, list) or not data:
        raise PerfError("the 'data' field must be a non-empty list")
    raw_steps: list[Any] = []
    for entry in data:
        # A list entry is a stream of steps (sequence models); flatten streams in order.
        raw_steps.extend(entry if isinstance(entry, list) else [entry])
    tensors = {t.name: t for t in model.inputs}
    steps = []
    for index, raw in enumerate(raw_steps):
        if not isinstance(raw, dict):
            raise PerfError(f"Input data file is malformed (step {index} is not an object)")
        unknown = sorted(set(raw) - set(tensors))
        if unknown:
            raise PerfError(
                f"The input or output '{unknown[0]}' is not found in the model configuration"
            )
        step = {}
        for name, tensor in tensors.items():
            if name not in raw:
                if not tensor.optional:
                    raise PerfError(f"missing tensor {name} ( step id: {index})")
                continue
            step[name] = _read_tensor(raw[name], tensor, index)
        steps.append(step)
    return steps


def _read_tensor(value: Any, tensor: TensorMeta, step: int) -> tuple[np.ndarray, list[int] | None]:
    """Decode one tensor entry into (flat values, shape from the file or None)."""
    where = f"( input {tensor.name}, step id: {step})"
    shape = None
    content = value
    if isinstance(value, dict):
        if "shape" in value:
            shape = value["shape"]
            if not isinstance(shape, list) or not all(
                isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape
            ):
                raise PerfError(f"shape values must be non-negative integers {where}")
        if "b64" in value:
            content = value
        elif "content" in value:
            content = value["content"]
        else:
            raise PerfError(f"missing content field. {where}")
    elif not isinstance(value, list):
        raise PerfError(f"Input data file is malformed. {where}")

    if isinstance(content, dict):
        if not isinstance(content.get("b64"), str):
            raise PerfError(f"the value of b64 field should be of type string {where}")
        try:
            raw = base64.b64decode(content["b64"], validate=True)
        except ValueError:
            raise PerfError(f"invalid base64 data {where}") from None
        return _from_bytes(raw, tensor, where), shape
    if not isinstance(content, list):
        raise PerfError(f"The tensor values are not supported. {where}")
    return _from_list(content, tensor, where), shape


def _from_list(values: list, tensor: TensorMeta, where: str) -> np.ndarray:
    flat = flatten_nested(values)
    if tensor.datatype == "BYTES":
        if not all(isinstance(v, str) for v in flat):
            raise PerfError(f"BYTES values must be strings {where}")
        return np.array([v.encode() for v in flat], dtype=np.object_)
    if tensor.datatype == "BOOL":
        if not all(isinstance(v, bool) for v in flat):
            raise PerfError(f"BOOL values must be true/false {where}")
        return np.array(flat, dtype=np.bool_)
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in flat):
        raise PerfError(f"{tensor.datatype} values must be numbers {where}")
    try:
        return np.array(flat, dtype=numpy_dtype(tensor.datatype))
    except (OverflowError, ValueError) as err:
        raise PerfError(f"bad {tensor.datatype} value {where}: {err}") from None


def _from_bytes(raw: bytes, tensor: TensorMeta, where: str) -> np.ndarray:
    if tensor.datatype == "BYTES":
        from tritonclient.utils import deserialize_bytes_tensor

        try:
            return deserialize_bytes_tensor(raw)
        except Exception:
            raise PerfError(f"b64 BYTES data is not length-prefixed strings {where}") from None
    if tensor.datatype == "BF16":
        if len(raw) % 2:
            raise PerfError(f"b64 data size is not a multiple of 2 {where}")
        # BF16 is the top half of an FP32: widen it so tritonclient can truncate it back.
        halves = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
        return halves.view(np.float32)
    dtype = np.dtype(numpy_dtype(tensor.datatype)).newbyteorder("<")
    if len(raw) % dtype.itemsize:
        raise PerfError(f"b64 data size is not a multiple of {dtype.itemsize} {where}")
    return np.frombuffer(raw, dtype=dtype).astype(dtype.newbyteorder("="))


def shape_steps(raw_steps: list[RawStep], specs: list[InputSpec]) -> list[dict[str, np.ndarray]]:
    """Give every step's values their row shape: the file's ``shape`` or the spec's dims.

    Raises:
        PerfError: element count does not match the shape, or dims are still variable.
    """
    by_name = {s.name: s for s in specs}
    steps = []
    for index, raw in enumerate(raw_steps):
        step = {}
        for name, (values, shape) in raw.items():
            dims = shape if shape is not None else by_name[name].dims
            if any(d < 0 for d in dims):
                raise PerfError(
                    f"input {name} contains dynamic shape, provide shapes to send along with "
                    'the request (--shape or "shape" in the data file)'
                )
            if values.size != math.prod(dims):
                raise PerfError(
                    f"input {name} step {index}: {values.size} values do not fit shape {dims}"
                )
            step[name] = values.reshape(dims)
        steps.append(step)
    return steps


# ---------------------------------------------------------------------------------------------
# Data directories


def wire_itemsize(datatype: str) -> int:
    """Bytes per element as sent (BF16 is held as FP32 here but travels as 2 bytes)."""
    return 2 if datatype == "BF16" else np.dtype(numpy_dtype(datatype)).itemsize


def load_directory_data(
    directory: str | Path, model: ModelInfo, specs: list[InputSpec]
) -> dict[str, np.ndarray]:
    """Read perf_analyzer's directory form of ``--input-data`` into one step.

    As perf_analyzer's ``ReadDataFromDir``: the directory is a single batch-1 step. A
    non-BYTES file holds the raw row-major (little-endian) bytes of one row, i.e. of the
    input's dims with ``--shape`` applied and no batch dimension; a BYTES file holds one
    element per line (split at ``\\n`` only, like ``std::getline``). ``-b N`` repeats the
    row N times in every request, again as perf_analyzer does. Every input needs its file,
    optional ones included, because perf_analyzer opens one per input.

    Args:
        directory: the data directory.
        model: the model, to check the file names.
        specs: resolved inputs (:func:`resolve_specs`), giving each row's dims.

    Returns:
        Input name to an array of the row's dims.

    Raises:
        PerfError: a file that names no input, a file for an output (validation data), a
            missing or empty file, or a size that does not match the row's dims.
    """
    directory = Path(directory)
    _check_directory_names(directory, model)
    return {spec.name: _read_input_file(directory / spec.name, spec) for spec in specs}


def _check_directory_names(directory: Path, model: ModelInfo) -> None:
    """perf_analyzer's ``ValidateIOExistsInModel``: every file must name a model tensor."""
    try:
        names = sorted(entry.name for entry in directory.iterdir())
    except OSError as err:
        raise PerfError(f"cannot read input data directory {directory}: {err}") from None
    inputs = {t.name for t in model.inputs}
    outputs = {t.name for t in model.outputs}
    for name in names:
        if name in outputs and name not in inputs:
            # perf_analyzer compares responses with such a file; accepting it unchecked
            # would let a run look validated.
            raise PerfError(
                f"data file '{name}' holds expected data for output '{name}', which "
                "perf_analyzer checks responses against; rayton perf does not validate "
                "outputs (move the file out of the directory)"
            )
        if name not in inputs:
            raise PerfError(
                f"Provided data file '{name}' does not correspond to a valid model input or output."
            )


def _read_input_file(path: Path, spec: InputSpec) -> np.ndarray:
    """One input's file as an array of the row's dims (perf_analyzer's size checks)."""
    try:
        raw = path.read_bytes()
    except OSError:
        raise PerfError(
            f"failed to open file '{path}' (a data directory needs one file per model input, "
            "named exactly after it)"
        ) from None
    if not raw:
        raise PerfError(f"file '{path}' is empty")
    count = math.prod(spec.dims)
    if spec.datatype == "BYTES":
        lines = raw.split(b"\n")
        if raw.endswith(b"\n"):
            lines.pop()  # a final newline ends the last line; it starts no new element
        if len(lines) != count:
            raise PerfError(
                f"provided data for input {spec.name} has {len(lines)} elements, expect {count}"
            )
        return np.array(lines, dtype=np.object_).reshape(spec.dims)
    expected = count * wire_itemsize(spec.datatype)
    if len(raw) != expected:
        raise PerfError(
            f"provided data for input {spec.name} has byte size {len(raw)}, expect {expected}"
        )
    tensor = TensorMeta(spec.name, spec.datatype, spec.dims)
    return _from_bytes(raw, tensor, f"( input {spec.name}, file {path})").reshape(spec.dims)


# ---------------------------------------------------------------------------------------------
# Requests


def batch_requests(
    steps: list[dict[str, np.ndarray]], batch_size: int, batching: bool
) -> list[dict[str, np.ndarray]]:
    """The distinct request tensors: request ``k`` stacks steps ``k .. k+b-1`` (mod n).

    Returns at most ``max(len(steps), 1)`` requests (capped at
    :data:`MAX_PREPARED_REQUESTS`); the load cycles through them.

    Raises:
        PerfError: rows of one request have different shapes.
    """
    count = min(len(steps), MAX_PREPARED_REQUESTS)
    requests = []
    for first in range(count):
        rows = [steps[(first + i) % len(steps)] for i in range(batch_size)]
        request = {}
        for name in rows[0]:
            arrays = [row[name] for row in rows if name in row]
            if len(arrays) != len(rows):
                raise PerfError(f"optional input {name} is missing from some batched steps")
            if any(a.shape != arrays[0].shape for a in arrays):
                raise PerfError(
                    f"can not batch tensors with different shapes together (input '{name}')"
                )
            request[name] = np.stack(arrays) if batching else arrays[0]
        requests.append(request)
    return requests


def prepare_requests(
    model: ModelInfo,
    batch_size: int,
    shapes: dict[str, list[int]],
    input_data: str,
    string_length: int = 128,
    string_data: str | None = None,
    seed: int = 0,
) -> list[dict[str, np.ndarray]]:
    """All distinct request tensors for a run, from generated data or a data file.

    Args:
        model: discovered model.
        batch_size: rows per request.
        shapes: ``--shape`` overrides.
        input_data: ``random``, ``zero``, a JSON file path or a data directory.
        string_length: length of generated BYTES elements.
        string_data: fixed value for generated BYTES elements.
        seed: random seed, so a run's data is reproducible.

    Returns:
        Arrays per request, keyed by input name, with the batch dim when the model batches.
    """
    rng = np.random.default_rng(seed)
    if input_data in ("random", "zero"):
        specs = resolve_specs(model, batch_size, shapes)
        # perf_analyzer generates one buffer per input; each row of a batch gets its own.
        steps = [
            generate_step(specs, input_data, rng, string_length, string_data)
            for _ in range(batch_size)
        ]
        return batch_requests(steps, batch_size, model.batching)[:1]
    path = Path(input_data)
    if path.is_dir():
        specs = resolve_specs(model, batch_size, shapes)
        step = load_directory_data(path, model, specs)
        # One step: every row of a batch repeats it, as perf_analyzer's data manager does.
        return batch_requests([step], batch_size, model.batching)
    if not path.is_file():
        raise PerfError(
            f"--input-data {input_data!r} is neither random, zero, a directory nor an existing "
            "JSON file"
        )
    raw_steps = load_json_data(path, model)
    with_shape = {name for step in raw_steps for name, (_, s) in step.items() if s is not None}
    specs = resolve_specs(model, batch_size, shapes, provided=with_shape)
    return batch_requests(shape_steps(raw_steps, specs), batch_size, model.batching)
