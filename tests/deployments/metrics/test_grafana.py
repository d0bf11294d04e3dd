import json
import re

from deployments.metrics.families import merge_versions, model_families
from deployments.metrics.grafana import DASHBOARD_PATH, dashboard, render
from deployments.metrics.system import GpuSample, cpu_families, gpu_families


def exported_families() -> set[str]:
    """Every family /metrics can print (a model's, the CPU's, a GPU's)."""
    entry = {"model": "m", "version": "1", "failures": {}}
    gpu = GpuSample("GPU-0", 0.5, 2, 1, 100.0, 300.0, 5.0)
    families = model_families(merge_versions([entry])) + cpu_families(0.1, (2, 1))
    return {f.name for f in families + gpu_families([gpu])}


def test_the_committed_dashboard_is_current():
    assert DASHBOARD_PATH.read_text() == render(), "run: python -m deployments.metrics.grafana"


def test_it_is_a_grafana_dashboard():
    board = json.loads(DASHBOARD_PATH.read_text())
    for key in ("title", "uid", "schemaVersion", "panels", "templating", "time"):
        assert key in board
    assert isinstance(board["schemaVersion"], int)
    names = [v["name"] for v in board["templating"]["list"]]
    assert names == ["datasource", "model"]
    ids = [panel["id"] for panel in board["panels"]]
    assert len(ids) == len(set(ids)) >= 10
    for panel in board["panels"]:
        assert panel["type"] == "timeseries" and panel["title"]
        assert set(panel["gridPos"]) == {"h", "w", "x", "y"}
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        refs = [target["refId"] for target in panel["targets"]]
        assert refs and len(refs) == len(set(refs))


def test_every_query_names_a_family_that_metrics_exports():
    exported = exported_families()
    queried = set()
    for panel in dashboard()["panels"]:
        for target in panel["targets"]:
            families = set(re.findall(r"\b(nv_[a-z_]+)", target["expr"]))
            assert families, target["expr"]
            queried |= families
    assert queried <= exported, queried - exported
    # The panels the brief asks for: throughput, the latency split, failures, queue, batch.
    for family in (
        "nv_inference_request_success",
        "nv_inference_queue_duration_us",
        "nv_inference_compute_infer_duration_us",
        "nv_inference_request_failure",
        "nv_inference_pending_request_count",
        "nv_inference_exec_count",
        "nv_cpu_utilization",
        "nv_gpu_utilization",
    ):
        assert family in queried
