"""ModelSlot: in-place replacement with no failed request, failed reloads keep the old model."""

from __future__ import annotations

import asyncio
import shutil
import threading
from pathlib import Path

import numpy as np
import pytest

from deployments.core.model_slot import ModelSlot
from repo_adapter.errors import InferenceServerError, StatusCode
from repo_adapter.inference_types import InferRequest, InferTensor
from repo_adapter.model_state import ModelState, VersionState
from tests.support.live_models import model_builder, write_adder


async def answer(slot: ModelSlot, value: float = 1.0) -> float:
    request = InferRequest("m", [InferTensor("IN", "FP32", np.array([[value]], np.float32))])
    response = await slot.infer(request)
    return float(response.outputs[0].data[0, 0])


async def test_first_load_is_awaited_then_reloads_swap_without_a_gap(tmp_path):
    write_adder(tmp_path, "m", offset=1.0)
    slot = ModelSlot("m")
    with pytest.raises(InferenceServerError) as not_loaded:
        await answer(slot)
    assert not_loaded.value.code is StatusCode.UNAVAILABLE
    await slot.load("g1", model_builder(tmp_path, "m"))
    assert await answer(slot) == 2.0 and slot.status().generation == "g1"

    write_adder(tmp_path, "m", version=2, offset=5.0)
    gate = threading.Event()
    await slot.load("g2", model_builder(tmp_path, "m", gate))  # returns while g2 loads
    status = slot.status()
    assert (status.generation, status.target) == ("g1", "g2")
    results = await asyncio.gather(*(answer(slot) for _ in range(20)))
    assert set(results) == {2.0}  # the serving generation answers meanwhile
    gate.set()
    answers = []
    for _ in range(200):
        answers.append(await answer(slot))
        if slot.status().generation == "g2":
            break
        await asyncio.sleep(0.02)
    assert slot.status().generation == "g2" and await answer(slot) == 6.0
    assert slot.state() == {"2": VersionState(ModelState.READY)}
    await slot.close()


async def test_a_reload_that_fails_keeps_the_serving_generation(tmp_path):
    write_adder(tmp_path, "m", offset=1.0)
    slot = ModelSlot("m")
    await slot.load("g1", model_builder(tmp_path, "m"))
    write_adder(tmp_path, "m", version=2, fail_initialize=True)
    await slot.load("g2", model_builder(tmp_path, "m"))
    for _ in range(200):
        if slot.status().error:
            break
        await asyncio.sleep(0.02)
    status = slot.status()
    assert status.generation == "g1" and status.target == "g2"
    assert "init exploded" in status.error
    assert await answer(slot) == 2.0
    await slot.load("g1", model_builder(tmp_path, "m"))  # asking for what serves: nothing to do
    assert slot.status().target == "g1"
    await slot.close()


async def test_requests_running_on_the_old_model_finish(tmp_path):
    write_adder(tmp_path, "m", offset=1.0, delay_us=200_000)  # requests wait in its queue
    slot = ModelSlot("m")
    await slot.load("g1", model_builder(tmp_path, "m"))
    in_flight = [asyncio.create_task(answer(slot)) for _ in range(4)]
    await asyncio.sleep(0.01)
    write_adder(tmp_path, "m", version=2, offset=5.0)
    await slot.load("g2", model_builder(tmp_path, "m"))
    assert await asyncio.gather(*in_flight) == [2.0] * 4
    await slot.close()


SEQUENCE_SUM = Path(__file__).parents[1] / "model_repository" / "sequence_sum"


async def add_one(slot: ModelSlot, sequence: int, start: bool = False) -> tuple[int, str]:
    """The running sum after adding 1 to ``sequence``, and the version that ran it."""
    request = InferRequest(
        "sequence_sum",
        [InferTensor("IN", "INT32", np.array([[1]], np.int32))],
        parameters={"sequence_id": sequence, "sequence_start": start},
    )
    response = await slot.infer(request)
    return int(response.outputs[0].data[0, 0]), response.model_version


async def test_a_reload_lets_running_sequences_finish_on_the_generation_they_started_on(
    tmp_path,
):
    shutil.copytree(SEQUENCE_SUM, tmp_path / "sequence_sum")
    slot = ModelSlot("sequence_sum")
    await slot.load("g1", model_builder(tmp_path, "sequence_sum"))
    assert await add_one(slot, 7, start=True) == (1, "1")
    shutil.copytree(tmp_path / "sequence_sum" / "1", tmp_path / "sequence_sum" / "2")
    await slot.load("g2", model_builder(tmp_path, "sequence_sum"))
    for _ in range(200):
        if slot.status().generation == "g2":
            break
        await asyncio.sleep(0.02)
    assert slot.status().generation == "g2"
    assert await add_one(slot, 7) == (2, "1")  # its state is in version 1's instance
    assert await add_one(slot, 8, start=True) == (1, "2")  # a new sequence: the new version
    assert await add_one(slot, 7, start=True) == (1, "2")  # started again: the new one too
    assert await add_one(slot, 7) == (2, "2")
    await asyncio.sleep(0.8)  # sequence_sum idles sequences out after 0.5 s
    assert slot._retiring == []  # version 1 closed once it held no sequence
    await slot.close()


async def test_status_tells_the_memory_budget_what_runs_and_when_it_was_last_used(tmp_path):
    write_adder(tmp_path, "m", offset=1.0)
    slot = ModelSlot("m")
    await slot.load("g1", model_builder(tmp_path, "m"))
    idle = slot.status()
    assert (idle.in_flight, idle.last_used, idle.footprint_bytes) == (0, 0.0, 0)  # not measured
    assert await answer(slot) == 2.0
    used = slot.status()
    assert used.last_used > 0 and used.in_flight == 0
    await slot.close()


async def test_a_measured_load_records_the_memory_it_added(tmp_path):
    write_adder(tmp_path, "m", offset=1.0)
    slot = ModelSlot("m")
    ballast: list[bytearray] = []

    def build():
        ballast.append(bytearray(64 * 2**20))  # 64 MiB the load keeps, touched
        ballast[0][::4096] = b"x" * len(ballast[0][::4096])
        return model_builder(tmp_path, "m")()

    await slot.load("g1", build, measure=True)
    assert slot.status().footprint_bytes >= 60 * 2**20
    assert await answer(slot) == 2.0
    await slot.close()


async def test_a_load_asked_again_while_the_first_runs_builds_the_model_once(tmp_path):
    write_adder(tmp_path, "m", offset=1.0)
    slot = ModelSlot("m")
    gate = threading.Event()
    builds = []

    def build():
        builds.append(1)
        return model_builder(tmp_path, "m", gate)()

    first = asyncio.ensure_future(slot.load("g1", build))
    await asyncio.sleep(0.05)
    again = asyncio.ensure_future(slot.load("g1", build))  # the host applied a newer set
    await asyncio.sleep(0.05)
    gate.set()
    await asyncio.gather(first, again)
    assert len(builds) == 1 and await answer(slot) == 2.0
    await slot.close()


async def test_a_slot_closed_during_its_first_load_closes_what_it_built(tmp_path):
    write_adder(tmp_path, "m", offset=1.0)
    slot = ModelSlot("m")
    gate = threading.Event()
    loading = asyncio.ensure_future(slot.load("g1", model_builder(tmp_path, "m", gate)))
    await asyncio.sleep(0.05)
    await slot.close()  # evicted before it served
    gate.set()
    await loading
    assert slot.serving is None
