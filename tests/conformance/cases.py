"""The request sequence both servers receive, in order, over the conformance repository.

Statistics cases come last and compare exact counts: they see every request sent before them,
so adding or reordering cases changes the expected counts on *both* servers alike. Keep
requests sequential (no concurrency): dynamic batching then never combines requests and the
counts are deterministic.
"""

from __future__ import annotations

import gzip
import json
import re
import urllib.request
from typing import Any

import numpy as np

from tests.conformance.driver import CaseRegistry, OutputSpec, Target, TensorSpec

REGISTRY = CaseRegistry()
case = REGISTRY.case

MODELS = ("batched", "dtypes", "pipeline", "raises", "request_error", "versioned")

# dtypes model: protocol datatype -> (config suffix, sample data). FP16 has no JSON form.
DTYPE_SAMPLES: dict[str, tuple[str, np.ndarray]] = {
    "BOOL": ("BOOL", np.array([True, False, True])),
    "INT8": ("INT8", np.array([-128, 0, 127], np.int8)),
    "INT16": ("INT16", np.array([-32768, 1, 32767], np.int16)),
    "INT32": ("INT32", np.array([-(2**31), 2, 2**31 - 1], np.int32)),
    "INT64": ("INT64", np.array([-(2**63), 3, 2**63 - 1], np.int64)),
    "UINT8": ("UINT8", np.array([0, 1, 255], np.uint8)),
    "UINT16": ("UINT16", np.array([0, 2, 65535], np.uint16)),
    "UINT32": ("UINT32", np.array([0, 3, 2**32 - 1], np.uint32)),
    "UINT64": ("UINT64", np.array([0, 4, 2**64 - 1], np.uint64)),
    "FP16": ("FP16", np.array([-1.5, 0.0, 65504.0], np.float16)),
    "FP32": ("FP32", np.array([-1.25, 0.5, 3.0e38], np.float32)),
    "FP64": ("FP64", np.array([-2.5, 1e-300, 1e300], np.float64)),
    "BYTES": ("STRING", np.array([b"hello", b"", "\u00fc\u00f1\u00ee".encode()], np.object_)),
}


def dtype_inputs(json_inputs: bool = False) -> list[TensorSpec]:
    """Every input of ``dtypes``; FP16 is always binary (it cannot travel as JSON)."""
    return [
        TensorSpec(f"IN_{suffix}", data, datatype, binary=not json_inputs or datatype == "FP16")
        for datatype, (suffix, data) in DTYPE_SAMPLES.items()
    ]


def fp32(*values: float, rows: int | None = None) -> np.ndarray:
    array = np.array(values, np.float32)
    return array if rows is None else array.reshape(rows, -1)


def infer_body(inputs: list[dict[str, Any]], outputs: list[dict] | None = None, **extra) -> dict:
    body: dict[str, Any] = {"inputs": inputs, **extra}
    if outputs is not None:
        body["outputs"] = outputs
    return body


def json_input(name: str, shape: list[int], datatype: str, data: list) -> dict[str, Any]:
    return {"name": name, "shape": shape, "datatype": datatype, "data": data}


GOOD_VERSIONED = [json_input("IN", [3], "FP32", [1, 2, 3])]


# --------------------------------------------------------------------------------- health


@case("server_live", "health", "GET /v2/health/live", raw=True)
def _(t: Target) -> Any:
    return t.raw("GET", "/v2/health/live")


@case("server_ready", "health", "GET /v2/health/ready with every model loaded", raw=True)
def _(t: Target) -> Any:
    return t.raw("GET", "/v2/health/ready")


@case("health_wrong_method", "health", "POST on a GET-only health route", raw=True)
def _(t: Target) -> Any:
    return t.raw("POST", "/v2/health/live", b"")


@case("unknown_route", "health", "GET on a path outside the protocol", raw=True)
def _(t: Target) -> Any:
    return t.raw("GET", "/v2/no/such/route")


@case("client_health", "health", "client is_server_live / is_server_ready / is_model_ready")
def _(t: Target) -> Any:
    c = t.client
    return {
        "live": c.server_live(),
        "ready": c.server_ready(),
        "models": {m: c.model_ready(m) for m in MODELS},
        "versioned/1": c.model_ready("versioned", "1"),
        "versioned/2": c.model_ready("versioned", "2"),
        "versioned/3": c.model_ready("versioned", "3"),
        "unknown": c.model_ready("no_such_model"),
    }


# --------------------------------------------------------------------------------- metadata


@case("server_metadata", "metadata", "GET /v2: name, version, extensions", raw=True)
def _(t: Target) -> Any:
    return t.raw("GET", "/v2")


for _model in MODELS:
    REGISTRY.add(
        f"model_metadata[{_model}]",
        "metadata",
        f"GET /v2/models/{_model}",
        lambda t, m=_model: t.raw("GET", f"/v2/models/{m}"),
        raw=True,
    )

for _version in ("1", "2", "3"):
    REGISTRY.add(
        f"model_metadata[versioned/{_version}]",
        "metadata",
        f"GET /v2/models/versioned/versions/{_version}"
        + (" (a version not on disk)" if _version == "3" else ""),
        lambda t, v=_version: t.raw("GET", f"/v2/models/versioned/versions/{v}"),
        raw=True,
    )


@case("model_metadata[unknown]", "metadata", "GET /v2/models/<unknown model>", raw=True)
def _(t: Target) -> Any:
    return t.raw("GET", "/v2/models/no_such_model")


@case("client_metadata", "metadata", "client get_model_metadata for every model")
def _(t: Target) -> Any:
    return {m: t.client.model_metadata(m) for m in (*MODELS, "no_such_model")}


for _model in MODELS:
    REGISTRY.add(
        f"model_ready[{_model}]",
        "health",
        f"GET /v2/models/{_model}/ready",
        lambda t, m=_model: t.raw("GET", f"/v2/models/{m}/ready"),
        raw=True,
    )


@case("model_ready[versioned/1]", "health", "GET /v2/models/versioned/versions/1/ready", raw=True)
def _(t: Target) -> Any:
    return t.raw("GET", "/v2/models/versioned/versions/1/ready")


@case(
    "model_ready[versioned/3]",
    "health",
    "GET /v2/models/versioned/versions/3/ready (a version not on disk)",
    raw=True,
)
def _(t: Target) -> Any:
    return t.raw("GET", "/v2/models/versioned/versions/3/ready")


@case("model_ready[unknown]", "health", "GET /v2/models/<unknown model>/ready", raw=True)
def _(t: Target) -> Any:
    return t.raw("GET", "/v2/models/no_such_model/ready")


@case(
    "model_ready[unknown/9]",
    "health",
    "GET /v2/models/<unknown model>/versions/9/ready",
    raw=True,
)
def _(t: Target) -> Any:
    return t.raw("GET", "/v2/models/no_such_model/versions/9/ready")


# --------------------------------------------------------------------------------- odd paths


@case("odd_path[/v2/]", "paths", "GET /v2/ (a trailing slash)", raw=True)
def _(t: Target) -> Any:
    return t.raw("GET", "/v2/")


@case("odd_path[model/]", "paths", "GET /v2/models/batched/ (a trailing slash)", raw=True)
def _(t: Target) -> Any:
    return t.raw("GET", "/v2/models/batched/")


@case("odd_path[model/ready/]", "paths", "GET /v2/models/batched/ready/", raw=True)
def _(t: Target) -> Any:
    return t.raw("GET", "/v2/models/batched/ready/")


@case("odd_path[unknown/action]", "paths", "POST /v2/models/<unknown>/<action>", raw=True)
def _(t: Target) -> Any:
    return t.raw("POST", "/v2/models/no_such_model/frobnicate", b"{}")


@case("odd_path[model/action]", "paths", "POST /v2/models/batched/<unknown action>", raw=True)
def _(t: Target) -> Any:
    return t.raw("POST", "/v2/models/batched/frobnicate", b"{}")


# --------------------------------------------------------------------------------- config

for _model in MODELS:
    REGISTRY.add(
        f"model_config[{_model}]",
        "config",
        f"GET /v2/models/{_model}/config: every key and value",
        lambda t, m=_model: t.raw("GET", f"/v2/models/{m}/config"),
        raw=True,
    )


@case("model_config[versioned/1]", "config", "GET /v2/models/versioned/versions/1/config", raw=True)
def _(t: Target) -> Any:
    return t.raw("GET", "/v2/models/versioned/versions/1/config")


@case("model_config[unknown]", "config", "GET /v2/models/<unknown model>/config", raw=True)
def _(t: Target) -> Any:
    return t.raw("GET", "/v2/models/no_such_model/config")


@case("client_config", "config", "client get_model_config for every model")
def _(t: Target) -> Any:
    return {m: t.client.model_config(m) for m in MODELS}


# --------------------------------------------------------------------------------- repository


@case("repository_index", "repository", "POST /v2/repository/index", raw=True)
def _(t: Target) -> Any:
    return t.raw("POST", "/v2/repository/index", {})


@case("repository_index_ready", "repository", 'POST /v2/repository/index {"ready": true}', raw=True)
def _(t: Target) -> Any:
    return t.raw("POST", "/v2/repository/index", {"ready": True})


@case("repository_load_refused", "repository", "model load in model-control-mode none", raw=True)
def _(t: Target) -> Any:
    return t.raw("POST", "/v2/repository/models/batched/load", {})


@case(
    "repository_unload_refused", "repository", "model unload in model-control-mode none", raw=True
)
def _(t: Target) -> Any:
    return t.raw("POST", "/v2/repository/models/batched/unload", {})


# --------------------------------------------------------------------------------- inference


@case("infer_dtypes_binary", "infer", "all 13 datatypes, binary tensors both ways")
def _(t: Target) -> Any:
    return t.client.infer("dtypes", dtype_inputs())


@case("infer_dtypes_json", "infer", "all datatypes as JSON (FP16 binary: it has no JSON form)")
def _(t: Target) -> Any:
    outputs = [
        OutputSpec(f"OUT_{suffix}", binary=datatype == "FP16")
        for datatype, (suffix, _) in DTYPE_SAMPLES.items()
    ]
    return t.client.infer("dtypes", dtype_inputs(json_inputs=True), outputs)


@case("infer_dtypes_subset", "infer", "two requested outputs out of 13, mixed binary/JSON")
def _(t: Target) -> Any:
    outputs = [OutputSpec("OUT_STRING", binary=False), OutputSpec("OUT_INT8")]
    return t.client.infer("dtypes", dtype_inputs(), outputs)


@case("infer_fp16_json_output", "infer", "an FP16 output requested as JSON is refused")
def _(t: Target) -> Any:
    return t.client.infer("dtypes", dtype_inputs(), [OutputSpec("OUT_FP16", binary=False)])


@case("infer_fp16_json_input", "errors", "FP16 input data sent as JSON is refused", raw=True)
def _(t: Target) -> Any:
    return t.raw(
        "POST", "/v2/models/dtypes/infer", infer_body([json_input("IN_FP16", [1], "FP16", [1])])
    )


@case("infer_batched", "infer", "dynamic-batching model, 3 rows, optional input absent")
def _(t: Target) -> Any:
    data = fp32(*range(12), rows=3)
    return t.client.infer("batched", [TensorSpec("INPUT0", data, "FP32")])


@case("infer_batched_optional_reshape", "infer", "optional input given; its reshape [1] -> []")
def _(t: Target) -> Any:
    data = fp32(1, 5, 2, 0, 7, 1, 1, 1, rows=2)
    bias = fp32(10, -10, rows=2)
    return t.client.infer(
        "batched", [TensorSpec("INPUT0", data, "FP32"), TensorSpec("BIAS", bias, "FP32")]
    )


@case("infer_request_id", "infer", "the request id comes back in the response")
def _(t: Target) -> Any:
    return t.client.infer("versioned", [TensorSpec("IN", fp32(1), "FP32")], request_id="req-42")


@case("infer_custom_parameters", "infer", "custom request parameters are accepted")
def _(t: Target) -> Any:
    return t.client.infer(
        "versioned",
        [TensorSpec("IN", fp32(1), "FP32")],
        parameters={"custom_str": "x", "custom_int": 3, "custom_bool": True},
    )


for _version in ("", "1", "2", "3"):
    REGISTRY.add(
        f"infer_versioned[{_version or 'default'}]",
        "infer",
        "versioned model, "
        + (f"version {_version}" if _version else "no version (policy picks the latest)")
        + (" (not on disk)" if _version == "3" else ""),
        lambda t, v=_version: t.client.infer(
            "versioned", [TensorSpec("IN", fp32(1, 2), "FP32")], version=v
        ),
    )


@case("infer_ensemble", "infer", "two-step ensemble: (IN + 1) * 2")
def _(t: Target) -> Any:
    return t.client.infer("pipeline", [TensorSpec("IN", fp32(0, 1, 2), "FP32")])


@case("infer_ensemble_member_error", "errors", "a member's per-request error through an ensemble")
def _(t: Target) -> Any:
    return t.client.infer("pipeline", [TensorSpec("IN", fp32(-5), "FP32")])


@case("infer_execute_raises", "errors", "execute() raises: INTERNAL with the exception")
def _(t: Target) -> Any:
    return t.client.infer("raises", [TensorSpec("IN", fp32(1, rows=1), "FP32")])


@case("infer_request_error_not_found", "errors", "per-request TritonError NOT_FOUND")
def _(t: Target) -> Any:
    return t.client.infer("request_error", [TensorSpec("IN", fp32(-1), "FP32")])


@case("infer_request_error_invalid_arg", "errors", "per-request TritonError INVALID_ARG")
def _(t: Target) -> Any:
    return t.client.infer("request_error", [TensorSpec("IN", fp32(float("nan")), "FP32")])


@case("infer_request_error_ok", "infer", "the per-request-error model answering normally")
def _(t: Target) -> Any:
    return t.client.infer("request_error", [TensorSpec("IN", fp32(1, 2), "FP32")])


@case("infer_raw_json", "infer", "hand-written JSON request and response", raw=True)
def _(t: Target) -> Any:
    return t.raw("POST", "/v2/models/versioned/infer", infer_body(GOOD_VERSIONED, id="7"))


@case("infer_raw_binary_body", "infer", "Inference-Header-Content-Length: 0 raw body", raw=True)
def _(t: Target) -> Any:
    body = fp32(1, 2, 3, 4).tobytes()
    headers = {"Inference-Header-Content-Length": "0"}
    return t.raw("POST", "/v2/models/versioned/infer", body, headers)


@case("infer_gzip", "infer", "gzip request body and gzip response (Accept-Encoding)", raw=True)
def _(t: Target) -> Any:
    body = gzip.compress(json.dumps(infer_body(GOOD_VERSIONED)).encode())
    headers = {"Content-Encoding": "gzip", "Accept-Encoding": "gzip"}
    reply = t.raw("POST", "/v2/models/versioned/infer", body, headers)
    return reply  # a gzip body is not JSON: normalised as its size marker


# --------------------------------------------------------------------------------- errors

_ERROR_REQUESTS: dict[str, tuple[str, str, Any, dict[str, str] | None]] = {
    "unknown model": ("/v2/models/no_such_model/infer", "", infer_body(GOOD_VERSIONED), None),
    "unknown version": (
        "/v2/models/versioned/versions/9/infer",
        "",
        infer_body(GOOD_VERSIONED),
        None,
    ),
    "unexpected input name": (
        "/v2/models/versioned/infer",
        "",
        infer_body([json_input("WRONG", [3], "FP32", [1, 2, 3])]),
        None,
    ),
    "wrong shape": (
        "/v2/models/batched/infer",
        "",
        infer_body([json_input("INPUT0", [1, 3], "FP32", [1, 2, 3])]),
        None,
    ),
    "wrong datatype": (
        "/v2/models/versioned/infer",
        "",
        infer_body([json_input("IN", [3], "INT32", [1, 2, 3])]),
        None,
    ),
    "missing input": ("/v2/models/versioned/infer", "", infer_body([]), None),
    "unknown output": (
        "/v2/models/versioned/infer",
        "",
        infer_body(GOOD_VERSIONED, [{"name": "NOPE"}]),
        None,
    ),
    "batch too large": (
        "/v2/models/batched/infer",
        "",
        infer_body([json_input("INPUT0", [9, 4], "FP32", [0.0] * 36)]),
        None,
    ),
    "data count mismatch": (
        "/v2/models/versioned/infer",
        "",
        infer_body([json_input("IN", [4], "FP32", [1, 2, 3])]),
        None,
    ),
    "reserved parameter": (
        "/v2/models/versioned/infer",
        "",
        infer_body(GOOD_VERSIONED, parameters={"triton_x": 1}),
        None,
    ),
    "duplicate input": (
        "/v2/models/versioned/infer",
        "",
        infer_body(GOOD_VERSIONED * 2),
        None,
    ),
    "too many inputs": (
        "/v2/models/versioned/infer",
        "",
        infer_body([*GOOD_VERSIONED, json_input("EXTRA", [3], "FP32", [1, 2, 3])]),
        None,
    ),
    "required input missing, optional given (core only counts inputs)": (
        "/v2/models/batched/infer",
        "",
        infer_body([json_input("BIAS", [1, 1], "FP32", [1])]),
        None,
    ),
    "batch sizes differ between inputs": (
        "/v2/models/batched/infer",
        "",
        infer_body(
            [
                json_input("INPUT0", [2, 4], "FP32", [0.0] * 8),
                json_input("BIAS", [3, 1], "FP32", [1, 2, 3]),
            ]
        ),
        None,
    ),
    "no batch dimension": (
        "/v2/models/batched/infer",
        "",
        infer_body([json_input("INPUT0", [], "FP32", [1])]),
        None,
    ),
    "wrong rank, non-batching": (
        "/v2/models/versioned/infer",
        "",
        infer_body([json_input("IN", [1, 3], "FP32", [1, 2, 3])]),
        None,
    ),
    "error with a request id": (
        "/v2/models/versioned/infer",
        "",
        infer_body([json_input("IN", [3], "INT32", [1, 2, 3])], id="abc"),
        None,
    ),
    "malformed JSON": ("/v2/models/versioned/infer", "{not json", None, None),
    "header length beyond body": (
        "/v2/models/versioned/infer",
        "",
        infer_body(GOOD_VERSIONED),
        {"Inference-Header-Content-Length": "99999"},
    ),
    "unsupported content encoding": (
        "/v2/models/versioned/infer",
        "",
        infer_body(GOOD_VERSIONED),
        {"Content-Encoding": "br"},
    ),
}

# Messages that name inputs in the order core iterates them: a hash map, so unspecified.
_HASH_ORDERED = {
    "too many inputs": (),
    "batch sizes differ between inputs": ("INPUT0", "BIAS"),
}


def hash_order_free(reply: dict[str, Any], names: tuple[str, ...]) -> dict[str, Any]:
    """Sort quoted-name lists in an error message and mask which of ``names`` it picked."""
    body = reply.get("body")
    if isinstance(body, dict) and isinstance(body.get("error"), str):
        error = re.sub(
            r"\[((?:'[^']*',?)+)\]",
            lambda m: "[" + ",".join(sorted(m.group(1).split(","))) + "]",
            body["error"],
        )
        for name in names:
            error = error.replace(f"input '{name}'", "input '<input>'")
        reply["body"] = dict(body, error=error)
    return reply


def _error_case(path: str, text: str, body: Any, headers: dict | None, names: Any) -> Any:
    def run(t: Target) -> Any:
        reply = t.raw("POST", path, text.encode() if text else body, headers)
        return reply if names is None else hash_order_free(reply, names)

    return run


for _label, (_path, _text, _body, _headers) in _ERROR_REQUESTS.items():
    REGISTRY.add(
        f"error[{_label}]",
        "errors",
        f"POST {_path}: {_label}",
        _error_case(_path, _text, _body, _headers, _HASH_ORDERED.get(_label)),
        raw=True,
    )


@case("error[GET on infer]", "errors", "GET on an inference route", raw=True)
def _(t: Target) -> Any:
    return t.raw("GET", "/v2/models/versioned/infer")


@case("error[client unknown model]", "errors", "client infer on an unknown model")
def _(t: Target) -> Any:
    return t.client.infer("no_such_model", [TensorSpec("IN", fp32(1), "FP32")])


# --------------------------------------------------------------------------------- classification


@case("classify_labels", "classification", "top-2 of a batched FP32 output with a label file")
def _(t: Target) -> Any:
    data = fp32(0.1, 0.7, 0.2, 0.05, 3, 1, 2, 4, rows=2)
    return t.client.infer(
        "batched", [TensorSpec("INPUT0", data, "FP32")], [OutputSpec("SCORES", class_count=2)]
    )


@case("classify_json", "classification", "classification returned as JSON strings")
def _(t: Target) -> Any:
    data = fp32(4, 3, 2, 1, rows=1)
    return t.client.infer(
        "batched",
        [TensorSpec("INPUT0", data, "FP32")],
        [OutputSpec("SCORES", binary=False, class_count=3), OutputSpec("ARGMAX", binary=False)],
    )


@case("classify_integer", "classification", "top-3 of a non-batching INT32 output, no labels")
def _(t: Target) -> Any:
    return t.client.infer("dtypes", dtype_inputs(), [OutputSpec("OUT_INT32", class_count=3)])


@case("classify_more_than_elements", "classification", "class_count larger than the output")
def _(t: Target) -> Any:
    return t.client.infer("dtypes", dtype_inputs(), [OutputSpec("OUT_FP64", class_count=10)])


@case("classify_fp16_refused", "classification", "an FP16 output cannot be classified")
def _(t: Target) -> Any:
    return t.client.infer("dtypes", dtype_inputs(), [OutputSpec("OUT_FP16", class_count=1)])


@case("classify_bool_refused", "classification", "a BOOL output cannot be classified")
def _(t: Target) -> Any:
    return t.client.infer("dtypes", dtype_inputs(), [OutputSpec("OUT_BOOL", class_count=1)])


@case("classify_ensemble", "classification", "classification of an ensemble output")
def _(t: Target) -> Any:
    return t.client.infer(
        "pipeline", [TensorSpec("IN", fp32(3, 1, 2), "FP32")], [OutputSpec("OUT", class_count=2)]
    )


# --------------------------------------------------------------------------------- statistics
# Last: exact counts after everything above.

for _model in MODELS:
    REGISTRY.add(
        f"stats[{_model}]",
        "statistics",
        f"statistics of '{_model}' after the sequence: counts, keys, batch_stats",
        lambda t, m=_model: t.client.statistics(m),
    )


@case("stats[versioned/1]", "statistics", "statistics of one version")
def _(t: Target) -> Any:
    return t.client.statistics("versioned", "1")


@case("stats[all]", "statistics", "GET /v2/models/stats: every model and version")
def _(t: Target) -> Any:
    return t.client.statistics()


@case("stats[unknown]", "statistics", "statistics of an unknown model")
def _(t: Target) -> Any:
    return t.client.statistics("no_such_model")


@case("stats[versioned/3]", "statistics", "statistics of a version that is not loaded")
def _(t: Target) -> Any:
    return t.client.statistics("versioned", "3")


# --------------------------------------------------------------------------------- logging
# Raw HTTP only; the last case puts the defaults back.

_LOGGING_CASES = (
    ("logging[defaults]", "GET /v2/logging: Triton's defaults", "GET", None),
    ("logging[verbose]", "POST /v2/logging: a verbose level", "POST", {"log_verbose_level": 1}),
    (
        "logging[several]",
        "POST /v2/logging: several settings at once",
        "POST",
        {"log_info": False, "log_warning": False, "log_format": "ISO8601"},
    ),
    ("logging[bad bool]", "POST /v2/logging: a string for a boolean", "POST", {"log_info": "x"}),
    (
        "logging[bad level]",
        "POST /v2/logging: a negative verbose level",
        "POST",
        {"log_verbose_level": -1},
    ),
    ("logging[bad format]", "POST /v2/logging: an unknown format", "POST", {"log_format": "x"}),
    ("logging[unknown]", "POST /v2/logging: an unknown setting", "POST", {"no_such": True}),
    ("logging[not json]", "POST /v2/logging: a body that is not JSON", "POST", b"{nope"),
    (
        "logging[restore]",
        "POST /v2/logging: the defaults again",
        "POST",
        {"log_info": True, "log_warning": True, "log_verbose_level": 0, "log_format": "default"},
    ),
)
for _name, _description, _method, _body in _LOGGING_CASES:
    REGISTRY.add(
        _name,
        "logging",
        _description,
        lambda t, m=_method, b=_body: t.raw(m, "/v2/logging", b),
        raw=True,
    )


# --------------------------------------------------------------------------------- trace
# Raw HTTP; both servers start with tracing off and no trace file. The last case restores.

_TRACE_CASES = (
    ("trace[defaults]", "GET /v2/trace/setting: Triton's defaults", "GET", "", None),
    ("trace[rate]", "POST: a new rate (numbers are strings)", "POST", "", {"trace_rate": "5"}),
    (
        "trace[several]",
        "POST: count and log frequency at once",
        "POST",
        "",
        {"trace_count": "3", "log_frequency": "2"},
    ),
    ("trace[not a string]", "POST: a JSON number for a rate", "POST", "", {"trace_rate": 5}),
    ("trace[bad rate]", "POST: a rate that is not a number", "POST", "", {"trace_rate": "x"}),
    ("trace[bad count]", "POST: a count below -1", "POST", "", {"trace_count": "-5"}),
    (
        "trace[off and more]",
        "POST: OFF with another level",
        "POST",
        "",
        {"trace_level": ["OFF", "TIMESTAMPS"]},
    ),
    (
        "trace[no file]",
        "POST: a level while no trace file is set",
        "POST",
        "",
        {"trace_level": ["TIMESTAMPS"]},
    ),
    ("trace[unknown level]", "POST: an unknown level", "POST", "", {"trace_level": ["LOUD"]}),
    ("trace[file]", "POST: a trace file", "POST", "", {"trace_file": "/tmp/t.json"}),
    ("trace[unknown]", "POST: an unknown setting", "POST", "", {"no_such": "1"}),
    ("trace[not json]", "POST: a body that is not JSON", "POST", "", b"{nope"),
    ("trace[model rate]", "POST a model's own rate", "POST", "batched", {"trace_rate": "7"}),
    ("trace[model]", "GET a model's settings", "GET", "batched", None),
    (
        "trace[model cleared]",
        "POST null: the model follows the server",
        "POST",
        "batched",
        {"trace_rate": None},
    ),
    ("trace[unknown model]", "GET an unknown model's settings", "GET", "no_such_model", None),
    ("trace[versioned]", "GET with a version in the path", "GET", "batched/versions/1", None),
    # Triton wraps it to 2^32-1 (rayton refuses it): last before the restore.
    ("trace[negative rate]", "POST: a negative rate", "POST", "", {"trace_rate": "-1"}),
    (
        "trace[restore]",
        "POST null: the start-up values again",
        "POST",
        "",
        {"trace_rate": None, "trace_count": None, "log_frequency": None},
    ),
)
for _name, _description, _method, _model, _body in _TRACE_CASES:
    _path = f"/v2/models/{_model}/trace/setting" if _model else "/v2/trace/setting"
    REGISTRY.add(
        _name,
        "trace",
        _description,
        lambda t, m=_method, p=_path, b=_body: t.raw(m, p, b),
        raw=True,
    )


# --------------------------------------------------------------------------------- metrics
# After the statistics: /metrics read the same records, so the same counts.

_DURATION_SUFFIX = "_duration_us"


def scrape_metrics(t: Target) -> dict[str, dict[str, Any]]:
    """``/metrics`` as family -> {type, labels: sorted label names, samples: labels -> value}."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(t.server.metrics_url, timeout=30) as response:
        text = response.read().decode()
    families: dict[str, dict[str, Any]] = {}
    for family in text_string_to_metric_families(text):
        keys = sorted({key for sample in family.samples for key in sample.labels})
        samples = {
            ",".join(f"{k}={v}" for k, v in sorted(s.labels.items())): s.value
            for s in family.samples
        }
        families[family.name] = {"type": family.type, "labels": keys, "samples": samples}
    return families


@case("metrics[families]", "metrics", "GET :8002/metrics: each family's type and labels", raw=True)
def _(t: Target) -> Any:
    return {
        name: {"type": f["type"], "labels": f["labels"]} for name, f in scrape_metrics(t).items()
    }


@case("metrics[counts]", "metrics", "per-model counters after the sequence", raw=True)
def _(t: Target) -> Any:
    observed: dict[str, Any] = {}
    for name, family in scrape_metrics(t).items():
        if not name.startswith("nv_inference_"):
            continue  # CPU and GPU readings differ between machines and moments
        for labels, value in family["samples"].items():
            # Durations differ run to run: compare whether time was recorded.
            timed = name.endswith(_DURATION_SUFFIX)
            observed[f"{name}{{{labels}}}"] = value > 0 if timed else value
    return observed


CASES = REGISTRY.cases

# What the suite deliberately does not compare, and why (for the README section).
NOT_COMPARED: tuple[tuple[str, str], ...] = (
    (
        "gRPC-only RPCs (ModelStreamInfer of stateless models, trace and log settings), "
        "log_file and the trace file",
        "checked by rayton's own tests (tests/deployments/grpc, tests/deployments/apps), not "
        "against Triton yet",
    ),
    (
        "classification of a BYTES output",
        "tritonserver 2.51 crashes on it; rayton answers 400 as current Triton documents",
    ),
    (
        "CUDA shared memory's data path (registering a region, inputs and outputs in it)",
        "the reference's machine has no GPU: both refuse the registration (compared); the "
        "path itself is checked on a GPU by benchmarks/cuda_shm_check.py",
    ),
    (
        "model load/unload in this sequence",
        "only the refusal in mode 'none'; explicit model control has sequences of its own",
    ),
    (
        "CPU and GPU metric values",
        "readings of the machine; their families, types and labels are compared",
    ),
)
