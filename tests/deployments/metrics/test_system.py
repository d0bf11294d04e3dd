from deployments.metrics.system import CpuSampler, GpuSampler, cpu_families, memory_bytes


def test_cpu_utilization_is_the_busy_share_between_samples(tmp_path):
    stat = tmp_path / "stat"
    stat.write_text("cpu  100 0 100 800 0 0 0 0 0 0\ncpu0 1 2 3 4\n")
    sampler = CpuSampler(stat)
    stat.write_text("cpu  150 0 150 900 0 0 0 0 0 0\n")  # busy +100 of +200
    assert sampler.utilization() == 0.5
    assert sampler.utilization() == 0.0  # nothing elapsed


def test_memory_used_is_total_minus_available(tmp_path):
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal: 1000 kB\nMemFree: 100 kB\nMemAvailable: 400 kB\n")
    assert memory_bytes(meminfo) == (1000 * 1024, 600 * 1024)
    names = [f.name for f in cpu_families(0.5, (1, 2))]
    assert names == ["nv_cpu_utilization", "nv_cpu_memory_total_bytes", "nv_cpu_memory_used_bytes"]


def test_this_machines_real_readings():
    total, used = memory_bytes()
    assert 0 < used < total
    assert 0.0 <= CpuSampler().utilization() <= 1.0
    gpus = GpuSampler()  # no NVML or no GPU here: no devices, no samples
    assert len(gpus.sample()) == gpus.device_count
