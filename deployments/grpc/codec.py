"""Triton's gRPC messages (``inference.GRPCInferenceService``) <-> rayton's neutral types.

Requests decode into :class:`~repo_adapter.inference_types.InferRequest` and responses
encode from :class:`~repo_adapter.inference_types.InferResponse`, as the HTTP codec does for
HTTP bodies. Behaviour and error messages follow Triton's ``src/grpc/infer_handler.cc``:

* Tensor data comes either from ``raw_input_contents`` (what ``tritonclient`` always sends: one
  entry per input, in input order; fixed-size tensors become zero-copy numpy views over it) or
  from the typed ``contents`` fields (``fp32_contents``, ``bytes_contents``, ...). A request that
  uses ``raw_input_contents`` may not also use ``contents``, and must hold exactly one raw entry
  per input (Triton silently ignores surplus entries; rayton refuses them).
* Responses carry every output in ``raw_output_contents``: ``tritonclient``'s ``as_numpy``
  decodes nothing else for fixed-size types.
* Parameters map to Python values through the ``InferParameter`` oneof; the reserved ones
  (``sequence_*``, ``priority``, ``timeout``, ``triton_*``) are type-checked as Triton does.
* Shared memory is not supported: inputs or outputs that name a region fail with NOT_FOUND, as
  an unregistered region does in Triton.

Metadata, config, statistics and repository dicts (the JSON the HTTP frontend serves) become
protobuf messages through ``json_format.ParseDict``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

import grpc
import numpy as np
from google.protobuf import json_format
from tritonclient.grpc import model_config_pb2 as mc
from tritonclient.grpc import service_pb2 as pb

from deployments.core.shared_memory import MappedRegions
from repo_adapter.datatypes import (
    input_from_bytes,
    protocol_to_numpy,
    tensor_from_bytes,
    tensor_to_bytes,
)
from repo_adapter.errors import InferenceServerError, StatusCode
from repo_adapter.inference_types import (
    InferRequest,
    InferResponse,
    InferTensor,
    RequestedOutput,
    SharedMemoryTarget,
)
from repo_adapter.request_validation import log_request
from repo_adapter.response_stream import StreamedResponse

# Request parameters the frontend consumes; models do not see ``triton_*`` ones.
ENABLE_EMPTY_FINAL_RESPONSE = "triton_enable_empty_final_response"
FINAL_RESPONSE = "triton_final_response"
_ALLOWED_TRITON_PARAMETERS = (ENABLE_EMPTY_FINAL_RESPONSE,)
_SHARED_MEMORY_PARAMETERS = frozenset(
    ("shared_memory_region", "shared_memory_offset", "shared_memory_byte_size")
)
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1

# InferTensorContents field -> the datatype its values have (int/uint fields depend on the
# declared datatype: narrower integers travel in 32-bit fields, as in Triton).
_CONTENT_DATATYPES = {
    "bool_contents": "BOOL",
    "int64_contents": "INT64",
    "uint64_contents": "UINT64",
    "fp32_contents": "FP32",
    "fp64_contents": "FP64",
    "bytes_contents": "BYTES",
}
_NARROW_INTS = {
    "int_contents": ("INT8", "INT16"),
    "uint_contents": ("UINT8", "UINT16"),
}
_WIDE_INTS = {"int_contents": "INT32", "uint_contents": "UINT32"}


# --------------------------------------------------------------------------------------------
# Errors


def grpc_status(error: BaseException) -> tuple[grpc.StatusCode, str]:
    """The gRPC status code and details an error is answered with.

    An :class:`InferenceServerError` (also when it arrives wrapped in Ray's ``RayTaskError``)
    keeps its Triton code; Serve's overload and availability errors are UNAVAILABLE; anything
    else is INTERNAL.
    """
    if isinstance(error, InferenceServerError):
        return grpc.StatusCode[error.code.grpc_status_name], error.message
    from ray.serve.exceptions import (
        BackPressureError,
        DeploymentUnavailableError,
        ReplicaUnavailableError,
    )

    if isinstance(error, (BackPressureError, DeploymentUnavailableError, ReplicaUnavailableError)):
        return grpc.StatusCode.UNAVAILABLE, str(error)
    return grpc.StatusCode.INTERNAL, f"{type(error).__name__}: {error}"


def parse_model_version(version: str) -> str:
    """Triton's ``GetModelVersionFromString``: ``""`` (policy default) or a version number.

    Parses like C++ ``std::stol`` (leading blanks, a sign, digits, trailing text ignored) and
    returns the canonical decimal string the model deployments take.
    """
    if not version:
        return ""
    match = re.match(r"[ \t\n\v\f\r]*([+-]?\d+)", version)
    value = int(match.group(1)) if match else None
    if value is None or not _INT64_MIN <= value <= _INT64_MAX:
        raise InferenceServerError(
            f"failed to get model version from specified version string '{version}' "
            "(details: stol), version should be an integral value > 0"
        )
    if value < 0:
        raise InferenceServerError(
            f"invalid model version specified '{version}' , version should be an integral value > 0"
        )
    return str(value)


# --------------------------------------------------------------------------------------------
# Parameters


def parameter_value(parameter: pb.InferParameter) -> Any:
    """The Python value of an ``InferParameter`` (None when no oneof member is set)."""
    kind = parameter.WhichOneof("parameter_choice")
    return None if kind is None else getattr(parameter, kind)


def set_parameter(parameter: pb.InferParameter, value: Any) -> None:
    """Store a Python value in an ``InferParameter`` (bool, int, float, str; else as str)."""
    if isinstance(value, (bool, np.bool_)):
        parameter.bool_param = bool(value)
    elif isinstance(value, (int, np.integer)):
        value = int(value)
        if value > _INT64_MAX:
            parameter.uint64_param = value
        else:
            parameter.int64_param = value
    elif isinstance(value, (float, np.floating)):
        parameter.double_param = float(value)
    elif isinstance(value, bytes):
        parameter.string_param = value.decode("utf-8", "replace")
    else:
        parameter.string_param = str(value)


def _parameters(parameters: Any) -> dict[str, Any]:
    return {key: parameter_value(value) for key, value in parameters.items()}


def _kind(parameters: Any, key: str) -> str | None:
    return parameters[key].WhichOneof("parameter_choice")


# Reserved request parameter -> (accepted oneof members, Triton's complaint otherwise).
_RESERVED_PARAMETERS = {
    "sequence_id": (("int64_param", "string_param"), "int64_param or string_param"),
    "sequence_start": (("bool_param",), "bool_param"),
    "sequence_end": (("bool_param",), "bool_param"),
    "priority": (("int64_param", "uint64_param"), "int64_param or uint64_param"),
    "timeout": (("int64_param",), "int64_param"),
    ENABLE_EMPTY_FINAL_RESPONSE: (("bool_param",), "bool_param"),
}


def _request_parameters(parameters: Any) -> tuple[dict[str, Any], bool]:
    """Request parameters checked as Triton's ``SetInferenceRequestMetadata`` does.

    Returns the parameters for the model (``triton_*`` ones removed) and whether the client
    asked for ``triton_enable_empty_final_response``.
    """
    values: dict[str, Any] = {}
    empty_final = False
    for key in parameters:
        kind = _kind(parameters, key)
        value = parameter_value(parameters[key])
        if key.startswith("triton_") and key not in _ALLOWED_TRITON_PARAMETERS:
            raise InferenceServerError(
                "parameter keys starting with 'triton_' are reserved for Triton usage. Only "
                "the following keys starting with 'triton_' are allowed: "
                + " ".join(_ALLOWED_TRITON_PARAMETERS)
            )
        check = _RESERVED_PARAMETERS.get(key)
        if check is not None:
            accepted, expected = check
            if kind not in accepted:
                raise InferenceServerError(
                    f"invalid value type for '{key}' parameter, expected {expected}."
                )
            if key == "priority" and value < 0:
                raise InferenceServerError("invalid value for 'priority', expected value >= 0.")
        elif kind is None:
            raise InferenceServerError(
                f"invalid value type for '{key}' parameter, expected int64_param, bool_param, "
                "or string_param."
            )
        if key == ENABLE_EMPTY_FINAL_RESPONSE:
            empty_final = bool(value)
        else:
            values[key] = value
    return values, empty_final


# --------------------------------------------------------------------------------------------
# Requests


def decode_infer_request(
    request: pb.ModelInferRequest, regions: MappedRegions | None = None
) -> tuple[InferRequest, bool]:
    """Decode a ``ModelInferRequest``.

    Returns the request and whether it asked for ``triton_enable_empty_final_response``
    (meaningful for ``ModelStreamInfer`` only).

    Raises:
        InferenceServerError: with Triton's code and message for any malformed request.
    """
    model_name = request.model_name
    version = parse_model_version(request.model_version)
    parameters, empty_final = _request_parameters(request.parameters)
    decoded = InferRequest(
        model_name=model_name,
        model_version=version,
        id=request.id,
        parameters=parameters,
        inputs=_decode_inputs(request, regions),
        outputs=_requested_outputs(request, regions),
    )
    return decoded, empty_final


def _decode_inputs(
    request: pb.ModelInferRequest, regions: MappedRegions | None
) -> list[InferTensor]:
    model_name = request.model_name
    raw_contents = request.raw_input_contents
    raw_count = len(raw_contents)
    tensors: list[InferTensor] = []
    names: set[str] = set()
    raw_index = 0
    for tensor in request.inputs:
        name = tensor.name
        if name in names:  # core's AddOriginalInput, with its request-id prefix
            raise InferenceServerError(
                f"{log_request(request.id)}input '{name}' already exists in request"
            )
        names.add(name)
        parameters = _parameters(tensor.parameters)
        shared = "shared_memory_region" in parameters
        if shared and tensor.HasField("contents"):
            raise InferenceServerError(
                "unexpected 'content' provided when using shared memory for input tensor "
                f"'{name}' for model '{model_name}'"
            )
        shape = _input_shape(tensor.shape, name, model_name)
        datatype = tensor.datatype
        try:
            dtype = protocol_to_numpy(datatype)
        except InferenceServerError:
            raise InferenceServerError(
                f"invalid datatype '{datatype}' for input '{name}'"
            ) from None
        if shared:
            location = _shared_memory_location(parameters)
            if regions is None:
                raise _unknown_region(location[0])
            data = regions.read_input(location, datatype, shape, name, model_name, request.id)
        elif tensor.HasField("contents"):
            if raw_count:
                raise InferenceServerError(
                    "contents field must not be specified when using raw_input_contents for "
                    f"'{name}' for model '{model_name}'"
                )
            data = _array_from_contents(tensor.contents, datatype, dtype, shape, name, model_name)
        elif raw_index < raw_count:
            data = input_from_bytes(raw_contents[raw_index], datatype, shape, name, model_name)
            raw_index += 1
        else:
            raise InferenceServerError(
                f"unable to find data for input tensor '{name}' for model '{model_name}' in "
                "request."
            )
        tensor_parameters = {
            k: v for k, v in parameters.items() if k not in _SHARED_MEMORY_PARAMETERS
        }
        tensors.append(InferTensor(name, datatype, data, tensor_parameters))
    if raw_index != raw_count:
        raise InferenceServerError(
            f"raw_input_contents must hold one entry per input: got {raw_count} for the "
            f"{len(tensors)} input(s) of the request for model '{model_name}'"
        )
    return tensors


def _shared_memory_location(parameters: dict[str, Any]) -> tuple[str, int, int]:
    region = parameters["shared_memory_region"]
    offset = parameters.get("shared_memory_offset", 0)
    byte_size = parameters.get("shared_memory_byte_size", 0)
    if not isinstance(region, str):
        raise InferenceServerError("invalid value type for 'shared_memory_region' parameter")
    for key, value in (("shared_memory_offset", offset), ("shared_memory_byte_size", byte_size)):
        if type(value) is not int or value < 0:
            raise InferenceServerError(f"invalid value type for '{key}' parameter")
    return region, offset, byte_size


def _unknown_region(region: Any) -> InferenceServerError:
    return InferenceServerError(
        f"Unable to find shared memory region: '{region}'", StatusCode.NOT_FOUND
    )


def _input_shape(dims: Any, name: str, model_name: str) -> tuple[int, ...]:
    shape = tuple(dims)
    if any(dim < 0 for dim in shape):
        raise InferenceServerError(
            f"invalid shape for input '{name}' for model '{model_name}': "
            f"[{','.join(map(str, shape))}] has a negative dimension"
        )
    return shape


def _array_from_contents(
    contents: pb.InferTensorContents,
    datatype: str,
    dtype: np.dtype,
    shape: tuple[int, ...],
    name: str,
    model_name: str,
) -> np.ndarray:
    """Typed ``contents`` -> array, with ``InferGRPCToInputHelper``'s checks."""
    data: np.ndarray | None = None
    for field, values in contents.ListFields():  # set fields, in declaration order
        content_type = _content_datatype(field.name, datatype)
        if data is not None:
            raise InferenceServerError(
                f"unexpected explicit tensor data for input tensor '{name}' for model "
                f"'{model_name}', binary data was already supplied."
            )
        if content_type != datatype:
            raise InferenceServerError(
                f"unexpected explicit tensor data for input tensor '{name}' for model "
                f"'{model_name}' of type '{content_type}', expected datatype '{datatype}'"
            )
        if datatype == "BYTES":
            data = np.empty(len(values), dtype=np.object_)
            data[:] = list(values)
        elif field.name in _NARROW_INTS:
            # Triton keeps the low bytes of each 32-bit value (little-endian truncation).
            wide = np.int32 if field.name == "int_contents" else np.uint32
            data = np.asarray(values, dtype=wide).astype(dtype)
        else:
            data = np.asarray(values, dtype=dtype)
    if data is None:
        data = np.empty(0, dtype=dtype)
    count = math.prod(shape)
    if data.size != count:
        if datatype == "BYTES":
            raise InferenceServerError(
                f"expected {count} string elements, got {data.size} for input '{name}' for "
                f"model '{model_name}'"
            )
        raise InferenceServerError(
            f"input byte size mismatch for input '{name}' for model '{model_name}'. "
            f"Expected {count * dtype.itemsize}, got {data.size * dtype.itemsize}"
        )
    return data.reshape(shape)


def _content_datatype(field_name: str, datatype: str) -> str:
    if field_name in _NARROW_INTS:
        return datatype if datatype in _NARROW_INTS[field_name] else _WIDE_INTS[field_name]
    return _CONTENT_DATATYPES[field_name]


def _requested_outputs(
    request: pb.ModelInferRequest, regions: MappedRegions | None
) -> list[RequestedOutput]:
    outputs: list[RequestedOutput] = []
    names: set[str] = set()
    for output in request.outputs:
        parameters = _parameters(output.parameters)
        class_count = 0
        if "classification" in parameters:
            if _kind(output.parameters, "classification") != "int64_param":
                raise InferenceServerError(
                    "invalid value type for 'classification' parameter, expected int64_param"
                )
            class_count = parameters.pop("classification")
            if class_count <= 0:
                raise InferenceServerError(
                    "invalid value for 'classification' parameter, expected >= 1"
                )
        target = None
        if "shared_memory_region" in parameters:
            if class_count:
                raise InferenceServerError(
                    "output can't set both 'shared_memory_region' and 'classification'"
                )
            region, offset, byte_size = _shared_memory_location(parameters)
            if regions is None:
                raise _unknown_region(region)
            regions.check(region, offset, byte_size)
            target = SharedMemoryTarget(region, offset, byte_size)
            parameters = {k: v for k, v in parameters.items() if k not in _SHARED_MEMORY_PARAMETERS}
        if output.name in names:  # core keeps requested outputs in a set
            continue
        names.add(output.name)
        outputs.append(
            RequestedOutput(
                name=output.name,
                class_count=class_count,
                parameters=parameters,
                shared_memory=target,
            )
        )
    return outputs


def encode_infer_request(request: InferRequest) -> pb.ModelInferRequest:
    """A ``ModelInferRequest`` carrying ``request`` (inputs in ``raw_input_contents``), as a
    replica forwards a sequence's request to another: :func:`decode_infer_request` gives it
    back. Classification travels as the output's ``classification`` parameter."""
    message = pb.ModelInferRequest(
        model_name=request.model_name, model_version=request.model_version, id=request.id
    )
    for key, value in request.parameters.items():
        set_parameter(message.parameters[key], value)
    raw: list[bytes] = []
    for tensor in request.inputs:
        entry = message.inputs.add(name=tensor.name, datatype=tensor.datatype)
        entry.shape.extend(int(d) for d in tensor.data.shape)
        for key, value in tensor.parameters.items():
            set_parameter(entry.parameters[key], value)
        raw.append(tensor_to_bytes(tensor.data, tensor.datatype))
    message.raw_input_contents.extend(raw)
    for output in request.outputs:
        wanted = message.outputs.add(name=output.name)
        for key, value in output.parameters.items():
            set_parameter(wanted.parameters[key], value)
        if output.class_count:
            wanted.parameters["classification"].int64_param = output.class_count
    return message


# --------------------------------------------------------------------------------------------
# Responses


def encode_infer_response(
    response: InferResponse,
    request_id: str = "",
    final_flag: bool = False,
    *,
    targets: Mapping[str, SharedMemoryTarget] | None = None,
    regions: MappedRegions | None = None,
) -> pb.ModelInferResponse:
    """A ``ModelInferResponse`` with every output's data in ``raw_output_contents``.

    ``final_flag`` adds ``triton_final_response: true`` (streams whose request asked for
    ``triton_enable_empty_final_response``; rayton's responses are always final). An output
    with a shared-memory ``targets`` entry is written into its region of ``regions`` instead
    (its raw contents empty, as Triton sends it).
    """
    message = pb.ModelInferResponse(
        model_name=response.model_name,
        model_version=response.model_version,
        id=response.id or request_id,
    )
    for key, value in response.parameters.items():
        set_parameter(message.parameters[key], value)
    if final_flag:
        message.parameters[FINAL_RESPONSE].bool_param = True
    raw: list[bytes] = []
    for tensor in response.outputs:
        output = message.outputs.add(name=tensor.name, datatype=tensor.datatype)
        output.shape.extend(int(d) for d in tensor.shape)
        target = targets.get(tensor.name) if targets else None
        if target is not None and regions is not None:
            regions.write_output(tensor.name, target, tensor_to_bytes(tensor.data, tensor.datatype))
            raw.append(b"")
            continue
        for key, value in tensor.parameters.items():
            set_parameter(output.parameters[key], value)
        raw.append(tensor_to_bytes(tensor.data, tensor.datatype))
    message.raw_output_contents.extend(raw)
    return message


def decode_infer_response(message: pb.ModelInferResponse) -> InferResponse:
    """Inverse of :func:`encode_infer_response` (tests, and clients written in Python)."""
    outputs = []
    for index, output in enumerate(message.outputs):
        shape = tuple(output.shape)
        buffer = message.raw_output_contents[index]
        data = tensor_from_bytes(buffer, output.datatype, shape)
        outputs.append(
            InferTensor(output.name, output.datatype, data, _parameters(output.parameters))
        )
    return InferResponse(
        model_name=message.model_name,
        model_version=message.model_version,
        outputs=outputs,
        id=message.id,
        parameters=_parameters(message.parameters),
    )


def stream_response(
    response: InferResponse | None = None,
    error: BaseException | None = None,
    request_id: str = "",
    final_flag: bool = False,
    *,
    targets: Mapping[str, SharedMemoryTarget] | None = None,
    regions: MappedRegions | None = None,
) -> pb.ModelStreamInferResponse:
    """One ``ModelStreamInfer`` message: the response, or the error with the request's id
    (``targets``, ``regions``: as :func:`encode_infer_response` takes them)."""
    if error is not None:
        _, message = grpc_status(error)
        return pb.ModelStreamInferResponse(
            error_message=message, infer_response=pb.ModelInferResponse(id=request_id)
        )
    assert response is not None
    try:
        message = encode_infer_response(
            response, request_id, final_flag, targets=targets, regions=regions
        )
    except InferenceServerError as err:  # an output region too small: the message's error
        return stream_response(error=err, request_id=request_id)
    return pb.ModelStreamInferResponse(infer_response=message)


def streamed_response(
    item: StreamedResponse,
    request: pb.ModelInferRequest,
    empty_final: bool,
    decoupled: bool,
    *,
    targets: Mapping[str, SharedMemoryTarget] | None = None,
    regions: MappedRegions | None = None,
) -> pb.ModelStreamInferResponse | None:
    """One response of a stream's request as Triton streams it; None when nothing is sent.

    A decoupled model's responses each carry ``triton_final_response`` (true on the final
    one), and its final flag sent alone becomes an empty response only when the request
    asked for ``triton_enable_empty_final_response`` (naming the model, not its version, as
    Triton does). Another model's one response carries the flag only when asked.
    """
    result, request_id = item.result, request.id
    if isinstance(result, BaseException):
        return stream_response(error=result, request_id=request_id)
    if result is None:
        if not empty_final:
            return None
        message = pb.ModelInferResponse(model_name=request.model_name, id=request_id)
        message.parameters[FINAL_RESPONSE].bool_param = True
        return pb.ModelStreamInferResponse(infer_response=message)
    if not decoupled:
        return stream_response(
            result,
            request_id=request_id,
            final_flag=empty_final,
            targets=targets,
            regions=regions,
        )
    reply = stream_response(result, request_id=request_id, targets=targets, regions=regions)
    if reply.HasField("infer_response") and not reply.error_message:
        reply.infer_response.parameters[FINAL_RESPONSE].bool_param = item.final
    return reply


# --------------------------------------------------------------------------------------------
# JSON documents -> messages


def server_metadata_response(metadata: dict[str, Any]) -> pb.ServerMetadataResponse:
    return json_format.ParseDict(metadata, pb.ServerMetadataResponse())


def model_metadata_response(metadata: dict[str, Any]) -> pb.ModelMetadataResponse:
    return json_format.ParseDict(metadata, pb.ModelMetadataResponse())


def model_config_response(config: dict[str, Any]) -> pb.ModelConfigResponse:
    """``/config`` JSON (int64 as numbers, which ParseDict accepts) as ``ModelConfigResponse``."""
    parsed = json_format.ParseDict(config, mc.ModelConfig(), ignore_unknown_fields=True)
    return pb.ModelConfigResponse(config=parsed)


def statistics_response(entries: list[dict[str, Any]]) -> pb.ModelStatisticsResponse:
    return json_format.ParseDict({"model_stats": entries}, pb.ModelStatisticsResponse())


def repository_index_response(entries: list[dict[str, Any]]) -> pb.RepositoryIndexResponse:
    return json_format.ParseDict({"models": entries}, pb.RepositoryIndexResponse())
