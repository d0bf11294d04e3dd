"""ModelHost: many models in one process; adding, reloading, removing one leaves the others."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from deployments.core.model_host import ModelHost
from repo_adapter.errors import InferenceServerError, StatusCode
from repo_adapter.inference_types import InferRequest, InferTensor
from tests.support.live_models import model_builder, write_adder


async def answer(host: ModelHost, model: str) -> float:
    tensor = InferTensor("IN", "FP32", np.ones((1, 1), np.float32))
    response = await host.slot(model).infer(InferRequest(model, [tensor]))
    return float(response.outputs[0].data[0, 0])


async def settle(host: ModelHost, model: str, generation: str) -> None:
    for _ in range(300):
        if host.slots[model].status().generation == generation:
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"{model} never served {generation}")


async def test_models_come_and_go_without_touching_the_others(tmp_path):
    for name, offset in (("a", 1.0), ("b", 10.0), ("c", 20.0)):
        write_adder(tmp_path, name, offset=offset)
    host = ModelHost()
    await host.apply({n: ("g1", model_builder(tmp_path, n)) for n in ("a", "b")}, wait=True)
    assert (await answer(host, "a"), await answer(host, "b")) == (2.0, 11.0)
    b_slot = host.slots["b"]

    write_adder(tmp_path, "a", version=2, offset=5.0)
    await host.apply(
        {"a": ("g2", model_builder(tmp_path, "a")), "c": ("g1", model_builder(tmp_path, "c"))}
    )  # reload a, add c, remove b: all in the background
    await settle(host, "a", "g2")
    await settle(host, "c", "g1")
    assert (await answer(host, "a"), await answer(host, "c")) == (6.0, 21.0)
    with pytest.raises(InferenceServerError) as gone:
        host.slot("b")
    assert gone.value.code is StatusCode.NOT_FOUND
    for _ in range(100):
        if not b_slot.is_ready():
            break
        await asyncio.sleep(0.02)
    assert not b_slot.is_ready()  # removed and closed
    assert set(host.statuses()) == {"a", "c"}
    await host.close()
