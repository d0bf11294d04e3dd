"""CUDA shared memory on a GPU, without Ray: what a serving process does with a client's region.

    python -m benchmarks.cuda_shm_check            # on a machine with a CUDA GPU and PyTorch

One process (the client) allocates GPU memory with PyTorch, fills it and shares it by its CUDA
IPC handle, as ``tritonclient.utils.cuda_shared_memory`` does; another process (a replica)
opens the handle with rayton's binding (:mod:`deployments.core.cuda_ipc`), checks what it
reads, writes an output into it and times both copies for one 640x480x3 UINT8 image. Prints
one JSON line. Needs neither Ray nor tritonclient; installs nothing.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import time
from dataclasses import asdict, dataclass

import numpy as np

from deployments.core.cuda_ipc import CudaCallError, CudaIpcMapping, CudaUnavailableError

IMAGE_BYTES = 640 * 480 * 3
WRITTEN = b"\xab" * 64  # what the replica writes at the start of the region


@dataclass(frozen=True)
class RoundTrip:
    """What the replica read and wrote through the handle, and what each copy of one image
    took (milliseconds, mean of ``repeats``)."""

    read_matches: bool
    write_seen: bool
    read_image_ms: float
    write_image_ms: float
    repeats: int


def cuda_device_present() -> bool:
    """Whether this process can use a CUDA GPU through the runtime library."""
    from deployments.core.cuda_ipc import cuda_runtime

    try:
        return cuda_runtime().device_count() > 0
    except (CudaUnavailableError, CudaCallError):
        return False


def _pattern(byte_size: int) -> np.ndarray:
    return (np.arange(byte_size, dtype=np.int64) % 251).astype(np.uint8)


def _replica(raw_handle: bytes, offset: int, byte_size: int, repeats: int, results) -> None:
    mapping = CudaIpcMapping(raw_handle, 0, offset + byte_size)
    try:
        seen = np.frombuffer(mapping.read(offset, byte_size), np.uint8)
        matches = bool(np.array_equal(seen, _pattern(byte_size)))
        image = min(IMAGE_BYTES, byte_size)
        start = time.perf_counter()
        for _ in range(repeats):
            mapping.read(offset, image)
        read_ms = (time.perf_counter() - start) * 1e3 / repeats
        payload = bytes(image)
        start = time.perf_counter()
        for _ in range(repeats):
            mapping.write(offset, payload)
        write_ms = (time.perf_counter() - start) * 1e3 / repeats
        mapping.write(offset, WRITTEN)
        results.put((matches, read_ms, write_ms))
    finally:
        mapping.close()


def round_trip_through_a_handle(byte_size: int = 4 * IMAGE_BYTES, repeats: int = 50) -> RoundTrip:
    """Share ``byte_size`` bytes of GPU 0 with another process and let it read and write them
    through rayton's binding."""
    import torch

    tensor = torch.from_numpy(_pattern(byte_size)).to("cuda:0")
    torch.cuda.synchronize()
    shared = tensor.untyped_storage()._share_cuda_()  # (device, handle, size, offset, ...)
    raw_handle, offset = bytes(shared[1]), int(shared[3])
    context = multiprocessing.get_context("spawn")  # a fresh process: CUDA refuses its own
    results = context.Queue()
    replica = context.Process(
        target=_replica, args=(raw_handle, offset, byte_size, repeats, results)
    )
    replica.start()
    matches, read_ms, write_ms = results.get(timeout=120)
    replica.join(timeout=60)
    torch.cuda.synchronize()
    written = bytes(tensor[: len(WRITTEN)].cpu().numpy().tobytes())
    return RoundTrip(matches, written == WRITTEN, read_ms, write_ms, repeats)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=50)
    args = parser.parse_args()
    if not cuda_device_present():
        raise SystemExit("no usable CUDA GPU here")
    print(json.dumps(asdict(round_trip_through_a_handle(repeats=args.repeats))))


if __name__ == "__main__":
    main()
