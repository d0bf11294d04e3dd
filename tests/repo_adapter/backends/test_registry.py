"""Backends describe themselves; another package adds one through an entry point."""

from __future__ import annotations

import sys

import pytest

from repo_adapter import backends
from repo_adapter.backends import (
    backend_class,
    backend_for_platform,
    probe_order,
    supported_backends,
)
from repo_adapter.repository import scan_model

THIRD_PARTY = '''
import numpy as np

from repo_adapter.backends.base import TensorBackend


class DoublingBackend(TensorBackend):
    """Outputs twice its input: a backend defined outside rayton."""

    name = "doubling"
    platforms = ("doubling_platform",)
    default_model_filename = "model.double"
    probe_priority = 45

    def load(self):
        assert self.model.model_path.is_file()

    def run(self, inputs):
        return {"OUT": inputs["IN"] * 2}
'''


def test_builtin_backends_describe_themselves():
    assert set(supported_backends()) >= {
        "onnxruntime",
        "openvino",
        "pytorch",
        "python",
        "tensorrt",
        "tensorflow",
    }
    assert backend_for_platform("onnxruntime_onnx") == "onnxruntime"
    assert backend_for_platform("pytorch_libtorch") == "pytorch"
    assert backend_for_platform("tensorrt_plan") == "tensorrt"
    assert backend_for_platform("no_such_platform") is None
    # core's order: model.plan, model.savedmodel, model.onnx, model.pt, then model.py
    names = [cls.name for cls in probe_order()]
    assert names[:5] == ["tensorrt", "tensorflow", "onnxruntime", "pytorch", "python"]
    assert backend_class("openvino").probe_priority is None  # core never detects it by file
    assert backend_class("onnxruntime").default_cpu_instance_count == 2
    assert backend_class("tensorflow").default_cpu_instance_count == 2
    assert backend_class("python").default_cpu_instance_count == 1


@pytest.fixture
def third_party(tmp_path, monkeypatch):
    """A package on sys.path declaring a backend in the ``rayton.backends`` group."""
    (tmp_path / "doubling_backend.py").write_text(THIRD_PARTY)
    info = tmp_path / "doubling_backend-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: doubling-backend\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        "[rayton.backends]\ndoubling = doubling_backend:DoublingBackend\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    backends._registered.cache_clear()
    yield tmp_path
    backends._registered.cache_clear()
    sys.modules.pop("doubling_backend", None)


def test_an_entry_point_adds_a_backend_the_scan_detects(third_party, tmp_path):
    assert "doubling" in supported_backends()
    assert backend_for_platform("doubling_platform") == "doubling"
    model = tmp_path / "repo" / "twice"
    (model / "1").mkdir(parents=True)
    (model / "1" / "model.double").write_text("")
    (model / "config.pbtxt").write_text(
        'max_batch_size: 4 input [ { name: "IN" data_type: TYPE_FP32 dims: [ 1 ] } ]'
        ' output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] } ]'
    )
    scanned = scan_model(model)
    assert scanned.error == ""
    assert scanned.config.backend == "doubling"  # found by its model file
    assert scanned.config.platform == "doubling_platform"
    assert scanned.config.default_model_filename == "model.double"


def test_a_builtin_name_stays_raytons(third_party):
    info = third_party / "doubling_backend-0.1.dist-info" / "entry_points.txt"
    info.write_text("[rayton.backends]\npython = doubling_backend:DoublingBackend\n")
    backends._registered.cache_clear()
    assert backend_class("python").__name__ == "PythonBackend"
