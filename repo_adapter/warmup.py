"""Triton's model warmup (``model_warmup`` in config.pbtxt): sample requests run at load time.

A version is not ready until every warmup sample ran ``count`` times (at least once) on its
instance; a failing sample fails the version's load with the reason, as in Triton. Like
Triton, a sample of ``batch_size`` is that many one-row requests executed together (the
backend sees one batch), with inputs filled with zeros, random data, or the contents of a
file under the model's ``warmup/`` directory.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from tritonclient.grpc import model_config_pb2 as mc

from repo_adapter.backends import Backend
from repo_adapter.datatypes import config_to_protocol, protocol_to_numpy, tensor_from_bytes
from repo_adapter.errors import InferenceServerError, ModelConfigError
from repo_adapter.inference_types import InferRequest, InferTensor

WARMUP_DIRECTORY = "warmup"
_RANDOM_BYTES_LENGTH = 8


def warmup_batches(
    config: mc.ModelConfig, model_dir: Path
) -> list[tuple[str, int, list[InferRequest]]]:
    """``(sample name, count, requests)`` for each ``model_warmup`` sample of ``config``."""
    batches = []
    rng = np.random.default_rng(0)
    for sample in config.model_warmup:
        label = sample.name or "warmup"
        batch_size = max(sample.batch_size, 1)
        if config.max_batch_size > 0 and batch_size > config.max_batch_size:
            raise ModelConfigError(
                f"model warmup '{label}' of model '{config.name}': batch_size {batch_size} is "
                f"larger than max_batch_size {config.max_batch_size}"
            )
        if config.max_batch_size == 0 and sample.batch_size > 1:
            raise ModelConfigError(
                f"model warmup '{label}' of model '{config.name}': batch_size must be 1 for a "
                "model that does not batch"
            )
        tensors = [
            _tensor(config, label, name, spec, model_dir, rng)
            for name, spec in sample.inputs.items()
        ]
        requests = [
            InferRequest(config.name, list(tensors), id=f"{label}_{i}") for i in range(batch_size)
        ]
        batches.append((label, max(sample.count, 1), requests))
    return batches


def _tensor(
    config: mc.ModelConfig,
    label: str,
    name: str,
    spec: mc.ModelWarmup.Input,
    model_dir: Path,
    rng: np.random.Generator,
) -> InferTensor:
    datatype = config_to_protocol(spec.data_type)
    dims = tuple(int(d) for d in spec.dims)
    if any(d < 0 for d in dims):
        raise ModelConfigError(
            f"model warmup '{label}' of model '{config.name}': input '{name}' needs fixed dims, "
            f"got {list(dims)}"
        )
    shape = ((1,) if config.max_batch_size > 0 else ()) + dims
    count = math.prod(shape)
    kind = spec.WhichOneof("input_data_type")
    if kind == "input_data_file":
        path = model_dir / WARMUP_DIRECTORY / spec.input_data_file
        try:
            raw = path.read_bytes()
        except OSError as err:
            raise ModelConfigError(
                f"model warmup '{label}' of model '{config.name}': cannot read '{path}': "
                f"{err.strerror}"
            ) from None
        try:
            data = tensor_from_bytes(raw, datatype, shape).copy()
        except InferenceServerError as err:
            raise ModelConfigError(
                f"model warmup '{label}' of model '{config.name}': file '{path}' for input "
                f"'{name}': {err.message}"
            ) from None
    elif datatype == "BYTES":
        length = _RANDOM_BYTES_LENGTH if kind == "random_data" else 0
        data = np.array(
            [rng.integers(97, 123, length, dtype=np.uint8).tobytes() for _ in range(count)],
            dtype=np.object_,
        ).reshape(shape)
    elif kind == "random_data":
        dtype = protocol_to_numpy(datatype)
        if dtype == np.bool_:
            data = rng.integers(0, 2, shape).astype(np.bool_)
        elif np.issubdtype(dtype, np.integer):
            data = rng.integers(0, 100, shape).astype(dtype)
        else:
            data = rng.random(shape).astype(dtype)
    else:
        data = np.zeros(shape, dtype=protocol_to_numpy(datatype))
    return InferTensor(name, datatype, data)


def run_warmup(backend: Backend, config: mc.ModelConfig, model_dir: Path) -> None:
    """Run every warmup sample on ``backend``; raises the first failure."""
    batches = warmup_batches(config, model_dir)
    if not batches:
        return
    _run_sync(_warm(backend, config.name, batches))


async def _warm(
    backend: Backend, model: str, batches: Sequence[tuple[str, int, list[InferRequest]]]
) -> None:
    for label, count, requests in batches:
        for _ in range(count):
            results = await backend.execute(requests)
            for result in results:
                if isinstance(result, BaseException):
                    raise InferenceServerError(
                        f"model warmup '{label}' of model '{model}' failed: {result}"
                    )


def _run_sync(coroutine) -> None:
    """Run ``coroutine`` to completion from sync code, on this thread or beside a running loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        asyncio.run(coroutine)
        return
    with concurrent.futures.ThreadPoolExecutor(1) as pool:  # called from an event loop thread
        pool.submit(asyncio.run, coroutine).result()
