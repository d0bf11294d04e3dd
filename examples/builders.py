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


def _float_tensor(name: str, shape: list):
    onnx, helper = _onnx()
    return helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, shape)


def _save(path: Path, model) -> Path:
    onnx, _ = _onnx()
    onnx.checker.check_model(model)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return path
