"""The CUDA IPC binding of the CUDA shared-memory extension: which GPU a process reaches by a
client's device id, what a process without a usable GPU is told, and (on a machine with a
CUDA GPU) another process's GPU memory read and written through its IPC handle
(``benchmarks/cuda_shm_check.py``, the script a lent GPU machine runs)."""

from __future__ import annotations

import pytest

from benchmarks.cuda_shm_check import cuda_device_present, round_trip_through_a_handle
from deployments.core.cuda_ipc import CudaIpcMapping, CudaUnavailableError, visible_index


@pytest.mark.parametrize(
    ("device_id", "visible", "index"),
    [(0, None, 0), (3, None, 3), (2, "2", 0), (3, "1,3", 1), (3, " 1 , 3 ", 1)],
)
def test_a_clients_device_id_is_found_among_the_visible_gpus(device_id, visible, index):
    assert visible_index(device_id, visible) == index


@pytest.mark.parametrize("visible", ["", "0,1", "GPU-5c0d"])
def test_a_gpu_this_process_does_not_see_is_named_with_what_it_sees(visible):
    with pytest.raises(CudaUnavailableError) as refused:
        visible_index(2, visible)
    assert "GPU 2 is not visible to this process (CUDA_VISIBLE_DEVICES=" in str(refused.value)


@pytest.mark.skipif(cuda_device_present(), reason="this machine has a usable CUDA GPU")
def test_without_a_usable_gpu_opening_a_handle_says_why():
    with pytest.raises(CudaUnavailableError) as refused:
        CudaIpcMapping(bytes(64), 0, 64)
    assert str(refused.value)  # CUDA's own reason, or that libcudart is missing


@pytest.mark.skipif(
    not cuda_device_present(), reason="needs a CUDA GPU (benchmarks/cuda_shm_check.py)"
)
def test_another_processs_gpu_memory_is_read_and_written_through_its_handle():
    outcome = round_trip_through_a_handle(byte_size=1 << 20)
    assert outcome.read_matches and outcome.write_seen, outcome
