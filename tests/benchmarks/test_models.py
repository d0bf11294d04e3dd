"""The benchmark models' shared pre-processing, as the hand-written baseline app calls it."""

from __future__ import annotations

import numpy as np

from benchmarks.models import (
    IMAGE_SHAPE,
    PIPELINE_MODEL_PY,
    PREPROCESS_MODEL_PY,
    preprocess_function,
)


def test_preprocess_function_is_the_model_files_preprocessing():
    images = np.random.default_rng(0).integers(0, 256, (2, *IMAGE_SHAPE), dtype=np.uint8)
    out = preprocess_function()(images)
    assert out.shape == (2, 3, 64, 64) and out.dtype == np.float32
    # channel 0 of the first pixel of the centre crop, normalised as ImageNet's mean/std
    expected = (images[0, 16, 96, 0] / 255.0 - 0.485) / 0.229
    assert abs(float(out[0, 0, 0, 0]) - expected) < 1e-5
    assert (
        "def preprocess(images)" in PREPROCESS_MODEL_PY
        and "def preprocess(images)" in PIPELINE_MODEL_PY
    )


def test_the_trivial_model_is_unbatched_on_both_servers(tmp_path):
    from benchmarks.models import write_repositories

    rayton, reference = write_repositories(tmp_path)
    for repository in (rayton, reference):
        config = (repository / "trivial" / "config.pbtxt").read_text()
        assert "max_batch_size: 0" in config and "dynamic_batching" not in config
        assert 'backend: "python"' in config
        assert "OUTPUT0" in (repository / "trivial" / "1" / "model.py").read_text()
    assert "dynamic_batching" in (rayton / "mlp" / "config.pbtxt").read_text()
