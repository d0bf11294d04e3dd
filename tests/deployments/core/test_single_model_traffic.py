"""A model's requests that name no version follow its traffic policy, without Ray: real
python-backend versions, the real batcher (repo_adapter/version_traffic.py)."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from deployments.core.model_slot import ModelSlot
from deployments.core.single_model import SingleModel
from repo_adapter.backends import InstanceSpec
from repo_adapter.inference_types import InferRequest, InferTensor
from repo_adapter.repository import scan_model
from repo_adapter.version_traffic import ShadowShare, TrafficPolicy
from tests.support.versioned_models import write_versioned_model


def load(model_dir: Path) -> SingleModel:
    scanned = scan_model(model_dir)
    assert scanned.available, scanned.error
    return SingleModel(
        scanned.config, model_dir, scanned.versions, {}, InstanceSpec.cpu(scanned.name)
    )


def request(value: float = 1.0, version: str = "") -> InferRequest:
    data = np.array([[value]], np.float32)
    return InferRequest("versioned", [InferTensor("IN", "FP32", data)], model_version=version)


async def answered_versions(model, count: int, value: float = 1.0) -> Counter:
    responses = await asyncio.gather(*(model.infer(request(value)) for _ in range(count)))
    seen = Counter()
    for response in responses:
        version = int(response.output("VERSION").data[0, 0])
        assert response.model_version == str(version)
        seen[version] += 1
    return seen


@pytest.fixture
def model_dir(tmp_path):
    return write_versioned_model(
        tmp_path, parameters={"VERSION_WEIGHTS": "1:90,2:10"}, failing_version=3
    )


async def test_the_configs_weights_split_requests_that_name_no_version(model_dir):
    model = load(model_dir)
    try:
        assert await answered_versions(model, 1000) == {1: 900, 2: 100}
        # A request naming a version still gets it.
        response = await model.infer(request(version="3"))
        assert int(response.output("VERSION").data[0, 0]) == 3
    finally:
        await model.close()


async def test_without_weights_the_highest_version_answers_as_in_triton(tmp_path):
    model = load(write_versioned_model(tmp_path))
    try:
        assert await answered_versions(model, 20) == {3: 20}
    finally:
        await model.close()


async def test_shadow_copies_run_on_their_version_and_never_answer_the_client(model_dir):
    model = load(model_dir)
    try:
        model.steer(TrafficPolicy({1: 1.0}, ShadowShare(3, 50.0)))
        assert await answered_versions(model, 40) == {1: 40}
        # Negative inputs fail in version 3: the clients' requests still succeed.
        assert await answered_versions(model, 40, value=-1.0) == {1: 40}
        await asyncio.sleep(0.2)  # the copies finish in the background
        metrics = {entry["version"]: entry for entry in model.metrics()}
        shadow = metrics["3"]
        assert shadow["shadow"] is True
        assert (shadow["shadow_success"], shadow["shadow_failure"]) == (20, 20)
        assert shadow["shadow_ns"] > 0 and shadow["shadow_dropped"] == 0
        assert "shadow" not in metrics["1"]
        # Version 3's own statistics count its copies apart from version 1's requests.
        stats = {entry["version"]: entry for entry in model.statistics()}
        assert stats["1"]["inference_stats"]["success"]["count"] == 80
        shadow_stats = stats["3"]["inference_stats"]
        # (a python model's error response counts as a success there, as Triton counts it)
        assert shadow_stats["success"]["count"] + shadow_stats["fail"]["count"] == 40
    finally:
        await model.close()


async def test_a_slow_shadow_drops_copies_beyond_its_limit_and_keeps_the_clients_fast(tmp_path):
    model = load(write_versioned_model(tmp_path, slow_version=2, slow_s=0.5))
    try:
        model.steer(TrafficPolicy({1: 1.0}, ShadowShare(2, 100.0)))
        start = asyncio.get_running_loop().time()
        assert await answered_versions(model, 100) == {1: 100}
        assert asyncio.get_running_loop().time() - start < 0.5 * 8  # never waited on copies
        record = {entry["version"]: entry for entry in model.metrics()}["2"]
        assert record["shadow_dropped"] == 100 - 64
    finally:
        await model.close()


async def test_the_slot_steers_the_serving_model_and_every_later_generation(model_dir):
    slot = ModelSlot("versioned")
    await slot.load("g1", lambda: load(model_dir))
    try:
        slot.steer(TrafficPolicy({2: 1.0}))
        assert await answered_versions(slot, 10) == {2: 10}
        assert slot.status().traffic == {"weights": {"2": 1.0}}
        await slot.load("g2", lambda: load(model_dir))
        for _ in range(200):
            if slot.status().generation == "g2":
                break
            await asyncio.sleep(0.05)
        assert slot.status().generation == "g2"
        assert await answered_versions(slot, 10) == {2: 10}  # not the config's 90/10
    finally:
        await slot.drain()
        await slot.close()
