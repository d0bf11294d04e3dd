import json
import re

import pytest

from deployments.metrics import grafana
from deployments.metrics.families import merge_versions, model_families
from deployments.metrics.grafana import (
    DASHBOARD_PATH,
    RAY_DASHBOARD_PATH,
    RAY_NAMES,
    TRITON_NAMES,
    dashboard,
    install_for_ray,
    ray_dashboard_folder,
    render,
)
from deployments.metrics.replica_gauges import ModelScaling, replica_families, state_families
from deployments.metrics.system import GpuSample, cpu_families, gpu_families

BOTH = pytest.mark.parametrize("names", [TRITON_NAMES, RAY_NAMES], ids=["metrics", "ray"])


def exported_families() -> dict[str, str]:
    """Every family /metrics can print (a model's, its state and replicas, the CPU's, a
    GPU's), with its kind."""
    entry = {"model": "m", "version": "1", "failures": {}}
    gpu = GpuSample("GPU-0", 0.5, 2, 1, 100.0, 300.0, 5.0)
    families = model_families(merge_versions([entry])) + cpu_families(0.1, (2, 1))
    families += state_families([{"name": "m", "version": "1", "state": "READY"}])
    families += replica_families([ModelScaling("m", 1, 1, 0)])
    return {f.name: f.kind for f in families + gpu_families([gpu])}


def test_the_committed_dashboards_are_current():
    assert DASHBOARD_PATH.read_text() == render(), "run: python -m deployments.metrics.grafana"
    assert RAY_DASHBOARD_PATH.read_text() == render(RAY_NAMES), (
        "run: python -m deployments.metrics.grafana"
    )


@pytest.mark.parametrize("path", [DASHBOARD_PATH, RAY_DASHBOARD_PATH], ids=["metrics", "ray"])
def test_it_is_a_grafana_dashboard(path):
    board = json.loads(path.read_text())
    for key in ("title", "uid", "schemaVersion", "panels", "templating", "time"):
        assert key in board
    assert isinstance(board["schemaVersion"], int)
    names = [v["name"] for v in board["templating"]["list"]]
    assert names == ["datasource", "model"]
    ids = [panel["id"] for panel in board["panels"]]
    assert len(ids) == len(set(ids)) >= 10
    for panel in board["panels"]:
        assert panel["type"] in ("timeseries", "table") and panel["title"]
        assert set(panel["gridPos"]) == {"h", "w", "x", "y"}
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        refs = [target["refId"] for target in panel["targets"]]
        assert refs and len(refs) == len(set(refs))
    assert [p["title"] for p in board["panels"] if p["type"] == "table"] == [
        "Model state (repository index)"
    ]


def _queried(names) -> set[str]:
    board = dashboard(names)
    queried = set()
    for panel in board["panels"]:
        for target in panel["targets"]:
            families = set(re.findall(r"\b((?:ray_)?(?:nv|rayton)_[a-z_]+)", target["expr"]))
            assert families, target["expr"]
            queried |= families
    selector = board["templating"]["list"][1]["query"]["query"]
    return queried | set(re.findall(r"\b((?:ray_)?(?:nv|rayton)_[a-z_]+)", selector))


def test_every_query_names_a_family_that_metrics_exports():
    exported = exported_families()
    queried = _queried(TRITON_NAMES)
    assert queried <= set(exported), queried - set(exported)
    # The panels the brief asks for: throughput, the latency split, failures, queue, batch,
    # and each model's state and replicas.
    for family in (
        "nv_inference_request_success",
        "nv_inference_queue_duration_us",
        "nv_inference_compute_infer_duration_us",
        "nv_inference_request_failure",
        "nv_inference_pending_request_count",
        "nv_inference_exec_count",
        "nv_cpu_utilization",
        "nv_gpu_utilization",
        "rayton_model_state",
        "rayton_model_replicas",
    ):
        assert family in queried


def test_the_ray_dashboard_reads_the_same_families_by_rays_names():
    """Ray prefixes ``ray_``; its counters end in ``_total``, its gauges do not."""
    exported = exported_families()
    queried = _queried(RAY_NAMES)
    assert all(name.startswith("ray_") for name in queried), queried
    read = set()
    for name in queried:
        family = name.removeprefix("ray_")
        if exported.get(family) == "gauge":
            read.add(family)
            continue
        assert family.endswith("_total"), name
        assert exported.get(family.removesuffix("_total")) == "counter", name
        read.add(family.removesuffix("_total"))
    assert read == _queried(TRITON_NAMES)


def test_the_ray_dashboard_goes_where_rays_dashboard_writes_its_own(tmp_path, monkeypatch):
    monkeypatch.delenv("RAY_METRICS_GRAFANA_DASHBOARD_OUTPUT_DIR", raising=False)
    monkeypatch.delenv("RAY_METRICS_OUTPUT_ROOT", raising=False)
    session = tmp_path / "session_1"
    assert ray_dashboard_folder(str(session)) == session / "metrics" / "grafana" / "dashboards"
    installed = install_for_ray(str(session))
    assert installed is not None and installed.parent == ray_dashboard_folder(str(session))
    assert installed.read_text() == RAY_DASHBOARD_PATH.read_text()
    monkeypatch.setenv("RAY_METRICS_OUTPUT_ROOT", str(tmp_path / "root"))
    assert ray_dashboard_folder(str(session)) == tmp_path / "root" / "grafana" / "dashboards"
    monkeypatch.setenv("RAY_METRICS_GRAFANA_DASHBOARD_OUTPUT_DIR", str(tmp_path / "boards"))
    assert ray_dashboard_folder(str(session)) == tmp_path / "boards"


def test_a_folder_that_cannot_be_written_is_logged_not_raised(tmp_path, monkeypatch, caplog):
    blocked = tmp_path / "a file"
    blocked.write_text("")
    monkeypatch.setenv("RAY_METRICS_GRAFANA_DASHBOARD_OUTPUT_DIR", str(blocked / "boards"))
    assert install_for_ray(str(tmp_path)) is None
    assert "not installed for Ray" in caplog.text
    assert grafana.RAY_DASHBOARD_PATH.exists()
