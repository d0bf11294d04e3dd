"""The tensorflow backend on real SavedModels written by TensorFlow in the test."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from repo_adapter.backends import InstanceSpec, backend_class
from repo_adapter.backends.tensorflow import TensorFlowBackend
from repo_adapter.errors import InferenceServerError, StatusCode
from repo_adapter.inference_types import InferRequest, InferTensor
from repo_adapter.repository import scan_repository
from tests.support.requirements import missing

try:
    import tensorflow as tf
except ImportError:  # CI installs it; elsewhere each test skips with the reason
    tf = None


@pytest.fixture(autouse=True)
def _needs_tensorflow():
    if tf is None:
        missing("TensorFlow not installed (pip install 'rayton[tensorflow]')")


def save_dense(path: Path, width: int = 6, classes: int = 3) -> Path:
    """A dense layer plus a sequence sum, as a SavedModel with two signatures."""

    class Dense(tf.Module):
        def __init__(self):
            super().__init__()
            rng = np.random.default_rng(0)
            self.w = tf.Variable(rng.standard_normal((width, classes)).astype(np.float32))

        @tf.function(input_signature=[tf.TensorSpec([None, width], tf.float32, name="x")])
        def serve(self, x):
            return {"scores": tf.nn.softmax(x @ self.w)}

        @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int64, name="tokens")])
        def total(self, tokens):
            return {"sum": tf.reduce_sum(tokens, axis=1, keepdims=True)}

    module = Dense()
    signatures = {"serving_default": module.serve, "total": module.total}
    tf.saved_model.save(module, str(path), signatures=signatures)
    return path


def scanned(repo: Path, name: str, config: str = ""):
    save_dense(repo / name / "1" / "model.savedmodel")
    if config:
        (repo / name / "config.pbtxt").write_text(config)
    model = scan_repository(repo, names=[name])[name]
    assert model.available, model.error
    return model


def loaded(model) -> TensorFlowBackend:
    backend = TensorFlowBackend(model.model_version(1), InstanceSpec.cpu(model.name))
    backend.load()
    return backend


def test_a_savedmodel_is_detected_and_auto_completed(tmp_path):
    model = scanned(tmp_path, "dense")  # no config.pbtxt at all
    config = model.config
    assert backend_class("tensorflow") is TensorFlowBackend
    assert (config.backend, config.platform) == ("tensorflow", "tensorflow_savedmodel")
    assert config.default_model_filename == "model.savedmodel"
    assert config.max_batch_size == 4 and config.HasField("dynamic_batching")
    assert [(t.name, list(t.dims)) for t in config.input] == [("x", [6])]
    assert [(t.name, list(t.dims)) for t in config.output] == [("scores", [3])]
    assert config.instance_group[0].count == 2  # core's default for tensorflow CPU instances


async def test_a_batch_equals_tensorflows_own_result(tmp_path):
    model = scanned(tmp_path, "dense")
    backend = loaded(model)
    rng = np.random.default_rng(1)
    parts = [rng.standard_normal((rows, 6)).astype(np.float32) for rows in (2, 3)]
    requests = [InferRequest("dense", [InferTensor("x", "FP32", p)]) for p in parts]
    responses = await backend.execute(requests)
    reference = tf.saved_model.load(str(model.path / "1" / "model.savedmodel"))
    for part, response in zip(parts, responses, strict=True):
        expected = reference.signatures["serving_default"](x=tf.constant(part))["scores"]
        np.testing.assert_allclose(response.output("scores").data, expected.numpy(), rtol=1e-6)


async def test_a_named_signature_with_dynamic_shapes(tmp_path):
    config = (
        'platform: "tensorflow_savedmodel" max_batch_size: 8\n'
        'input [ { name: "tokens" data_type: TYPE_INT64 dims: [ -1 ] } ]\n'
        'output [ { name: "sum" data_type: TYPE_INT64 dims: [ 1 ] } ]\n'
        'parameters { key: "TF_SIGNATURE_DEF" value: { string_value: "total" } }\n'
    )
    backend = loaded(scanned(tmp_path, "total", config))
    for length in (3, 7):  # the same model, another sequence length
        tokens = np.arange(2 * length, dtype=np.int64).reshape(2, length)
        [response] = await backend.execute(
            [InferRequest("total", [InferTensor("tokens", "INT64", tokens)])]
        )
        np.testing.assert_array_equal(response.output("sum").data, tokens.sum(1, keepdims=True))


def test_a_config_that_does_not_match_the_signature_is_refused(tmp_path):
    config = (
        "max_batch_size: 4\n"
        'input [ { name: "x" data_type: TYPE_FP32 dims: [ 5 ] } ]\n'
        'output [ { name: "scores" data_type: TYPE_FP32 dims: [ 3 ] } ]\n'
    )
    save_dense(tmp_path / "wrong" / "1" / "model.savedmodel")
    (tmp_path / "wrong" / "config.pbtxt").write_text(config)
    model = scan_repository(tmp_path, names=["wrong"])["wrong"]
    backend = TensorFlowBackend(model.model_version(1), InstanceSpec.cpu("wrong"))
    with pytest.raises(Exception, match="dimensions"):
        backend.load()


def test_missing_corrupt_and_unknown_signature_are_unavailable_with_the_reason(tmp_path):
    model = scanned(tmp_path, "dense")
    config = model.config
    config.parameters["TF_SIGNATURE_DEF"].string_value = "absent"
    with pytest.raises(InferenceServerError, match="no signature 'absent'") as raised:
        loaded(model)
    assert raised.value.code == StatusCode.UNAVAILABLE
    del config.parameters["TF_SIGNATURE_DEF"]
    (model.path / "1" / "model.savedmodel" / "saved_model.pb").write_bytes(b"not a model")
    with pytest.raises(InferenceServerError, match="TensorFlow cannot load the SavedModel"):
        loaded(model)
    import shutil

    shutil.rmtree(model.path / "1" / "model.savedmodel")
    with pytest.raises(InferenceServerError, match="unable to find"):
        loaded(model)
