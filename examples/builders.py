"""Deterministic model builders shared by the example repository, the tests and the benchmarks.

Weights are seeded random: the models are real (real ONNX graphs, real TorchScript modules)
but they classify nothing meaningful.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from pathlib import Path

import numpy as np


def _onnx():
    import onnx
    from onnx import helper

    return onnx, helper


def save_onnx_mlp(
    path: Path,
    layer_sizes: Sequence[int] = (512, 2048, 2048, 1000),
    seed: int = 0,
    input_name: str = "INPUT0",
    output_name: str = "OUTPUT0",
    batch_dim: str | int = "batch",
) -> Path:
    """An MLP with ReLU between layers: ``[batch, sizes[0]] -> [batch, sizes[-1]]`` FP32."""
    onnx, helper = _onnx()
    rng = np.random.default_rng(seed)
    nodes, initializers = [], []
    current = input_name
    for index, (fan_in, fan_out) in enumerate(itertools.pairwise(layer_sizes)):
        weight = (rng.standard_normal((fan_in, fan_out)) / np.sqrt(fan_in)).astype(np.float32)
        bias = np.zeros(fan_out, dtype=np.float32)
        initializers += [
            onnx.numpy_helper.from_array(weight, f"w{index}"),
            onnx.numpy_helper.from_array(bias, f"b{index}"),
        ]
        last = index == len(layer_sizes) - 2
        gemm_out = output_name if last else f"h{index}"
        nodes.append(helper.make_node("MatMul", [current, f"w{index}"], [f"m{index}"]))
        nodes.append(
            helper.make_node("Add", [f"m{index}", f"b{index}"], [gemm_out if last else f"a{index}"])
        )
        if not last:
            nodes.append(helper.make_node("Relu", [f"a{index}"], [gemm_out]))
        current = gemm_out
    graph = helper.make_graph(
        nodes,
        "mlp",
        [
            helper.make_tensor_value_info(
                input_name, onnx.TensorProto.FLOAT, [batch_dim, layer_sizes[0]]
            )
        ],
        [
            helper.make_tensor_value_info(
                output_name, onnx.TensorProto.FLOAT, [batch_dim, layer_sizes[-1]]
            )
        ],
        initializers,
    )
    return _save(path, helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))


def save_onnx_cnn(
    path: Path,
    image_shape: Sequence[int] = (3, 64, 64),
    num_classes: int = 10,
    channels: int = 16,
    seed: int = 0,
    input_name: str = "INPUT0",
    output_name: str = "OUTPUT0",
) -> Path:
    """A small CNN classifier: conv3x3-relu-pool, conv3x3-relu, global pool, dense, softmax."""
    onnx, helper = _onnx()
    rng = np.random.default_rng(seed)
    c_in = image_shape[0]

    def init(name: str, shape: Sequence[int], scale: float) -> None:
        initializers.append(
            onnx.numpy_helper.from_array(
                (rng.standard_normal(shape) * scale).astype(np.float32), name
            )
        )

    initializers: list = []
    init("conv1_w", (channels, c_in, 3, 3), 1 / np.sqrt(c_in * 9))
    init("conv1_b", (channels,), 0.0)
    init("conv2_w", (channels * 2, channels, 3, 3), 1 / np.sqrt(channels * 9))
    init("conv2_b", (channels * 2,), 0.0)
    init("fc_w", (channels * 2, num_classes), 1 / np.sqrt(channels * 2))
    init("fc_b", (num_classes,), 0.0)
    nodes = [
        helper.make_node("Conv", [input_name, "conv1_w", "conv1_b"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p1", "conv2_w", "conv2_b"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c2"], ["r2"]),
        helper.make_node("GlobalAveragePool", ["r2"], ["g"]),
        helper.make_node("Flatten", ["g"], ["f"], axis=1),
        helper.make_node("MatMul", ["f", "fc_w"], ["logits0"]),
        helper.make_node("Add", ["logits0", "fc_b"], ["logits"]),
        helper.make_node("Softmax", ["logits"], [output_name], axis=1),
    ]
    graph = helper.make_graph(
        nodes,
        "cnn",
        [
            helper.make_tensor_value_info(
                input_name, onnx.TensorProto.FLOAT, ["batch", *image_shape]
            )
        ],
        [
            helper.make_tensor_value_info(
                output_name, onnx.TensorProto.FLOAT, ["batch", num_classes]
            )
        ],
        initializers,
    )
    return _save(path, helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))


# (output channels, stride) of the conv net's six conv + batch-norm + ReLU blocks
CONVNET_BLOCKS = ((32, 2), (64, 2), (64, 1), (128, 2), (128, 1), (256, 2))


def save_onnx_convnet(path: Path, classes: int = 1000, seed: int = 0) -> Path:
    """The issue's compute-bound model: six 3x3 conv + batch-norm + ReLU blocks (32-64-64-128-
    128-256 channels, strides 2-2-1-2-1-2) on 3x160x160, global average pool, linear to 1000."""
    onnx, helper = _onnx()
    rng = np.random.default_rng(seed)
    initializers, nodes = [], []

    def weight(name: str, values: np.ndarray) -> str:
        initializers.append(onnx.numpy_helper.from_array(values.astype(np.float32), name))
        return name

    current, channels = "INPUT0", 3
    for index, (out, stride) in enumerate(CONVNET_BLOCKS):
        w = weight(f"w{index}", rng.standard_normal((out, channels, 3, 3)) / np.sqrt(channels * 9))
        bn = [
            weight(f"bn{index}_{part}", value)
            for part, value in (
                ("scale", np.ones(out)),
                ("bias", np.zeros(out)),
                ("mean", np.zeros(out)),
                ("var", np.ones(out)),
            )
        ]
        nodes += [
            helper.make_node(
                "Conv", [current, w], [f"c{index}"], pads=[1, 1, 1, 1], strides=[stride, stride]
            ),
            helper.make_node("BatchNormalization", [f"c{index}", *bn], [f"n{index}"]),
            helper.make_node("Relu", [f"n{index}"], [f"r{index}"]),
        ]
        current, channels = f"r{index}", out
    fc = weight("fc_w", rng.standard_normal((channels, classes)) / np.sqrt(channels))
    nodes += [
        helper.make_node("GlobalAveragePool", [current], ["g"]),
        helper.make_node("Flatten", ["g"], ["f"], axis=1),
        helper.make_node("MatMul", ["f", fc], ["OUTPUT0"]),
    ]
    graph = helper.make_graph(
        nodes,
        "convnet",
        [helper.make_tensor_value_info("INPUT0", onnx.TensorProto.FLOAT, ["batch", 3, 160, 160])],
        [helper.make_tensor_value_info("OUTPUT0", onnx.TensorProto.FLOAT, ["batch", classes])],
        initializers,
    )
    return _save(path, helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))


def save_torchscript_cnn(
    path: Path,
    image_shape: Sequence[int] = (3, 64, 64),
    num_classes: int = 10,
    channels: int = 16,
    seed: int = 0,
) -> Path:
    """The same architecture as :func:`save_onnx_cnn`, as a TorchScript module (``model.pt``)."""
    import torch
    from torch import nn

    torch.manual_seed(seed)
    model = nn.Sequential(
        nn.Conv2d(image_shape[0], channels, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(channels, channels * 2, 3, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(channels * 2, num_classes),
        nn.Softmax(dim=1),
    ).eval()
    scripted = torch.jit.script(model)
    path.parent.mkdir(parents=True, exist_ok=True)
    scripted.save(str(path))
    return path


def save_onnx_identity(
    path: Path,
    shape: Sequence[str | int | None] = ("batch", 4),
    elem_type: int | None = None,
    input_name: str = "INPUT0",
    output_name: str = "OUTPUT0",
) -> Path:
    """``OUTPUT0 = Identity(INPUT0)`` of any ONNX element type (default FLOAT) and shape.

    String dims are symbolic (dynamic), ``None`` is an unknown dim, ``()`` a scalar.
    """
    onnx, helper = _onnx()
    elem_type = onnx.TensorProto.FLOAT if elem_type is None else elem_type
    graph = helper.make_graph(
        [helper.make_node("Identity", [input_name], [output_name])],
        "identity",
        [helper.make_tensor_value_info(input_name, elem_type, list(shape))],
        [helper.make_tensor_value_info(output_name, elem_type, list(shape))],
    )
    return _save(path, helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))


def save_onnx_accumulator(path: Path) -> Path:
    """A stateful model with implicit state (Triton's accumulator): ``OUTPUT = INPUT`` on a
    sequence's START, ``INPUT + INPUT_STATE`` after it; ``OUTPUT_STATE = OUTPUT``. INT32,
    ``[batch, 1]`` each, START among the inputs."""
    onnx, helper = _onnx()
    int32 = onnx.TensorProto.INT32
    shape = ["batch", 1]
    one = helper.make_tensor("ONE", int32, [], [1])
    graph = helper.make_graph(
        [
            helper.make_node("Sub", ["ONE", "START"], ["CONTINUING"]),
            helper.make_node("Mul", ["INPUT_STATE", "CONTINUING"], ["CARRIED"]),
            helper.make_node("Add", ["INPUT", "CARRIED"], ["OUTPUT"]),
            helper.make_node("Identity", ["OUTPUT"], ["OUTPUT_STATE"]),
        ],
        "accumulator",
        [
            helper.make_tensor_value_info(name, int32, shape)
            for name in ("INPUT", "START", "INPUT_STATE")
        ],
        [helper.make_tensor_value_info(name, int32, shape) for name in ("OUTPUT", "OUTPUT_STATE")],
        initializer=[one],
    )
    return _save(path, helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))


def save_onnx_typed_ops(path: Path, batch_dim: str | int = "batch") -> Path:
    """One element-wise op per data type, to check dtype round trips.

    ``OUT_FP32 = 2 * IN_FP32`` ``[b, 3]``; ``OUT_INT64 = IN_INT64 + 1`` ``[b, 2]``;
    ``OUT_BOOL = not IN_BOOL`` ``[b, 2]``; ``OUT_FP16 = IN_FP16 + IN_FP16`` ``[b, 2]``;
    ``OUT_STRING = IN_STRING`` ``[b, 1]``.
    """
    onnx, helper = _onnx()
    proto = onnx.TensorProto
    specs = [
        ("FP32", proto.FLOAT, 3),
        ("INT64", proto.INT64, 2),
        ("BOOL", proto.BOOL, 2),
        ("FP16", proto.FLOAT16, 2),
        ("STRING", proto.STRING, 1),
    ]
    nodes = [
        helper.make_node("Mul", ["IN_FP32", "two"], ["OUT_FP32"]),
        helper.make_node("Add", ["IN_INT64", "one"], ["OUT_INT64"]),
        helper.make_node("Not", ["IN_BOOL"], ["OUT_BOOL"]),
        helper.make_node("Add", ["IN_FP16", "IN_FP16"], ["OUT_FP16"]),
        helper.make_node("Identity", ["IN_STRING"], ["OUT_STRING"]),
    ]
    initializers = [
        onnx.numpy_helper.from_array(np.array(2.0, dtype=np.float32), "two"),
        onnx.numpy_helper.from_array(np.array(1, dtype=np.int64), "one"),
    ]
    graph = helper.make_graph(
        nodes,
        "typed_ops",
        [helper.make_tensor_value_info(f"IN_{n}", t, [batch_dim, w]) for n, t, w in specs],
        [helper.make_tensor_value_info(f"OUT_{n}", t, [batch_dim, w]) for n, t, w in specs],
        initializers,
    )
    return _save(path, helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))


def save_torchscript_add_sub(path: Path, returns: str = "tuple") -> Path:
    """``forward(x, y) -> (x + y, x - y)`` as a tuple, a list, or a dict ``{"SUM", "DIFF"}``."""
    import torch
    from torch import nn

    class AddSubTuple(nn.Module):
        def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return x + y, x - y

    class AddSubList(nn.Module):
        def forward(self, x: torch.Tensor, y: torch.Tensor) -> list[torch.Tensor]:
            return [x + y, x - y]

    class AddSubDict(nn.Module):
        def forward(self, x: torch.Tensor, y: torch.Tensor) -> dict[str, torch.Tensor]:
            return {"SUM": x + y, "DIFF": x - y}

    modules = {"tuple": AddSubTuple, "list": AddSubList, "dict": AddSubDict}
    return _save_torchscript(path, modules[returns]())


def save_torchscript_typed_ops(path: Path) -> Path:
    """``forward(f32, i64, flag, f16) -> (2 * f32, i64 + 1, not flag, f16 + f16)``."""
    import torch
    from torch import nn

    class TypedOps(nn.Module):
        def forward(
            self, f32: torch.Tensor, i64: torch.Tensor, flag: torch.Tensor, f16: torch.Tensor
        ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
            return f32 * 2, i64 + 1, torch.logical_not(flag), f16 + f16

    return _save_torchscript(path, TypedOps())


def _save_torchscript(path: Path, module) -> Path:
    import torch

    path.parent.mkdir(parents=True, exist_ok=True)
    torch.jit.script(module.eval()).save(str(path))
    return path


def _float_tensor(name: str, shape: list):
    onnx, helper = _onnx()
    return helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, shape)


def _save(path: Path, model) -> Path:
    onnx, _ = _onnx()
    onnx.checker.check_model(model)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return path
