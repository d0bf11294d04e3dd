"""The requests both servers receive for the system shared-memory extension: regions created
with tritonclient's shared-memory utilities (``/dev/shm``, both servers on this host),
registered, named for inputs and outputs, and unregistered, over HTTP (raw and tritonclient)
and gRPC. Each pass starts and ends with no region registered.

The CUDA shared-memory extension's calls too, as far as a machine without a GPU goes: status,
unregister, and registrations both servers refuse (the handle is never opened)."""

from __future__ import annotations

import base64
import os
from typing import Any

import numpy as np
import tritonclient.utils.shared_memory as shm

from tests.conformance.driver import CaseRegistry, Target
from tests.conformance.normalise import normalise_array

SHM_REGISTRY = CaseRegistry()
case = SHM_REGISTRY.case

SHM_MODEL = "twice_text"
SHM_CONFIG = """\
name: "twice_text"
backend: "python"
max_batch_size: 8
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [
  { name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] },
  { name: "TEXT" data_type: TYPE_STRING dims: [ 1 ] }
]
"""
SHM_MODEL_PY = """\
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            value = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            text = np.array([[b"hello"]] * value.shape[0], np.object_)
            responses.append(pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUT", value * 2), pb_utils.Tensor("TEXT", text)]
            ))
        return responses
"""
# The objects the driver creates (one pair per test process); both servers open them.
IN_KEY = f"/rt_conf_in_{os.getpid()}"
OUT_KEY = f"/rt_conf_out_{os.getpid()}"
REGION_BYTES = 64


class Regions:
    """The driver's two shared-memory objects, created once for the whole sequence."""

    handles: dict[str, Any] = {}

    @classmethod
    def create(cls) -> None:
        cls.handles = {
            "in": shm.create_shared_memory_region("in", IN_KEY, REGION_BYTES),
            "out": shm.create_shared_memory_region("out", OUT_KEY, REGION_BYTES),
        }

    @classmethod
    def destroy(cls) -> None:
        for handle in cls.handles.values():
            shm.destroy_shared_memory_region(handle)
        cls.handles = {}


def _status(t: Target, name: str = "") -> Any:
    client = t.session.client
    kwargs = dict(t.session.json_kwargs)
    return t.session.call(lambda: client.get_system_shared_memory_status(name, **kwargs))


def _register(t: Target, name: str, key: str, byte_size: int) -> Any:
    client = t.session.client
    return t.session.call(lambda: client.register_system_shared_memory(name, key, byte_size))


def _infer(
    t: Target,
    value: float,
    in_offset: int = 0,
    in_size: int = 16,
    out_offset: int = 0,
    out_size: int = 16,
    text_to_region: bool = False,
) -> Any:
    """Write ``value`` into the input region, infer, and observe the response and the output
    region's contents."""
    module, client = t.session.module, t.session.client
    shm.set_shared_memory_region(Regions.handles["in"], [np.full((1, 4), value, np.float32)])
    shm.set_shared_memory_region(Regions.handles["out"], [np.zeros(16, np.float32)])
    tensor = module.InferInput("IN", [1, 4], "FP32")
    tensor.set_shared_memory("in", in_size, offset=in_offset)
    out = module.InferRequestedOutput("OUT")
    out.set_shared_memory("out", out_size, offset=out_offset)
    text = module.InferRequestedOutput("TEXT")
    if text_to_region:
        text.set_shared_memory("out", REGION_BYTES)
        outputs = [text]
    else:
        outputs = [out, text]

    def run() -> Any:
        result = client.infer(SHM_MODEL, [tensor], outputs=outputs)
        response = result.get_response(**t.session.json_kwargs)
        observed = {k: v for k, v in response.items() if k != "raw_output_contents"}
        entries = []
        for entry in response.get("outputs", []):
            entry = dict(entry)
            if entry["name"] == "TEXT" and not text_to_region:
                entry["decoded"] = normalise_array(result.as_numpy("TEXT"))
            entries.append(entry)
        observed["outputs"] = sorted(entries, key=lambda e: e["name"])
        observed["region"] = bytes(
            shm.get_contents_as_numpy(Regions.handles["out"], np.uint8, [REGION_BYTES])
        ).hex()
        return observed

    return t.session.call(run)


@case("shm_start", "shared_memory", "unregister every region, then the empty status")
def _(t: Target) -> Any:
    client = t.session.client
    return [
        t.session.call(client.unregister_system_shared_memory),
        _status(t),
        t.session.call(client.unregister_cuda_shared_memory),
    ]


@case("shm_register", "shared_memory", "register an input and an output region, then status")
def _(t: Target) -> Any:
    return [
        _register(t, "in", IN_KEY, REGION_BYTES),
        _register(t, "out", OUT_KEY, REGION_BYTES),
        _status(t),
        _status(t, "in"),
    ]


def _cuda_status(t: Target, name: str = "") -> Any:
    client = t.session.client
    kwargs = dict(t.session.json_kwargs)
    return t.session.call(lambda: client.get_cuda_shared_memory_status(name, **kwargs))


def _cuda_register(t: Target, name: str, handle: bytes, device_id: int = 0) -> Any:
    client, encoded = t.session.client, base64.b64encode(handle).decode()
    return t.session.call(lambda: client.register_cuda_shared_memory(name, encoded, device_id, 64))


@case("cuda_kinds", "shared_memory", "CUDA status and unregister of a system region's name")
def _(t: Target) -> Any:
    client = t.session.client
    return [
        _cuda_status(t),
        _cuda_status(t, "in"),
        t.session.call(lambda: client.unregister_cuda_shared_memory("in")),
        _status(t, "in"),
    ]


@case("cuda_register", "shared_memory", "a CUDA region on a machine without a GPU, then status")
def _(t: Target) -> Any:
    return [_cuda_register(t, "gpu", bytes(64)), _cuda_status(t), _cuda_status(t, "gpu")]


@case("cuda_register_handle", "shared_memory", "a CUDA handle that is not 64 bytes")
def _(t: Target) -> Any:
    return _cuda_register(t, "gpu", b"abc")


@case("cuda_register_raw", "shared_memory", "raw CUDA registers: missing fields", raw=True)
def _(t: Target) -> Any:
    path = "/v2/cudasharedmemory/region/raw/register"
    handle = {"b64": base64.b64encode(bytes(64)).decode()}
    return [
        t.raw("POST", path, {"device_id": 0, "byte_size": 64}),
        t.raw("POST", path, {"raw_handle": {"b64": "!!"}, "device_id": 0, "byte_size": 64}),
        t.raw("POST", path, {"raw_handle": handle, "device_id": 3, "byte_size": 64}),
        t.raw("GET", path),
        t.raw("POST", "/v2/cudasharedmemory/status"),
        t.raw("POST", "/v2/cudasharedmemory/unregister"),
    ]


@case("shm_register_errors", "shared_memory", "a name registered twice, a missing key, too large")
def _(t: Target) -> Any:
    return [
        _register(t, "in", IN_KEY, REGION_BYTES),
        _register(t, "nothing", "/rt_conf_no_such_key", REGION_BYTES),
        _register(t, "large", IN_KEY, 1 << 20),
    ]


@case("shm_status_unknown", "shared_memory", "status of a region never registered")
def _(t: Target) -> Any:
    return _status(t, "never")


@case("shm_infer", "shared_memory", "input from a region, an output into another, one in the body")
def _(t: Target) -> Any:
    return _infer(t, 3.0)


@case("shm_infer_offset", "shared_memory", "an output at an offset of its region")
def _(t: Target) -> Any:
    return _infer(t, 5.0, out_offset=8)


@case("shm_bytes_output", "shared_memory", "a BYTES output into a region")
def _(t: Target) -> Any:
    return _infer(t, 1.0, text_to_region=True)


@case("shm_output_too_small", "shared_memory", "an output region smaller than the output")
def _(t: Target) -> Any:
    return _infer(t, 2.0, out_size=8)


@case("shm_input_beyond", "shared_memory", "an input span past the region's end")
def _(t: Target) -> Any:
    return _infer(t, 2.0, in_offset=56)


@case("shm_input_size", "shared_memory", "an input span of the wrong size")
def _(t: Target) -> Any:
    return _infer(t, 2.0, in_size=12)


@case("shm_output_beyond", "shared_memory", "an output span past the region's end")
def _(t: Target) -> Any:
    return _infer(t, 2.0, out_offset=60)


@case("shm_register_raw", "shared_memory", "raw register requests: no key, no byte_size", raw=True)
def _(t: Target) -> Any:
    path = "/v2/systemsharedmemory/region/raw/register"
    return [
        t.raw("POST", path, {"offset": 0, "byte_size": 8}),
        t.raw("POST", path, {"key": IN_KEY}),
        t.raw("GET", path),
        t.raw("POST", "/v2/systemsharedmemory/status"),
        t.raw("POST", "/v2/systemsharedmemory/region/never/unregister"),
    ]


@case("shm_unregister", "shared_memory", "unregister one, an unknown one, then infer with it")
def _(t: Target) -> Any:
    client = t.session.client
    return [
        t.session.call(lambda: client.unregister_system_shared_memory("in")),
        t.session.call(lambda: client.unregister_system_shared_memory("in")),
        _infer(t, 1.0),
        _status(t),
    ]


@case("shm_unregister_all", "shared_memory", "unregister every region, then status")
def _(t: Target) -> Any:
    client = t.session.client
    return [t.session.call(client.unregister_system_shared_memory), _status(t)]
