"""The Grafana dashboard for Triton's families, written as ``grafana_dashboard.json``.

``python -m deployments.metrics.grafana`` rewrites the committed JSON; a test checks that it
is current and that every query names a family ``/metrics`` exports. Import the file into
Grafana (Dashboards -> New -> Import) with a Prometheus data source that scrapes
``:8002/metrics``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

DASHBOARD_PATH = Path(__file__).with_name("grafana_dashboard.json")
_MODEL = '{model=~"$model"}'  # the dashboard's model selector


def _rate(family: str, by: str = "model") -> str:
    return f"sum by ({by}) (rate({family}{_MODEL}[$__rate_interval]))"


def _per_request(family: str) -> str:
    """Mean microseconds per successful request of a cumulative duration counter."""
    return f"{_rate(family)} / {_rate('nv_inference_request_success')}"


# (title, unit, [(PromQL, legend)]): one time-series panel each, two per row.
PANELS: list[tuple[str, str, list[tuple[str, str]]]] = [
    ("Requests per second", "reqps", [(_rate("nv_inference_request_success"), "{{model}}")]),
    ("Rows (inferences) per second", "ops", [(_rate("nv_inference_count"), "{{model}}")]),
    (
        "Latency per request: queue and compute (us)",
        "µs",
        [
            (_per_request("nv_inference_queue_duration_us"), "{{model}} queue"),
            (_per_request("nv_inference_compute_input_duration_us"), "{{model}} compute input"),
            (_per_request("nv_inference_compute_infer_duration_us"), "{{model}} compute infer"),
            (_per_request("nv_inference_compute_output_duration_us"), "{{model}} compute output"),
        ],
    ),
    (
        "Request latency, end to end (us)",
        "µs",
        [(_per_request("nv_inference_request_duration_us"), "{{model}}")],
    ),
    (
        "Failures per second by reason",
        "reqps",
        [(_rate("nv_inference_request_failure", "model, reason"), "{{model}} {{reason}}")],
    ),
    (
        "Pending requests (queued, not executing)",
        "short",
        [(f"sum by (model) (nv_inference_pending_request_count{_MODEL})", "{{model}}")],
    ),
    (
        "Batch size (rows per execution)",
        "short",
        [(f"{_rate('nv_inference_count')} / {_rate('nv_inference_exec_count')}", "{{model}}")],
    ),
    (
        "Model load time (s)",
        "s",
        [(f"nv_model_load_duration_secs{_MODEL}", "{{model}} v{{version}}")],
    ),
    (
        "CPU utilization and memory",
        "percentunit",
        [
            ("nv_cpu_utilization", "CPU utilization"),
            ("nv_cpu_memory_used_bytes / nv_cpu_memory_total_bytes", "memory used"),
        ],
    ),
    (
        "GPU utilization and memory",
        "percentunit",
        [
            ("nv_gpu_utilization", "{{gpu_uuid}} utilization"),
            ("nv_gpu_memory_used_bytes / nv_gpu_memory_total_bytes", "{{gpu_uuid}} memory"),
        ],
    ),
    ("GPU power (W)", "watt", [("nv_gpu_power_usage", "{{gpu_uuid}}")]),
]


def dashboard() -> dict[str, Any]:
    """The dashboard document (Grafana's JSON model)."""
    datasource = {"type": "prometheus", "uid": "${datasource}"}
    panels = []
    for number, (title, unit, queries) in enumerate(PANELS):
        panels.append(
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
    return {
        "title": "rayton: Triton model serving",
        "uid": "rayton-triton",
        "description": "Triton's Prometheus families from rayton's /metrics (:8002)",
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
                    "query": {"query": "label_values(nv_inference_request_success, model)"},
                    "definition": "label_values(nv_inference_request_success, model)",
                    "includeAll": True,
                    "multi": True,
                    "allValue": ".*",
                    "current": {"text": "All", "value": "$__all"},
                    "refresh": 2,
                },
            ]
        },
        "panels": panels,
    }


def render() -> str:
    return json.dumps(dashboard(), indent=2, ensure_ascii=False) + "\n"


if __name__ == "__main__":
    DASHBOARD_PATH.write_text(render())
    print(f"wrote {DASHBOARD_PATH}", file=sys.stderr)
