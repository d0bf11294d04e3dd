"""rayton's Grafana dashboards, generated here and committed as JSON.

* ``grafana_dashboard.json`` reads Triton's families from rayton's ``/metrics`` (``:8002``):
  import it into Grafana (Dashboards -> New -> Import) with a Prometheus data source that
  scrapes that endpoint.
* ``ray_grafana_dashboard.json`` reads the same families from Ray's Prometheus export, where
  Ray prefixes them with ``ray_`` and counters end in ``_total``: the metrics application
  (which exports them to Ray) puts it beside Ray's own dashboards in the Ray session's
  Grafana folder, so the Grafana the Ray dashboard embeds lists each model's state, replicas
  and request rate next to Ray Serve's dashboards (:func:`install_for_ray`).

``python -m deployments.metrics.grafana`` rewrites both; a test checks that they are current
and that every query names a family ``/metrics`` exports.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

DASHBOARD_PATH = Path(__file__).with_name("grafana_dashboard.json")
RAY_DASHBOARD_PATH = Path(__file__).with_name("ray_grafana_dashboard.json")
# Ray's metrics settings (ray/dashboard/modules/metrics/metrics_head.py) that move the folder.
_RAY_DASHBOARD_DIR_ENV = "RAY_METRICS_GRAFANA_DASHBOARD_OUTPUT_DIR"
_RAY_METRICS_ROOT_ENV = "RAY_METRICS_OUTPUT_ROOT"
_MODEL = '{model=~"$model"}'  # the dashboard's model selector


@dataclass(frozen=True)
class Naming:
    """How a family is named where a dashboard reads it."""

    prefix: str = ""
    counter_suffix: str = ""

    def counter(self, family: str) -> str:
        return f"{self.prefix}{family}{self.counter_suffix}"

    def gauge(self, family: str) -> str:
        return f"{self.prefix}{family}"


TRITON_NAMES = Naming()  # rayton's /metrics
RAY_NAMES = Naming("ray_", "_total")  # Ray's export (deployments/metrics/ray_export.py)

# (title, unit, [(PromQL, legend)]): one time-series panel each, two per row.
Panel = tuple[str, str, list[tuple[str, str]]]


def panels(names: Naming) -> list[Panel]:
    """The time-series panels, over families named by ``names``."""
    c, g = names.counter, names.gauge

    def rate(family: str, by: str = "model") -> str:
        return f"sum by ({by}) (rate({c(family)}{_MODEL}[$__rate_interval]))"

    def per_request(family: str) -> str:
        """Mean microseconds per successful request of a cumulative duration counter."""
        return f"{rate(family)} / {rate('nv_inference_request_success')}"

    return [
        ("Requests per second", "reqps", [(rate("nv_inference_request_success"), "{{model}}")]),
        ("Rows (inferences) per second", "ops", [(rate("nv_inference_count"), "{{model}}")]),
        (
            "Latency per request: queue and compute (us)",
            "µs",
            [
                (per_request("nv_inference_queue_duration_us"), "{{model}} queue"),
                (per_request("nv_inference_compute_input_duration_us"), "{{model}} compute input"),
                (per_request("nv_inference_compute_infer_duration_us"), "{{model}} compute infer"),
                (
                    per_request("nv_inference_compute_output_duration_us"),
                    "{{model}} compute output",
                ),
            ],
        ),
        (
            "Request latency, end to end (us)",
            "µs",
            [(per_request("nv_inference_request_duration_us"), "{{model}}")],
        ),
        (
            "Failures per second by reason",
            "reqps",
            [(rate("nv_inference_request_failure", "model, reason"), "{{model}} {{reason}}")],
        ),
        (
            "Pending requests (queued, not executing)",
            "short",
            [(f"sum by (model) ({g('nv_inference_pending_request_count')}{_MODEL})", "{{model}}")],
        ),
        (
            "Batch size (rows per execution)",
            "short",
            [(f"{rate('nv_inference_count')} / {rate('nv_inference_exec_count')}", "{{model}}")],
        ),
        (
            "Model load time (s)",
            "s",
            [
                (
                    f"max by (model, version) ({g('nv_model_load_duration_secs')}{_MODEL})",
                    "{{model}} v{{version}}",
                )
            ],
        ),
        (
            "CPU utilization and memory",
            "percentunit",
            [
                (f"max({g('nv_cpu_utilization')})", "CPU utilization"),
                (
                    f"max({g('nv_cpu_memory_used_bytes')}) / max({g('nv_cpu_memory_total_bytes')})",
                    "memory used",
                ),
            ],
        ),
        (
            "GPU utilization and memory",
            "percentunit",
            [
                (f"max by (gpu_uuid) ({g('nv_gpu_utilization')})", "{{gpu_uuid}} utilization"),
                (
                    f"max by (gpu_uuid) ({g('nv_gpu_memory_used_bytes')}) / "
                    f"max by (gpu_uuid) ({g('nv_gpu_memory_total_bytes')})",
                    "{{gpu_uuid}} memory",
                ),
            ],
        ),
        (
            "GPU power (W)",
            "watt",
            [(f"max by (gpu_uuid) ({g('nv_gpu_power_usage')})", "{{gpu_uuid}}")],
        ),
        (
            "Replicas per model",
            "short",
            [(f"max by (model) ({g('rayton_model_replicas')}{_MODEL})", "{{model}}")],
        ),
    ]


def state_query(names: Naming) -> str:
    """Each model version's state now (the table panel)."""
    state = names.gauge("rayton_model_state")
    return f"max by (model, version, state) ({state}{_MODEL}) == 1"


def dashboard(names: Naming = TRITON_NAMES) -> dict[str, Any]:
    """The dashboard document (Grafana's JSON model) over families named by ``names``."""
    datasource = {"type": "prometheus", "uid": "${datasource}"}
    documents = []
    series = panels(names)
    for number, (title, unit, queries) in enumerate(series):
        documents.append(
            {
                "id": number + 1,
                "type": "timeseries",
                "title": title,
                "datasource": datasource,
                "gridPos": {"h": 8, "w": 12, "x": 12 * (number % 2), "y": 8 * (number // 2)},
                "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
                "options": {"legend": {"displayMode": "list", "placement": "bottom"}},
                "targets": [
                    {"datasource": datasource, "expr": expr, "legendFormat": legend, "refId": ref}
                    for (expr, legend), ref in zip(queries, "ABCDEFGH", strict=False)
                ],
            }
        )
    rows = (len(series) + 1) // 2
    documents.append(
        {
            "id": len(series) + 1,
            "type": "table",
            "title": "Model state (repository index)",
            "datasource": datasource,
            "gridPos": {"h": 10, "w": 24, "x": 0, "y": 8 * rows},
            "fieldConfig": {"defaults": {}, "overrides": []},
            "options": {"showHeader": True},
            "targets": [
                {
                    "datasource": datasource,
                    "expr": state_query(names),
                    "format": "table",
                    "instant": True,
                    "refId": "A",
                }
            ],
            "transformations": [
                {
                    "id": "organize",
                    "options": {"excludeByName": {"Time": True, "Value": True}},
                }
            ],
        }
    )
    ray = names == RAY_NAMES
    selector = names.gauge("rayton_model_state") if ray else "nv_inference_request_success"
    return {
        "title": "rayton: models on Ray" if ray else "rayton: Triton model serving",
        "uid": "rayton-ray" if ray else "rayton-triton",
        "description": (
            "rayton's models from Ray's Prometheus export: state, replicas, requests"
            if ray
            else "Triton's Prometheus families from rayton's /metrics (:8002)"
        ),
        "tags": ["rayton", "triton", "ray-serve"],
        "schemaVersion": 39,
        "version": 1,
        "editable": True,
        "refresh": "10s",
        "time": {"from": "now-30m", "to": "now"},
        "timezone": "browser",
        "templating": {
            "list": [
                {
                    "name": "datasource",
                    "label": "Prometheus",
                    "type": "datasource",
                    "query": "prometheus",
                },
                {
                    "name": "model",
                    "label": "model",
                    "type": "query",
                    "datasource": datasource,
                    "query": {"query": f"label_values({selector}, model)"},
                    "definition": f"label_values({selector}, model)",
                    "includeAll": True,
                    "multi": True,
                    "allValue": ".*",
                    "current": {"text": "All", "value": "$__all"},
                    "refresh": 2,
                },
            ]
        },
        "panels": documents,
    }


def render(names: Naming = TRITON_NAMES) -> str:
    return json.dumps(dashboard(names), indent=2, ensure_ascii=False) + "\n"


def ray_dashboard_folder(session_dir: str) -> Path:
    """Where the Ray dashboard of the session in ``session_dir`` writes the Grafana
    dashboards its provisioning loads (Ray's own settings move it)."""
    folder = os.environ.get(_RAY_DASHBOARD_DIR_ENV)
    if folder:
        return Path(folder)
    root = os.environ.get(_RAY_METRICS_ROOT_ENV) or os.path.join(session_dir, "metrics")
    return Path(root) / "grafana" / "dashboards"


def install_for_ray(session_dir: str) -> Path | None:
    """Put the Ray-side dashboard beside Ray's own (None: the folder could not be written;
    logged, never an error: serving does not depend on it)."""
    target = ray_dashboard_folder(session_dir) / "rayton_models_grafana_dashboard.json"
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(RAY_DASHBOARD_PATH.read_text())
    except OSError as err:
        logger.warning("the rayton Grafana dashboard was not installed for Ray: %s", err)
        return None
    return target


if __name__ == "__main__":
    DASHBOARD_PATH.write_text(render())
    RAY_DASHBOARD_PATH.write_text(render(RAY_NAMES))
    print(f"wrote {DASHBOARD_PATH} and {RAY_DASHBOARD_PATH}", file=sys.stderr)
