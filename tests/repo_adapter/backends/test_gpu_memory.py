"""Each GPU instance's memory cap reaches its runtime's options (no GPU needed: the options are
built from the instance's share and the device's size)."""

from __future__ import annotations

import pytest

from repo_adapter.backends.base import InstanceSpec
from repo_adapter.backends.gpu_memory import capped, memory_cap_bytes, torch_memory_fraction
from repo_adapter.backends.onnxruntime import _trt_options, cuda_provider_options
from repo_adapter.backends.tensorrt import check_activation_memory
from repo_adapter.config import parse_config_text
from repo_adapter.errors import InferenceServerError

GIB = 2**30
QUARTER = InstanceSpec(name="m_0", kind="GPU", device_id=0, gpu_memory_fraction=0.25)


def _config(extra: str = ""):
    return parse_config_text('name: "m" backend: "onnxruntime" ' + extra, "test")


def test_the_cap_is_the_instances_share_of_the_device():
    assert memory_cap_bytes(QUARTER, 80 * GIB) == 20 * GIB
    assert memory_cap_bytes(QUARTER, None) is None  # device size unknown: no cap
    whole = InstanceSpec(name="m_0", kind="GPU", gpu_memory_fraction=1.0)
    assert memory_cap_bytes(whole, 80 * GIB) is None
    cpu = InstanceSpec(name="m_0", kind="CPU", gpu_memory_fraction=0.25)
    assert memory_cap_bytes(cpu, 80 * GIB) is None


def test_onnxruntime_cuda_provider_gets_gpu_mem_limit():
    options = cuda_provider_options(_config(), QUARTER, memory_cap_bytes(QUARTER, 80 * GIB))
    assert options["gpu_mem_limit"] == str(20 * GIB)
    assert options["device_id"] == "0"


def test_a_smaller_limit_of_the_config_stays_and_a_larger_one_is_capped():
    smaller = _config('parameters { key: "gpu_mem_limit" value: { string_value: "1073741824" } }')
    assert cuda_provider_options(smaller, QUARTER, 20 * GIB)["gpu_mem_limit"] == str(GIB)
    larger = _config('parameters { key: "gpu_mem_limit" value: { string_value: "85899345920" } }')
    assert cuda_provider_options(larger, QUARTER, 20 * GIB)["gpu_mem_limit"] == str(20 * GIB)


def test_no_share_leaves_onnxruntime_uncapped():
    whole = InstanceSpec(name="m_0", kind="GPU", gpu_memory_fraction=1.0)
    assert "gpu_mem_limit" not in cuda_provider_options(_config(), whole, None)


def test_onnxruntime_tensorrt_workspace_is_capped():
    config = _config(
        "optimization { execution_accelerators { gpu_execution_accelerator : [ {"
        ' name : "tensorrt" parameters { key: "max_workspace_size_bytes" value: "42949672960" }'
        " } ] } }"
    )
    (accelerator,) = config.optimization.execution_accelerators.gpu_execution_accelerator
    assert _trt_options(accelerator, 0, 20 * GIB)["trt_max_workspace_size"] == str(20 * GIB)
    assert _trt_options(accelerator, 0, None)["trt_max_workspace_size"] == str(40 * GIB)


def test_pytorch_gets_its_per_process_memory_fraction():
    assert torch_memory_fraction(QUARTER) == 0.25
    assert torch_memory_fraction(InstanceSpec(name="m_0", kind="GPU")) is None
    assert (
        torch_memory_fraction(InstanceSpec(name="m_0", kind="CPU", gpu_memory_fraction=0.5)) is None
    )


def test_a_tensorrt_engine_larger_than_its_share_is_refused():
    check_activation_memory(GIB, 20 * GIB, "m_0")
    check_activation_memory(40 * GIB, None, "m_0")
    with pytest.raises(InferenceServerError, match="more than the instance's share of the GPU"):
        check_activation_memory(21 * GIB, 20 * GIB, "m_0")


def test_capped_takes_the_smaller_of_what_is_set():
    assert capped(None, None) is None
    assert capped("5", None) == "5" and capped(None, 7) == "7" and capped("9", 7) == "7"
