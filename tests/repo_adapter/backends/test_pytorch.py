"""PyTorch backend: TorchScript naming conventions, data types and batched execution."""

from __future__ import annotations

import warnings
from functools import partial

import numpy as np
import pytest
import torch

from examples.builders import (
    save_torchscript_add_sub,
    save_torchscript_cnn,
    save_torchscript_typed_ops,
)
from repo_adapter.backends import backend_class
from repo_adapter.backends.base import InstanceSpec
from repo_adapter.backends.pytorch import PyTorchBackend
from repo_adapter.errors import InferenceServerError, ModelConfigError, StatusCode
from repo_adapter.inference_types import InferRequest, InferTensor
from repo_adapter.repository import scan_repository
from repo_adapter.request_validation import RequestValidator

IMAGE = (3, 8, 8)
cnn = partial(save_torchscript_cnn, image_shape=IMAGE, channels=4)


def make_backend(repo, build, config_text, name="m", kind="CPU", load=True):
    """Write ``<repo>/<name>/1/model.pt`` and config.pbtxt, scan, build (and load) a backend."""
    build(repo / name / "1" / "model.pt")
    (repo / name / "config.pbtxt").write_text(f'backend: "pytorch"\n{config_text}')
    scanned = scan_repository(repo, names=[name])[name]
    assert scanned.available, scanned.error
    model = scanned.model_version(scanned.versions[-1])
    backend = PyTorchBackend(model, InstanceSpec(f"{name}_0", kind, 0))
    if load:
        backend.load()
    return backend


def tensors_config(kind, *specs):
    """``tensors_config("input", ("X", "FP32", [4]), ...)`` -> pbtxt text."""
    entries = [f'{{ name: "{n}" data_type: TYPE_{t} dims: {list(d)} }}' for n, t, d in specs]
    return f"{kind} [{', '.join(entries)}]\n"


def request(request_id="", **tensors):
    inputs = [InferTensor(name, dt, data) for name, (dt, data) in tensors.items()]
    return InferRequest(model_name="m", inputs=inputs, id=request_id)


def add_sub_config(inputs, outputs, max_batch_size=8):
    return (
        f"max_batch_size: {max_batch_size}\n"
        + tensors_config("input", *[(n, "FP32", [4]) for n in inputs])
        + tensors_config("output", *[(n, "FP32", [4]) for n in outputs])
    )


X = np.arange(8, dtype=np.float32).reshape(2, 4)
Y = np.full((2, 4), 10.0, dtype=np.float32)


def test_registry_resolves_pytorch():
    assert backend_class("pytorch") is PyTorchBackend


async def test_cnn_batch_is_split_back_per_request(tmp_path):
    config = (
        "max_batch_size: 8\n"
        + tensors_config("input", ("INPUT__0", "FP32", IMAGE))
        + tensors_config("output", ("OUTPUT__0", "FP32", [10]))
    )
    backend = make_backend(tmp_path, cnn, config)
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal((rows, *IMAGE)).astype(np.float32) for rows in (1, 3, 2)]
    batched = await backend.execute(
        [request(f"r{i}", INPUT__0=("FP32", a)) for i, a in enumerate(arrays)]
    )
    assert [r.id for r in batched] == ["r0", "r1", "r2"]
    reference = torch.jit.load(str(backend.model.model_path))
    for array, response in zip(arrays, batched, strict=True):
        [alone] = await backend.execute([request(INPUT__0=("FP32", array))])
        output = response.output("OUTPUT__0")
        assert output.datatype == "FP32" and output.shape == (array.shape[0], 10)
        np.testing.assert_allclose(output.data, alone.output("OUTPUT__0").data, atol=1e-6)
        expected = reference(torch.from_numpy(array)).detach().numpy()
        np.testing.assert_allclose(output.data, expected, rtol=1e-5, atol=1e-6)
    backend.unload()


async def test_named_index_inputs_are_positional(tmp_path):
    # Config order differs from the indices: INPUT__0 is forward()'s first argument (x).
    config = add_sub_config(["INPUT__1", "INPUT__0"], ["OUTPUT__1", "OUTPUT__0"])
    backend = make_backend(tmp_path, save_torchscript_add_sub, config)
    [response] = await backend.execute([request(INPUT__1=("FP32", Y), INPUT__0=("FP32", X))])
    np.testing.assert_array_equal(response.output("OUTPUT__0").data, X + Y)
    np.testing.assert_array_equal(response.output("OUTPUT__1").data, X - Y)
    assert [t.name for t in response.outputs] == ["OUTPUT__1", "OUTPUT__0"]


async def test_forward_argument_names_are_used(tmp_path):
    config = add_sub_config(["y", "x"], ["SUM", "DIFF"])
    backend = make_backend(tmp_path, save_torchscript_add_sub, config)
    [response] = await backend.execute([request(y=("FP32", Y), x=("FP32", X))])
    np.testing.assert_array_equal(response.output("SUM").data, X + Y)
    np.testing.assert_array_equal(response.output("DIFF").data, X - Y)


async def test_other_names_follow_config_order(tmp_path):
    config = add_sub_config(["B", "A"], ["FIRST", "SECOND"])
    backend = make_backend(tmp_path, save_torchscript_add_sub, config)
    [response] = await backend.execute([request(A=("FP32", X), B=("FP32", Y))])
    np.testing.assert_array_equal(response.output("FIRST").data, Y + X)
    np.testing.assert_array_equal(response.output("SECOND").data, Y - X)


async def test_dict_return_is_matched_by_output_name(tmp_path):
    config = add_sub_config(["INPUT__0", "INPUT__1"], ["DIFF", "SUM"])
    build = partial(save_torchscript_add_sub, returns="dict")
    backend = make_backend(tmp_path, build, config)
    [response] = await backend.execute([request(INPUT__0=("FP32", X), INPUT__1=("FP32", Y))])
    np.testing.assert_array_equal(response.output("SUM").data, X + Y)
    np.testing.assert_array_equal(response.output("DIFF").data, X - Y)


async def test_dict_return_without_the_output_fails(tmp_path):
    config = add_sub_config(["INPUT__0", "INPUT__1"], ["SUM", "PRODUCT"])
    build = partial(save_torchscript_add_sub, returns="dict")
    backend = make_backend(tmp_path, build, config)
    with pytest.raises(InferenceServerError, match="'PRODUCT' is not found") as info:
        await backend.execute([request(INPUT__0=("FP32", X), INPUT__1=("FP32", Y))])
    assert info.value.code == StatusCode.INTERNAL


async def test_list_return_uses_output_indices(tmp_path):
    config = add_sub_config(["INPUT__0", "INPUT__1"], ["OUTPUT__1", "OUTPUT__0"])
    build = partial(save_torchscript_add_sub, returns="list")
    backend = make_backend(tmp_path, build, config)
    [response] = await backend.execute([request(INPUT__0=("FP32", X), INPUT__1=("FP32", Y))])
    np.testing.assert_array_equal(response.output("OUTPUT__0").data, X + Y)
    np.testing.assert_array_equal(response.output("OUTPUT__1").data, X - Y)


async def test_dtype_round_trip_fp32_int64_bool_fp16(tmp_path):
    specs = [("FP32", [3]), ("INT64", [2]), ("BOOL", [2]), ("FP16", [2])]
    config = (
        "max_batch_size: 4\n"
        + tensors_config(
            "input",
            *[(n, t, d) for n, (t, d) in zip(("f32", "i64", "flag", "f16"), specs, strict=True)],
        )
        + tensors_config("output", *[(f"OUTPUT__{i}", t, d) for i, (t, d) in enumerate(specs)])
    )
    backend = make_backend(tmp_path, save_torchscript_typed_ops, config)

    def make(rows, offset):
        return request(
            f32=("FP32", np.full((rows, 3), 1.5 + offset, np.float32)),
            i64=("INT64", np.full((rows, 2), 2**40 + offset, np.int64)),
            flag=("BOOL", np.array([[True, False]] * rows)),
            f16=("FP16", np.full((rows, 2), 0.25, np.float16)),
        )

    first, second = await backend.execute([make(2, 0), make(1, 1)])
    dtypes = [first.output(f"OUTPUT__{i}").data.dtype for i in range(4)]
    assert dtypes == [np.float32, np.int64, np.bool_, np.float16]
    np.testing.assert_array_equal(first.output("OUTPUT__0").data, np.full((2, 3), 3.0))
    np.testing.assert_array_equal(second.output("OUTPUT__0").data, np.full((1, 3), 5.0))
    assert first.output("OUTPUT__1").data[0, 0] == 2**40 + 1
    assert second.output("OUTPUT__1").data[0, 0] == 2**40 + 2
    np.testing.assert_array_equal(first.output("OUTPUT__2").data, [[False, True]] * 2)
    np.testing.assert_array_equal(first.output("OUTPUT__3").data, np.full((2, 2), 0.5))


async def test_read_only_inputs_are_copied_not_shared(tmp_path):
    config = add_sub_config(["x", "y"], ["SUM", "DIFF"])
    backend = make_backend(tmp_path, save_torchscript_add_sub, config)
    x = np.frombuffer(X.tobytes(), dtype=np.float32).reshape(2, 4)  # read-only, as from the wire
    assert not x.flags.writeable
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # torch warns on non-writeable numpy arrays
        [response] = await backend.execute([request(x=("FP32", x), y=("FP32", Y))])
    np.testing.assert_array_equal(response.output("SUM").data, X + Y)


async def test_max_batch_size_zero_model(tmp_path):
    config = add_sub_config(["x", "y"], ["SUM", "DIFF"], max_batch_size=0).replace("[4]", "[2, 4]")
    backend = make_backend(tmp_path, save_torchscript_add_sub, config)
    [response] = await backend.execute([request(x=("FP32", X), y=("FP32", Y))])
    assert response.output("SUM").shape == (2, 4)
    np.testing.assert_array_equal(response.output("SUM").data, X + Y)


async def test_reshape_on_input(tmp_path):
    config = """max_batch_size: 4
input [{ name: "INPUT__0" data_type: TYPE_FP32 dims: [192] reshape: { shape: [3, 8, 8] } }]
output [{ name: "OUTPUT__0" data_type: TYPE_FP32 dims: [10] }]"""
    backend = make_backend(tmp_path, cnn, config)
    images = np.random.default_rng(3).standard_normal((2, *IMAGE)).astype(np.float32)
    given = request(INPUT__0=("FP32", images.reshape(2, 192)))
    RequestValidator(backend.config).normalize(given)  # the model layer's reshape, once
    [response] = await backend.execute([given])
    reference = torch.jit.load(str(backend.model.model_path))
    expected = reference(torch.from_numpy(images)).detach().numpy()
    np.testing.assert_allclose(response.output("OUTPUT__0").data, expected, atol=1e-6)


def test_bytes_inputs_are_unsupported(tmp_path):
    config = (
        "max_batch_size: 4\n"
        + tensors_config("input", ("x", "STRING", [1]), ("y", "FP32", [4]))
        + tensors_config("output", ("SUM", "FP32", [4]), ("DIFF", "FP32", [4]))
    )
    backend = make_backend(tmp_path, save_torchscript_add_sub, config, load=False)
    with pytest.raises(
        InferenceServerError, match="List\\[str\\] inputs are not supported"
    ) as info:
        backend.load()
    assert info.value.code == StatusCode.UNSUPPORTED
    assert "TYPE_STRING for input 'x' for model 'm'" in info.value.message


async def test_output_dtype_mismatch_is_reported(tmp_path):
    config = add_sub_config(["x", "y"], ["SUM", "DIFF"]).replace(
        'name: "DIFF" data_type: TYPE_FP32', 'name: "DIFF" data_type: TYPE_INT32'
    )
    backend = make_backend(tmp_path, save_torchscript_add_sub, config)
    with pytest.raises(InferenceServerError) as info:
        await backend.execute([request(x=("FP32", X), y=("FP32", Y))])
    assert info.value.code == StatusCode.INVALID_ARG
    assert "expects datatype TYPE_INT32 for output 'DIFF', model provides TYPE_FP32" in str(
        info.value
    )


def test_input_count_mismatch_is_a_config_error(tmp_path):
    config = add_sub_config(["INPUT__0"], ["OUTPUT__0"])
    backend = make_backend(tmp_path, save_torchscript_add_sub, config, load=False)
    with pytest.raises(ModelConfigError, match="configuration expects 1 inputs, model provides 2"):
        backend.load()


def test_broken_model_file_is_unavailable(tmp_path):
    def broken(path):
        path.parent.mkdir(parents=True)
        path.write_bytes(b"not a torchscript archive")

    config = add_sub_config(["x", "y"], ["SUM", "DIFF"])
    backend = make_backend(tmp_path, broken, config, name="broken", load=False)
    with pytest.raises(InferenceServerError) as info:
        backend.load()
    assert info.value.code == StatusCode.UNAVAILABLE
    assert "model 'broken'" in info.value.message
    assert str(backend.model.model_path) in info.value.message


def test_gpu_instance_needs_cuda(tmp_path):
    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA GPU")
    config = add_sub_config(["x", "y"], ["SUM", "DIFF"])
    backend = make_backend(tmp_path, save_torchscript_add_sub, config, kind="GPU", load=False)
    with pytest.raises(InferenceServerError, match="no CUDA GPU available") as info:
        backend.load()
    assert info.value.code == StatusCode.UNAVAILABLE


def test_threads_env_sets_torch_threads(tmp_path, monkeypatch):
    before = torch.get_num_threads()
    monkeypatch.setenv("RAYTON_TORCH_THREADS", "1")
    try:
        make_backend(tmp_path, save_torchscript_add_sub, add_sub_config(["x", "y"], ["S", "D"]))
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)
