"""Triton's HTTP/REST protocol: body codec (JSON + binary tensor extension) and compression."""

from deployments.http.codec import (
    INFERENCE_HEADER_CONTENT_LENGTH,
    RESERVED_REQUEST_PARAMETERS,
    RawInputSpec,
    SharedMemoryRegions,
    decode_infer_request,
    encode_error,
    encode_infer_response,
    json_response_body,
)

__all__ = [
    "INFERENCE_HEADER_CONTENT_LENGTH",
    "RESERVED_REQUEST_PARAMETERS",
    "RawInputSpec",
    "SharedMemoryRegions",
    "decode_infer_request",
    "encode_error",
    "encode_infer_response",
    "json_response_body",
]
