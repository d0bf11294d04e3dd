"""Served over ``tritonclient``: an OpenVINO model, a TensorFlow SavedModel, and an ensemble
whose steps run on OpenVINO, ONNX Runtime and TorchScript, equal to the same files run by their
own frameworks in-process."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from examples.builders import save_onnx_mlp
from tests.support.ports import free_port
from tests.support.requirements import missing

pytestmark = pytest.mark.cluster

try:
    import openvino as ov
except ImportError:
    ov = None
try:
    import tensorflow as tf
except ImportError:
    tf = None

WIDTH = 8
MEMBER = """\
backend: "{backend}"
max_batch_size: 8
input [ {{ name: "{input}" data_type: TYPE_FP32 dims: [ {width} ] }} ]
output [ {{ name: "{output}" data_type: TYPE_FP32 dims: [ {width} ] }} ]
dynamic_batching {{ max_queue_delay_microseconds: 1000 }}
"""
CHAIN = """\
platform: "ensemble"
max_batch_size: 8
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 8 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 8 ] } ]
ensemble_scheduling { step [
  { model_name: "mlp_openvino" model_version: -1
    input_map { key: "INPUT0" value: "IN" } output_map { key: "OUTPUT0" value: "a" } },
  { model_name: "mlp_onnx" model_version: -1
    input_map { key: "INPUT0" value: "a" } output_map { key: "OUTPUT0" value: "b" } },
  { model_name: "mlp_torch" model_version: -1
    input_map { key: "INPUT__0" value: "b" } output_map { key: "OUTPUT__0" value: "OUT" } }
] }
"""


def _torch_mlp(path: Path) -> Path:
    import torch

    torch.manual_seed(2)
    module = torch.nn.Sequential(
        torch.nn.Linear(WIDTH, 16), torch.nn.ReLU(), torch.nn.Linear(16, WIDTH)
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.jit.script(module.eval()).save(str(path))
    return path


def _write(root: Path) -> dict[str, Path]:
    files = {}
    ir = root / "mlp_openvino" / "1" / "model.xml"
    source = save_onnx_mlp(root / "ir-source.onnx", layer_sizes=(WIDTH, 16, WIDTH), seed=0)
    ir.parent.mkdir(parents=True)
    ov.save_model(ov.convert_model(str(source)), str(ir))
    source.unlink()
    files["mlp_openvino"] = ir
    files["mlp_onnx"] = save_onnx_mlp(
        root / "mlp_onnx" / "1" / "model.onnx", layer_sizes=(WIDTH, 16, WIDTH), seed=1
    )
    files["mlp_torch"] = _torch_mlp(root / "mlp_torch" / "1" / "model.pt")
    for name, backend, names in (
        ("mlp_openvino", "openvino", ("INPUT0", "OUTPUT0")),
        ("mlp_onnx", "onnxruntime", ("INPUT0", "OUTPUT0")),
        ("mlp_torch", "pytorch", ("INPUT__0", "OUTPUT__0")),
    ):
        (root / name / "config.pbtxt").write_text(
            MEMBER.format(backend=backend, input=names[0], output=names[1], width=WIDTH)
        )
    (root / "chain" / "1").mkdir(parents=True)
    (root / "chain" / "config.pbtxt").write_text(CHAIN)
    files["dense_tf"] = _savedmodel(root / "dense_tf" / "1" / "model.savedmodel")
    return files


def _savedmodel(path: Path) -> Path:
    """A SavedModel (no config.pbtxt: the server completes it from the signature)."""

    class Dense(tf.Module):
        def __init__(self):
            super().__init__()
            weights = np.random.default_rng(5).standard_normal((WIDTH, 3)).astype(np.float32)
            self.w = tf.Variable(weights)

        @tf.function(input_signature=[tf.TensorSpec([None, WIDTH], tf.float32, name="x")])
        def serve(self, x):
            return {"scores": tf.nn.softmax(x @ self.w)}

    module = Dense()
    tf.saved_model.save(module, str(path), signatures={"serving_default": module.serve})
    return path


def _in_process(files: dict[str, Path], rows: np.ndarray) -> np.ndarray:
    """The three files run by their own frameworks, one after the other."""
    import onnxruntime
    import torch

    compiled = ov.Core().compile_model(str(files["mlp_openvino"]), "CPU")
    a = np.asarray(compiled(rows)[compiled.output(0)])
    session = onnxruntime.InferenceSession(str(files["mlp_onnx"]))
    b = session.run(None, {"INPUT0": a})[0]
    module = torch.jit.load(str(files["mlp_torch"]))
    return module(torch.from_numpy(b)).detach().numpy()


@pytest.fixture(scope="module")
def zoo(serve_cluster, tmp_path_factory):
    if ov is None:
        missing("OpenVINO runtime not installed (pip install 'rayton[openvino]')")
    if tf is None:
        missing("TensorFlow not installed (pip install 'rayton[tensorflow]')")
    root = tmp_path_factory.mktemp("backend_zoo")
    files = _write(root)
    grpc_port = free_port()
    serve_cluster.deploy_live(root, "explicit", ["chain", "dense_tf"], grpc_port=grpc_port)
    yield files, serve_cluster.http_url, f"127.0.0.1:{grpc_port}"
    serve_cluster.delete_all()


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_openvino_model_answers_as_openvino_does(zoo, protocol):
    files, http_url, grpc_url = zoo
    module = httpclient if protocol == "http" else grpcclient
    client = module.InferenceServerClient(http_url if protocol == "http" else grpc_url)
    rows = np.random.default_rng(3).standard_normal((3, WIDTH)).astype(np.float32)
    tensor = module.InferInput("INPUT0", [3, WIDTH], "FP32")
    tensor.set_data_from_numpy(rows)
    served = client.infer("mlp_openvino", [tensor]).as_numpy("OUTPUT0")
    compiled = ov.Core().compile_model(str(files["mlp_openvino"]), "CPU")
    np.testing.assert_allclose(served, compiled(rows)[compiled.output(0)], rtol=1e-5, atol=1e-6)
    metadata = client.get_model_metadata("mlp_openvino")
    platform = metadata["platform"] if protocol == "http" else metadata.platform
    assert platform == "openvino"


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_an_ensemble_of_openvino_onnxruntime_and_torchscript(zoo, protocol):
    files, http_url, grpc_url = zoo
    module = httpclient if protocol == "http" else grpcclient
    client = module.InferenceServerClient(http_url if protocol == "http" else grpc_url)
    rows = np.random.default_rng(4).standard_normal((5, WIDTH)).astype(np.float32)
    tensor = module.InferInput("IN", [5, WIDTH], "FP32")
    tensor.set_data_from_numpy(rows)
    served = client.infer("chain", [tensor]).as_numpy("OUT")
    np.testing.assert_allclose(served, _in_process(files, rows), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_savedmodel_answers_as_tensorflow_does(zoo, protocol):
    files, http_url, grpc_url = zoo
    module = httpclient if protocol == "http" else grpcclient
    client = module.InferenceServerClient(http_url if protocol == "http" else grpc_url)
    rows = np.random.default_rng(6).standard_normal((4, WIDTH)).astype(np.float32)
    tensor = module.InferInput("x", [4, WIDTH], "FP32")
    tensor.set_data_from_numpy(rows)
    served = client.infer("dense_tf", [tensor]).as_numpy("scores")
    reference = tf.saved_model.load(str(files["dense_tf"])).signatures["serving_default"]
    expected = reference(x=tf.constant(rows))["scores"].numpy()
    np.testing.assert_allclose(served, expected, rtol=1e-6)
    metadata = client.get_model_metadata("dense_tf")
    platform = metadata["platform"] if protocol == "http" else metadata.platform
    assert platform == "tensorflow_savedmodel"
