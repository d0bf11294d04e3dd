"""Triton/KServe-v2 HTTP inference bodies: decode requests, encode responses and errors.

Requests are decoded into :class:`~repo_adapter.inference_types.InferRequest` and responses encoded
from :class:`~repo_adapter.inference_types.InferResponse`; nothing else in the project sees JSON or
HTTP bodies. Behaviour and error messages follow Triton's ``http_server.cc``:

* The body is a JSON header optionally followed by binary tensor data (binary tensor
  extension). ``Inference-Header-Content-Length`` gives the JSON length; without it the whole
  body is JSON; ``0`` means the whole body is the raw data of the model's single input.
* Binary input data is not copied: fixed-size tensors are numpy views over the request body
  (over the inflated body when compressed; read-only when the body is ``bytes``).
* An output is returned binary when its requested output says ``binary_data: true``. Outputs
  the client did not list (possible only when it listed none) follow the request parameter
  ``binary_data_output``. A listed output without ``binary_data`` is JSON, as in Triton, even
  when ``binary_data_output`` is true.
* Error status codes follow Triton, except that client mistakes Triton reports as INTERNAL
  (malformed request JSON, a JSON ``data`` element count not matching ``shape``) are
  INVALID_ARG here (listed in ``tests/conformance/allowlist.py``).

JSON goes through ``orjson`` when it is installed and the standard library otherwise; both
produce the same documents (non-finite floats as ``NaN``/``Infinity`` like Triton's writer, and
BYTES that are not UTF-8 written back verbatim, as Triton does).
"""

from deployments.http.request_decoding import decode_infer_request
from deployments.http.response_encoding import encode_error, encode_infer_response
from deployments.http.wire import (
    INFERENCE_HEADER_CONTENT_LENGTH,
    RawInputSpec,
    json_dumps,
    json_loads,
)

__all__ = [
    "INFERENCE_HEADER_CONTENT_LENGTH",
    "RawInputSpec",
    "decode_infer_request",
    "encode_error",
    "encode_infer_response",
    "json_dumps",
    "json_loads",
]
