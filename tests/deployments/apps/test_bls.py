"""BLS to a model of the caller's own process: through that model's batcher, with no hop.

Real python models of the test repository (``bls_forward`` calling ``batch_recorder``), loaded
as the shared host loads them, with the dispatcher the host installs. No Ray: a call that
left the process would fail here, as no Serve runs.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest

from deployments.apps.bls import ServeBls
from deployments.core.single_model import SingleModel
from repo_adapter.backends import InstanceSpec
from repo_adapter.inference_types import InferRequest, InferTensor
from repo_adapter.python_backend import runtime
from repo_adapter.repository import scan_model

REPOSITORY = Path(__file__).parents[1] / "model_repository"


def load(name: str) -> SingleModel:
    scanned = scan_model(REPOSITORY / name)
    assert scanned.available, scanned.error
    return SingleModel(
        scanned.config,
        REPOSITORY / name,
        scanned.versions,
        scanned.labels,
        InstanceSpec.cpu(name),
    )


@pytest.fixture
def co_hosted():
    models = {name: load(name) for name in ("bls_forward", "batch_recorder")}
    bls = ServeBls(local_model=models.get)
    runtime.set_bls_dispatcher(bls.infer)
    runtime.set_model_repository_hook(bls)
    yield models
    runtime.set_bls_dispatcher(None)
    runtime.set_model_repository_hook(None)
    for model in models.values():
        asyncio.run(model.close())


def forward(value: float, target: str) -> InferRequest:
    return InferRequest(
        "bls_forward",
        [
            InferTensor("IN", "FP32", np.full((1, 2), value, np.float32)),
            InferTensor("TARGET", "BYTES", np.array([[target.encode()]], dtype=np.object_)),
        ],
    )


@pytest.mark.parametrize("target", ["batch_recorder", "sync:batch_recorder"])
async def test_concurrent_bls_calls_batch_at_a_co_hosted_target(co_hosted, target):
    responses = await asyncio.gather(
        *(co_hosted["bls_forward"].infer(forward(i, target)) for i in range(16))
    )
    for i, response in enumerate(responses):
        np.testing.assert_array_equal(response.output("OUT").data, np.full((1, 2), i))
        assert response.output("TARGET_READY").data.tolist() == [[True]]
    assert max(int(r.output("BATCH_REQUESTS").data[0, 0]) for r in responses) > 1
    (stats,) = co_hosted["batch_recorder"].statistics()
    assert stats["inference_stats"]["success"]["count"] == 16
