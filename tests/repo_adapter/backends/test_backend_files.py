"""Finding a backend rayton does not have, as Triton does: a C/C++ library in the version
directory, the model directory or ``--backend-directory/<name>/`` (or the config's
``runtime`` library), else a python-based backend's ``model.py`` there; and a model of a
python-based backend scanned and served by the python backend with its own files."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from repo_adapter.backends import model_backend_class
from repo_adapter.backends.backend_files import (
    BackendSettings,
    backend_file,
    parse_backend_configs,
    search_paths,
)
from repo_adapter.backends.base import InstanceSpec
from repo_adapter.backends.python import PythonBackend
from repo_adapter.inference_types import InferRequest, InferTensor
from repo_adapter.repository import scan_model

SCALING_BACKEND = """
import json
import os

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        version_dir = os.path.join(args["model_repository"], args["model_version"])
        with open(os.path.join(version_dir, "factor.txt")) as handle:
            self.factor = np.float32(handle.read())
        self.name = json.loads(args["model_config"])["name"]

    def execute(self, requests):
        responses = []
        for request in requests:
            data = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            out = pb_utils.Tensor("OUT", (data * self.factor).astype(np.float32))
            responses.append(pb_utils.InferenceResponse([out]))
        return responses
"""
CONFIG = """\
backend: "scaling"
max_batch_size: 4
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] } ]
"""


def model_dir(root: Path, name: str, config: str = CONFIG, factor: str = "3") -> Path:
    (root / name / "1").mkdir(parents=True)
    (root / name / "config.pbtxt").write_text(config)
    (root / name / "1" / "factor.txt").write_text(factor)
    return root / name


def test_libraries_come_first_then_the_python_based_backend(tmp_path):
    backends = tmp_path / "backends"
    (backends / "scaling").mkdir(parents=True)
    (backends / "scaling" / "model.py").write_text(SCALING_BACKEND)
    model = model_dir(tmp_path / "repository", "m")
    found = backend_file("scaling", model, [1], str(backends))
    assert found == (backends / "scaling" / "model.py").resolve()
    (model / "libtriton_scaling.so").write_bytes(b"")
    assert backend_file("scaling", model, [1], str(backends)) == model / "libtriton_scaling.so"
    assert search_paths("scaling", model, [1], str(backends)) == [
        model / "1" / "libtriton_scaling.so",
        model / "libtriton_scaling.so",
        backends / "scaling" / "libtriton_scaling.so",
        backends / "scaling" / "model.py",
    ]


def test_the_runtime_field_names_the_file(tmp_path):
    backends = tmp_path / "backends"
    assert search_paths("b", tmp_path / "m", [2], str(backends), "libcustom.so") == [
        tmp_path / "m" / "2" / "libcustom.so",
        tmp_path / "m" / "libcustom.so",
        backends / "b" / "libcustom.so",
    ]
    assert search_paths("b", tmp_path / "m", [2], str(backends), "model.py") == [
        backends / "b" / "model.py"
    ]


def test_a_missing_backend_names_every_place_searched(tmp_path):
    settings = BackendSettings(str(tmp_path / "none"))
    scanned = scan_model(model_dir(tmp_path, "m"), backends=settings)
    assert scanned.error.startswith("unable to find backend library 'libtriton_scaling.so'")
    assert str(tmp_path / "none" / "scaling") in scanned.error
    assert "or a python-based backend" in scanned.error


async def test_a_python_based_backend_serves_the_model_with_its_own_files(tmp_path):
    backends = tmp_path / "backends"
    (backends / "scaling").mkdir(parents=True)
    (backends / "scaling" / "model.py").write_text(SCALING_BACKEND)
    settings = BackendSettings(str(backends))
    scanned = scan_model(model_dir(tmp_path / "repository", "m"), backends=settings)
    assert scanned.error == ""
    assert scanned.config.backend == "scaling"
    version = scanned.model_version(1)
    assert model_backend_class(version) is PythonBackend
    backend = PythonBackend(version, InstanceSpec("m_0"))
    backend.load()
    try:
        request = InferRequest("m", [InferTensor("IN", "FP32", np.array([[2.0]], np.float32))])
        (response,) = await backend.execute([request])
    finally:
        backend.unload()
    np.testing.assert_array_equal(response.outputs[0].data, [[6.0]])


def test_backend_config_entries_are_parsed_by_backend_and_checked():
    entries = ["scale,factor=3", "scale,mode=", "other,a=b=c"]
    assert parse_backend_configs(entries) == {
        "scale": {"factor": "3", "mode": ""},
        "other": {"a": "b=c"},
    }
    for bad in ("scale", "factor=3", ",factor=3", "scale,=3"):
        with pytest.raises(ValueError, match="<backend name>,<setting>=<value>"):
            parse_backend_configs([bad])


def test_a_backends_settings_are_the_servers_and_its_own():
    settings = BackendSettings.from_flags(
        "/backends", ["scale,factor=3", "scale,default-max-batch-size=8"]
    )
    assert settings.cmdline("scale") == {
        "auto-complete-config": "true",
        "default-max-batch-size": "8",
        "backend-directory": "/backends",
        "factor": "3",
    }
    assert settings.cmdline("other")["default-max-batch-size"] == "4"
