"""model_warmup: samples built as Triton builds them, run on the instance before it serves."""

from __future__ import annotations

import pytest

from repo_adapter.backends import InstanceSpec, backend_class
from repo_adapter.errors import InferenceServerError, ModelConfigError
from repo_adapter.repository import scan_model
from repo_adapter.warmup import run_warmup, warmup_batches
from tests.support.live_models import WARM_CONFIG as CONFIG
from tests.support.live_models import write_warm_model as write_model


def loaded(model_dir):
    scanned = scan_model(model_dir)
    assert scanned.available, scanned.error
    backend = backend_class("python")(scanned.model_version(1), InstanceSpec.cpu("warm"))
    backend.load()
    return scanned, backend


def test_samples_run_count_times_with_batch_size_requests(tmp_path):
    scanned, backend = loaded(write_model(tmp_path))
    try:
        run_warmup(backend, scanned.config, scanned.path)
    finally:
        backend.unload()
    calls = (scanned.path / "calls.jsonl").read_text().splitlines()
    assert calls == [
        "[[[0.0, 0.0]], [[0.0, 0.0]], [[0.0, 0.0]]]",  # 'zeros': 3 one-row requests, twice
        "[[[0.0, 0.0]], [[0.0, 0.0]], [[0.0, 0.0]]]",
        "[[[7.0, 8.0]]]",  # 'from_file': the file's data
    ]


def test_a_failing_sample_fails_with_its_name(tmp_path):
    scanned, backend = loaded(write_model(tmp_path, fail_on_zeros=True))
    try:
        with pytest.raises(InferenceServerError, match=r"warmup .zeros.*zeros are not welcome"):
            run_warmup(backend, scanned.config, scanned.path)
    finally:
        backend.unload()


def test_bad_samples_are_config_errors(tmp_path):
    model_dir = write_model(tmp_path, config=CONFIG.replace("batch_size: 3", "batch_size: 9"))
    scanned = scan_model(model_dir)
    with pytest.raises(ModelConfigError, match="larger than max_batch_size 4"):
        warmup_batches(scanned.config, model_dir)
    (model_dir / "warmup" / "in.raw").write_bytes(b"\0" * 3)
    fixed = scan_model(write_model(tmp_path / "other"))
    (fixed.path / "warmup" / "in.raw").write_bytes(b"\0" * 3)
    with pytest.raises(ModelConfigError, match=r"in\.raw"):
        warmup_batches(fixed.config, fixed.path)
