"""Auto-complete for C/C++ backends at scan time: the backend's ModelInitialize runs in a child
process with auto-complete on and may fill the config in (TRITONBACKEND_ModelSetConfig); a
backend that refuses the model makes it unavailable with its own reason; rescans reuse the
result."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from repo_adapter.backends.backend_files import BackendSettings
from repo_adapter.backends.native import autocomplete
from repo_adapter.repository import scan_model
from tests.support.native_backends import build_scale_variants

ONLY_THE_BACKEND = 'backend: "scale"\n'


@pytest.fixture(scope="module")
def libraries(tmp_path_factory) -> dict[str, Path]:
    return build_scale_variants(tmp_path_factory.mktemp("native"))


def model(root: Path, library: Path, config: str = ONLY_THE_BACKEND) -> Path:
    (root / "m" / "1").mkdir(parents=True)
    (root / "m" / "config.pbtxt").write_text(config)
    shutil.copy(library, root / "m" / library.name)
    return root / "m"


def test_the_backend_completes_a_config_that_names_only_it(libraries, tmp_path):
    scanned = scan_model(model(tmp_path, libraries["autocomplete"]))
    assert scanned.error == ""
    config = scanned.config
    assert (config.name, config.backend, config.max_batch_size) == ("m", "scale", 8)
    assert [(i.name, list(i.dims)) for i in config.input] == [("IN", [1])]
    assert [o.name for o in config.output] == ["OUT"]
    assert config.HasField("dynamic_batching")
    assert len(config.instance_group) == 1  # normalised again after the backend's changes


def test_auto_complete_off_leaves_the_config_as_written(libraries, tmp_path):
    settings = BackendSettings.from_flags("", ["scale,auto-complete-config=false"])
    scanned = scan_model(model(tmp_path, libraries["autocomplete"]), backends=settings)
    assert scanned.error == ""
    assert list(scanned.config.input) == []


def test_a_backend_that_refuses_the_model_gives_the_reason_at_scan(libraries, tmp_path):
    scanned = scan_model(model(tmp_path / "a", libraries["plain"]))
    assert scanned.error == "scale: the config has no input 'IN'"
    scanned = scan_model(model(tmp_path / "b", libraries["refuses"]))
    assert scanned.error == "scale: initialize refused"


def test_a_rescan_reuses_the_completed_config(libraries, tmp_path, monkeypatch):
    directory = model(tmp_path, libraries["autocomplete"])
    first = scan_model(directory)

    def no_child(request):
        raise AssertionError("the child ran again")

    monkeypatch.setattr(autocomplete, "_run_child", no_child)
    again = scan_model(directory)
    assert again.error == "" and again.config == first.config
