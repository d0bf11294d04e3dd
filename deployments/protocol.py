"""Model-level protocol pieces shared by single models and ensembles."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from tritonclient.grpc import model_config_pb2 as mc

from deployments.classification import classify
from repo_adapter.datatypes import config_to_protocol
from repo_adapter.errors import InferenceServerError
from repo_adapter.inference import InferTensor, RequestedOutput


def model_metadata(config: mc.ModelConfig, versions: list[str]) -> dict[str, Any]:
    """Triton's model metadata: shapes get a leading -1 when the model batches."""
    batch_dims = [-1] if config.max_batch_size > 0 else []

    def tensor(t) -> dict[str, Any]:
        dims = batch_dims + [int(d) for d in t.dims]
        return {"name": t.name, "datatype": config_to_protocol(t.data_type), "shape": dims}

    return {
        "name": config.name,
        "versions": versions,
        "platform": config.platform or config.backend,
        "inputs": [tensor(t) for t in config.input],
        "outputs": [tensor(t) for t in config.output],
    }


def select_outputs(
    produced: Mapping[str, InferTensor],
    requested: Sequence[RequestedOutput],
    labels: Mapping[str, Sequence[str]],
    batched: bool,
    missing: Callable[[str], InferenceServerError],
) -> list[InferTensor]:
    """The requested outputs in request order, classified where ``class_count`` asks for it."""
    selected = []
    for wanted in requested:
        tensor = produced.get(wanted.name)
        if tensor is None:
            raise missing(wanted.name)
        if wanted.class_count > 0:
            tensor = classify(tensor, wanted.class_count, labels.get(wanted.name), batched)
        selected.append(tensor)
    return selected
