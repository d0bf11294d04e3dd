"""The GPU check's steps on CPU (``--device cpu``): the same repository, raw-framework
baselines, backends and instance processes a GPU machine runs, so the script is known to work
before one is lent."""

from __future__ import annotations

import json

from benchmarks.gpu_check import main


def test_smoke_run_on_cpu_compares_every_runtime_and_shares_instances(tmp_path, capsys):
    report_path = tmp_path / "report.json"
    command = ["--device", "cpu", "--seconds", "0.2", "--instances", "1,2"]
    assert main([*command, "--json", str(report_path)]) == 0
    report = json.loads(report_path.read_text())
    assert report["not_written"] == {}
    for model in ("mlp", "convnet"):
        compared = report["models"][model]["compared"]
        for runtime in ("pytorch", "onnxruntime"):
            assert compared[runtime]["raw_rows_per_s"] > 0, (model, runtime, compared)
            assert compared[runtime]["rayton_rows_per_s"] > 0, (model, runtime, compared)
        shared = report["models"][model]["shared_gpu"][f"{model}_torchscript"]
        by_count = {row["instances"]: row for row in shared}
        assert [i["fraction"] for i in by_count[2]["per_instance"]] == [0.5, 0.5]
        assert all(i["rows_per_s"] > 0 for i in by_count[2]["per_instance"])
    out = capsys.readouterr().out
    assert "| model | instances on GPU 0 |" in out
    assert "| rayton / raw |" in out
