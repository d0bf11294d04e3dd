"""The GPU check's steps on CPU (``--device cpu``): the same repository, backends and
instance processes a GPU machine runs, so the script is known to work before one is lent."""

from __future__ import annotations

import json

from benchmarks.gpu_check import main


def test_smoke_run_on_cpu_measures_every_backend_and_shared_instances(tmp_path, capsys):
    report_path = tmp_path / "report.json"
    command = ["--device", "cpu", "--seconds", "0.2", "--instances", "1,2"]
    assert main([*command, "--json", str(report_path)]) == 0
    report = json.loads(report_path.read_text())
    assert report["backends"]["mlp_torchscript"]["rows_per_s"] > 0
    assert report["backends"]["mlp_onnx"]["rows_per_s"] > 0
    shared = {row["instances"]: row for row in report["shared_gpu"]}
    assert [i["fraction"] for i in shared[2]["per_instance"]] == [0.5, 0.5]
    assert all(i["rows_per_s"] > 0 for i in shared[2]["per_instance"])
    assert "| instances on GPU 0 |" in capsys.readouterr().out
