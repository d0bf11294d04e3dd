"""A model served by a Triton C backend through rayton's Backend interface (Ray-free): batches
in, one result per request out, instances sharing their model, the backend's errors."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import numpy as np
import pytest

from repo_adapter.backends.backend_files import BackendSettings
from repo_adapter.backends.base import InstanceSpec, ModelVersion
from repo_adapter.backends.native.backend import native_backend_class
from repo_adapter.config import config_from_json
from repo_adapter.errors import InferenceServerError, StatusCode
from repo_adapter.inference_types import InferRequest, InferResponse, InferTensor
from tests.support.native_backends import build_scale_variants

CONFIG = {
    "name": "doubler",
    "backend": "scale",
    "max_batch_size": 8,
    "input": [{"name": "IN", "data_type": "TYPE_FP32", "dims": [1]}],
    "output": [{"name": "OUT", "data_type": "TYPE_FP32", "dims": [1]}],
}


@pytest.fixture(scope="module")
def libraries(tmp_path_factory) -> dict[str, Path]:
    return build_scale_variants(tmp_path_factory.mktemp("native"))


def version(library: Path) -> ModelVersion:
    return ModelVersion("doubler", 1, config_from_json(CONFIG), library.parent)


def request(*values: float, request_id: str = "") -> InferRequest:
    data = np.array(values, np.float32).reshape(-1, 1)
    return InferRequest("doubler", [InferTensor("IN", "FP32", data)], id=request_id)


def test_a_batch_gets_one_result_per_request_in_order(libraries):
    backend_class = native_backend_class("scale", libraries["plain"])
    instances = [
        backend_class(version(libraries["plain"]), InstanceSpec(f"doubler_{i}")) for i in (0, 1)
    ]
    for instance in instances:
        instance.load()

    async def run():
        first = await instances[0].execute([request(1.0, 2.0, request_id="a"), request(-1.0)])
        second = await instances[1].execute([request(4.0)])
        return first, second

    (ok, failed), (other,) = asyncio.run(run())
    assert isinstance(ok, InferResponse) and ok.id == "a"
    (out,) = ok.outputs
    assert (out.name, out.datatype) == ("OUT", "FP32")
    np.testing.assert_array_equal(out.data, [[2.0], [4.0]])
    assert isinstance(failed, InferenceServerError)
    assert (failed.code, failed.message) == (StatusCode.INVALID_ARG, "scale: negative input")
    np.testing.assert_array_equal(other.outputs[0].data, [[8.0]])
    instances[0].unload()  # the model stays for the other instance
    (again,) = asyncio.run(instances[1].execute([request(0.5)]))
    np.testing.assert_array_equal(again.outputs[0].data, [[1.0]])
    instances[1].unload()


def test_a_backend_that_fails_to_initialize_fails_the_load(libraries):
    backend_class = native_backend_class("scale", libraries["refuses"])
    instance = backend_class(version(libraries["refuses"]), InstanceSpec("doubler_0"))
    with pytest.raises(InferenceServerError, match="scale: initialize refused"):
        instance.load()


def test_the_backend_reads_its_backend_config(libraries, tmp_path):
    # A copy of its own: a library is initialized once per process, with the first settings.
    library = tmp_path / "factor" / "libtriton_scale.so"
    library.parent.mkdir()
    shutil.copy(libraries["plain"], library)
    settings = BackendSettings.from_flags(str(tmp_path), ["scale,factor=3"])
    model = ModelVersion(
        "doubler", 1, config_from_json(CONFIG), library.parent, library, settings.cmdline("scale")
    )
    instance = native_backend_class("scale", library)(model, InstanceSpec("doubler_0"))
    instance.load()
    try:
        (result,) = asyncio.run(instance.execute([request(1.5)]))
    finally:
        instance.unload()
    np.testing.assert_array_equal(result.outputs[0].data, [[4.5]])
