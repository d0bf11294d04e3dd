"""EXECUTION_ENV_PATH: a python model runs with its packed environment's packages."""

from __future__ import annotations

import io
import sys
import tarfile
from pathlib import Path

import numpy as np
import pytest

from repo_adapter.backends import InstanceSpec
from repo_adapter.backends.backend_files import BackendSettings
from repo_adapter.backends.python import PythonBackend
from repo_adapter.errors import InferenceServerError, StatusCode
from repo_adapter.inference_types import InferRequest, InferTensor
from repo_adapter.python_backend import execution_env
from repo_adapter.repository import scan_model
from tests.support.packed_env import PACKAGE, packed_venv

MODEL = f"""
import numpy as np
import triton_python_backend_utils as pb_utils

import {PACKAGE}


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for request in requests:
            value = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            tripled = pb_utils.Tensor("OUT", {PACKAGE}.triple(value))
            out.append(pb_utils.InferenceResponse([tripled]))
        return out
"""
CONFIG = """\
backend: "python"
max_batch_size: 4
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] } ]
parameters {
  key: "EXECUTION_ENV_PATH"
  value: { string_value: "$$TRITON_MODEL_DIRECTORY/env.tar.gz" }
}
"""


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv(execution_env.CACHE_ENV, str(tmp_path / "cache"))
    yield
    sys.modules.pop(PACKAGE, None)
    sys.path[:] = [p for p in sys.path if str(tmp_path) not in p]


def _model(root: Path, archive_builder) -> Path:
    model = root / "packed"
    (model / "1").mkdir(parents=True)
    (model / "config.pbtxt").write_text(CONFIG)
    (model / "1" / "model.py").write_text(MODEL)
    archive_builder(model)
    return model


def _backend(model_dir: Path) -> PythonBackend:
    scanned = scan_model(model_dir)
    assert scanned.available, scanned.error
    return PythonBackend(scanned.model_version(1), InstanceSpec.cpu("packed"))


async def test_a_model_imports_a_package_only_its_archive_has(tmp_path):
    with pytest.raises(ImportError):
        __import__(PACKAGE)  # not in the server's environment
    backend = _backend(_model(tmp_path, packed_venv))
    np.testing.assert_array_equal(await _tripled(backend, 2.0), [[6.0]])


async def _tripled(backend: PythonBackend, value: float) -> np.ndarray:
    """``value`` through the packed model (loaded, then unloaded)."""
    backend.load()
    try:
        data = np.array([[value]], np.float32)
        [response] = await backend.execute(
            [InferRequest("packed", [InferTensor("IN", "FP32", data)])]
        )
        return response.output("OUT").data
    finally:
        backend.unload()


def test_the_archive_is_unpacked_once_per_content(tmp_path):
    archive = packed_venv(tmp_path)
    first = execution_env.prepare(archive, "m")
    marker = first / "marker"
    marker.write_text("kept")
    assert execution_env.prepare(archive, "m") == first and marker.exists()
    assert first.parent.name == f"python{sys.version_info.major}.{sys.version_info.minor}"


def _broken(model_dir: Path) -> None:
    (model_dir / "env.tar.gz").write_bytes(b"\x1f\x8b not really gzip")


def test_a_broken_archive_makes_the_model_unavailable_with_the_reason(tmp_path):
    backend = _backend(_model(tmp_path, _broken))
    with pytest.raises(InferenceServerError, match="not a readable tar archive") as raised:
        backend.load()
    assert raised.value.code == StatusCode.UNAVAILABLE
    assert "execution environment of Python model 'packed'" in str(raised.value)


def test_a_missing_archive_or_one_for_another_python_is_refused(tmp_path):
    with pytest.raises(InferenceServerError, match="does not exist"):
        execution_env.prepare(tmp_path / "absent.tar.gz", "m")
    other = packed_venv(tmp_path, python="python3.7")
    with pytest.raises(InferenceServerError, match=r"built for python3\.7, the replica runs"):
        execution_env.prepare(other, "m")


def test_members_outside_the_archive_are_refused(tmp_path):
    archive = tmp_path / "evil.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        info = tarfile.TarInfo("lib/python3.11/site-packages/../../../../outside.txt")
        info.size = 3
        tar.addfile(info, io.BytesIO(b"bad"))
    with pytest.raises(InferenceServerError, match="not a readable tar archive"):
        execution_env.prepare(archive, "m")
    assert not (tmp_path / "cache" / "outside.txt").exists()
    assert not (tmp_path / "outside.txt").exists()


async def test_a_python_based_backends_model_runs_in_its_packed_environment(tmp_path):
    # The article's flow: `backend: "custom"` with EXECUTION_ENV_PATH, the backend's model.py
    # in the backend directory and the environment beside the model.
    backends = tmp_path / "backends"
    (backends / "custom").mkdir(parents=True)
    (backends / "custom" / "model.py").write_text(MODEL)
    model = tmp_path / "repository" / "packed"
    (model / "1").mkdir(parents=True)
    (model / "config.pbtxt").write_text(CONFIG.replace('"python"', '"custom"'))
    packed_venv(model)
    scanned = scan_model(model, backends=BackendSettings(str(backends)))
    assert scanned.available, scanned.error
    backend = PythonBackend(scanned.model_version(1), InstanceSpec.cpu("packed"))
    np.testing.assert_array_equal(await _tripled(backend, 1.5), [[4.5]])
