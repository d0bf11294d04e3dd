"""What a backend reads from a model file, checked against or filled into the model config.

Triton's backends share these rules for framework models (ONNX Runtime, OpenVINO): a config
without inputs and outputs is completed from the model (``max_batch_size`` when every tensor's
first dimension is dynamic), and a config that has them must describe the model.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tritonclient.grpc import model_config_pb2 as mc

from repo_adapter.errors import ModelConfigError
from repo_adapter.version_dirs import available_versions

DEFAULT_MAX_BATCH_SIZE = 4  # tritonserver's --backend-config default-max-batch-size


@dataclass(frozen=True)
class TensorInfo:
    """One model input/output as the model file declares it (-1 for dynamic dims)."""

    name: str
    data_type: int
    dims: tuple[int, ...]


def autocomplete_file(
    config: mc.ModelConfig, model_dir: Path, default_filename: str
) -> Path | None:
    """The model path of the newest version the version policy serves (the one Triton's
    default policy loads and completes from); None without a version."""

    versions = available_versions(model_dir)
    if config.version_policy.HasField("specific"):
        versions = [v for v in versions if v in config.version_policy.specific.versions]
    if not versions:
        return None
    filename = config.default_model_filename or default_filename
    return model_dir / str(versions[-1]) / filename


def complete_max_batch(config, inputs: dict, outputs: dict) -> None:
    infos = [*inputs.values(), *outputs.values()]
    if not all(info.dims and info.dims[0] == -1 for info in infos):
        if config.max_batch_size != 0:
            raise ModelConfigError(
                f"autofill failed for model '{config.name}': model does not support batching "
                "while non-zero max_batch_size is specified"
            )
        return
    if config.max_batch_size == 0:
        config.max_batch_size = DEFAULT_MAX_BATCH_SIZE
    scheduled = config.HasField("dynamic_batching") or config.HasField("sequence_batching")
    if config.max_batch_size > 1 and not scheduled:
        config.dynamic_batching.SetInParent()


def fill_tensors(tensors, infos: dict[str, TensorInfo], max_batch_size: int) -> None:
    for info in infos.values():
        tensor = tensors.add(name=info.name, data_type=info.data_type)
        tensor.dims.extend(info.dims[1:] if max_batch_size > 0 else info.dims)
        if not tensor.dims:  # 'dims' may not be empty: a scalar is [1], reshaped to []
            tensor.dims.append(1)
            if max_batch_size > 0:
                tensor.reshape.SetInParent()


def check_tensors(config, kind: str, tensors, infos: dict[str, TensorInfo]) -> None:
    for tensor in tensors:
        info = infos.get(tensor.name)
        if info is None:
            raise ModelConfigError(
                f"unexpected inference {kind} '{tensor.name}', allowed {kind}s are: "
                f"{', '.join(sorted(infos))}"
            )
        if tensor.data_type != info.data_type:
            raise ModelConfigError(
                f"unable to load model '{config.name}', configuration expects datatype "
                f"{mc.DataType.Name(tensor.data_type)} for {kind} '{tensor.name}', model "
                f"provides {mc.DataType.Name(info.data_type)}"
            )
        dims = list(tensor.reshape.shape if tensor.HasField("reshape") else tensor.dims)
        compare_dims(config, tensor.name, list(info.dims), dims, exact=kind == "output")


def compare_dims(config, name: str, model: list[int], dims: list[int], exact: bool) -> None:
    if not model:  # a scalar: Triton only accepts dims made of 1s
        if any(d != 1 for d in dims):
            raise ModelConfigError(
                f"unable to load model '{config.name}', scalar tensor '{name}', should only "
                f"provide 1 in the model configuration. Model configuration provided: {dims}."
            )
        return
    prefix = f"model '{config.name}', tensor '{name}': "
    if config.max_batch_size > 0:
        if model[0] != -1:
            raise ModelConfigError(
                f"{prefix}for the model to support batching the shape should have at least 1 "
                "dimension and the first dimension must be -1; but shape expected by the model "
                f"is {model}"
            )
        dims = [-1, *dims]
    pairs = zip(model, dims, strict=False)
    if len(model) != len(dims) or any(m != d for m, d in pairs if exact or m != -1):
        raise ModelConfigError(
            f"{prefix}the model expects {len(model)} dimensions (shape {model}) but the model "
            f"configuration specifies {len(dims)} dimensions (shape {dims})"
        )


def complete_config(
    config: mc.ModelConfig, inputs: dict[str, TensorInfo], outputs: dict[str, TensorInfo]
) -> None:
    """Auto-complete from what the model file declares: ``max_batch_size``, then each side the
    config leaves empty is filled and each side it gives is checked against the model."""
    complete_max_batch(config, inputs, outputs)
    for kind, tensors, infos in (
        ("input", config.input, inputs),
        ("output", config.output, outputs),
    ):
        if tensors:
            check_tensors(config, kind, tensors, infos)
        else:
            fill_tensors(tensors, infos, config.max_batch_size)
