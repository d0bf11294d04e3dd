"""The region table and a process's mapped regions without Ray, on real /dev/shm objects."""

from __future__ import annotations

import os
import pickle

import numpy as np
import pytest

from deployments.core.shared_memory import (
    CudaRegion,
    MappedRegions,
    MemoryKind,
    RegionElsewhereError,
    RegionNotKnownError,
    RegionTable,
    SystemRegion,
)
from repo_adapter.errors import InferenceServerError, StatusCode


@pytest.fixture
def shm_object():
    key = f"/rt_unit_{os.getpid()}"
    path = f"/dev/shm/{key[1:]}"
    with open(path, "wb") as handle:
        handle.write(bytes(64))
    yield key, path
    os.unlink(path)


def test_registration_checks_the_key_and_the_span(shm_object):
    key, _ = shm_object
    table = RegionTable("node-a")
    region = table.register("r", key, 16, 32)
    assert region == SystemRegion("r", key, 16, 32, "node-a")
    problems = {
        ("r", key, 0, 8): (
            StatusCode.ALREADY_EXISTS,
            "shared memory region 'r' already in manager",
        ),
        ("x", "/rt_no_such", 0, 8): (
            StatusCode.INTERNAL,
            "Unable to open shared memory region: '/rt_no_such'",
        ),
        ("y", key, 60, 8): (StatusCode.INTERNAL, f"Invalid shared memory region: '{key}'"),
        ("z", "/", 0, 8): (
            StatusCode.INVALID_ARG,
            "cannot register shared memory region 'z' - invalid shm key '/'",
        ),
        ("w", "/triton_python_backend_shm_region_1", 0, 8): (
            StatusCode.INVALID_ARG,
            "cannot register shared memory region 'w' with key "
            "'/triton_python_backend_shm_region_1' as the key contains the reserved prefix "
            "'triton_python_backend_shm_region_'",
        ),
    }
    for arguments, (code, message) in problems.items():
        with pytest.raises(InferenceServerError) as refused:
            table.register(*arguments)
        assert (refused.value.code, refused.value.message) == (code, message)
    assert [r.name for r in table.status()] == ["r"]
    with pytest.raises(InferenceServerError, match="Unable to find system shared memory"):
        table.status("nothing")
    assert table.unregister("nothing") == [] and table.unregister() == ["r"]


def test_a_process_reads_and_writes_its_regions_in_place(shm_object):
    key, path = shm_object
    regions = MappedRegions("node-a")
    regions.adopt([SystemRegion("r", key, 16, 32, "node-a")])
    regions.write("r", 4, 8, np.array([1.5, 2.5], np.float32).tobytes())
    with open(path, "rb") as handle:
        assert np.frombuffer(handle.read()[20:28], np.float32).tolist() == [1.5, 2.5]
    view = regions.read("r", 4, 8)
    assert np.frombuffer(view, np.float32).tolist() == [1.5, 2.5]
    for offset, size in ((28, 8), (32, 1), (0, 0)):
        with pytest.raises(InferenceServerError, match="Invalid offset \\+ byte size"):
            regions.read("r", offset, size)
    del view
    regions.forget(["r"])
    with pytest.raises(RegionNotKnownError):
        regions.read("r", 0, 4)


def test_a_region_of_another_node_is_refused_not_mapped(shm_object):
    key, _ = shm_object
    regions = MappedRegions("node-b")
    regions.adopt([SystemRegion("r", key, 0, 64, "node-a")])
    with pytest.raises(RegionElsewhereError, match="registered on node node-a") as refused:
        regions.read("r", 0, 4)
    assert refused.value.code == StatusCode.UNAVAILABLE
    assert (refused.value.region, refused.value.node_id) == ("r", "node-a")
    copy = pickle.loads(pickle.dumps(refused.value))
    assert (copy.message, copy.node_id) == (refused.value.message, "node-a")
    assert copy.code == StatusCode.UNAVAILABLE
    with pytest.raises(RegionElsewhereError):  # an output there is refused before any run
        regions.check("r", 0, 4)


async def test_a_region_registered_meanwhile_is_fetched(shm_object):
    key, _ = shm_object
    table = RegionTable()

    async def fetch() -> list[SystemRegion]:
        return table.regions()

    regions = MappedRegions(fetch=fetch)
    table.register("late", key, 0, 64)
    with pytest.raises(RegionNotKnownError):
        regions.read("late", 0, 4)
    await regions.refresh()
    assert len(regions.read("late", 0, 4)) == 4


# ----------------------------------------------------------------------------- CUDA regions

HANDLE = bytes(range(64))  # the size of a cudaIpcMemHandle_t; never opened here


def test_a_cuda_registration_checks_the_handle_and_the_gpu_and_shares_the_names(shm_object):
    key, _ = shm_object
    table = RegionTable("node-a")
    table.register("sys", key, 0, 64)
    region = table.register_cuda("gpu", HANDLE, 1, 256, gpus=2)
    assert region == CudaRegion("gpu", HANDLE, 1, 256, "node-a")
    assert region.status() == {"name": "gpu", "device_id": 1, "byte_size": 256}
    problems = {
        ("sys", HANDLE, 0, 8, 2): (StatusCode.ALREADY_EXISTS, "already in manager"),
        ("short", HANDLE[:8], 0, 8, 2): (
            StatusCode.INVALID_ARG,
            "'raw_handle' must be a valid base64 encoded cudaIpcMemHandle_t",
        ),
        ("nogpu", HANDLE, 0, 8, 0): (
            StatusCode.INVALID_ARG,
            "failed to register shared memory region: invalid args: GPU 0 does not exist",
        ),
        ("third", HANDLE, 2, 8, 2): (StatusCode.INVALID_ARG, "GPU 2 does not exist"),
    }
    for arguments, (code, message) in problems.items():
        with pytest.raises(InferenceServerError) as refused:
            table.register_cuda(*arguments[:4], gpus=arguments[4])
        assert refused.value.code == code and message in refused.value.message


def test_status_and_unregister_see_only_their_own_kind(shm_object):
    key, _ = shm_object
    table = RegionTable("node-a")
    table.register("sys", key, 0, 64)
    table.register_cuda("gpu", HANDLE, 0, 256, gpus=1)
    assert [r.name for r in table.status(kind=MemoryKind.SYSTEM)] == ["sys"]
    assert [r.name for r in table.status(kind=MemoryKind.CUDA)] == ["gpu"]
    with pytest.raises(InferenceServerError) as refused:
        table.status("sys", MemoryKind.CUDA)
    assert refused.value.code == StatusCode.NOT_FOUND
    assert refused.value.message == (
        "The region named 'sys' is registered as system shared memory, not CUDA shared memory"
    )
    assert table.unregister("sys", MemoryKind.CUDA) == []  # the other kind: no error, kept
    assert table.unregister("", MemoryKind.CUDA) == ["gpu"]
    assert [r.name for r in table.regions()] == ["sys"]


def test_a_cuda_region_a_process_cannot_open_is_a_clear_error(monkeypatch):
    # This machine has no GPU (or this process is told it sees none): Triton's error shape,
    # naming the region, never a crash.
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    regions = MappedRegions("node-a")
    regions.adopt([CudaRegion("gpu", HANDLE, 0, 256, "node-a")])
    with pytest.raises(InferenceServerError) as refused:
        regions.read("gpu", 0, 16)
    assert refused.value.code == StatusCode.UNAVAILABLE
    assert "CUDA shared memory region 'gpu' cannot be used by this serving process" in (
        refused.value.message
    )
    with pytest.raises(InferenceServerError) as refused:
        regions.read("gpu", 250, 16)  # the span is checked before the GPU is touched
    assert refused.value.message == "Invalid offset + byte size for shared memory region: 'gpu'"
