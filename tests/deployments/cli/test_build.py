"""``rayton build``: the Serve config it writes for a repository, and its flags."""

from __future__ import annotations

import yaml
from ray.serve.schema import ServeDeploySchema

from deployments.cli import main


def test_build_writes_a_serve_config_with_one_app_per_model(example_repository, tmp_path, capsys):
    output = tmp_path / "serve_config.yaml"
    assert main(["build", str(example_repository), "-o", str(output), "--http-port", "9123"]) == 0
    config = yaml.safe_load(output.read_text())
    ServeDeploySchema.model_validate(config)  # what `serve run` / `serve deploy` accept
    apps = {app["name"]: app for app in config["applications"]}
    assert apps["rayton-server"]["route_prefix"] == "/"
    grpc = apps["rayton-grpc"]  # Triton's gRPC endpoint on 8001 by default, no HTTP route
    assert grpc["route_prefix"] is None
    assert grpc["import_path"] == "deployments.apps.builders:build_grpc_app"
    assert (grpc["args"]["grpc_host"], grpc["args"]["grpc_port"]) == ("127.0.0.1", 8001)
    assert grpc["deployments"][0]["name"] == "grpc"
    metrics = apps["rayton-metrics"]  # Triton's /metrics on 8002 by default, no HTTP route
    assert metrics["route_prefix"] is None
    assert metrics["import_path"] == "deployments.apps.builders:build_metrics_app"
    assert (metrics["args"]["metrics_host"], metrics["args"]["metrics_port"]) == (
        "127.0.0.1",
        8002,
    )
    onnx = apps["image_classifier_onnx"]
    assert onnx["route_prefix"] == "/v2/models/image_classifier_onnx"
    assert onnx["deployments"][0]["name"] == "image_classifier_onnx"
    assert apps["mlp_autocomplete"]["deployments"][0]["num_replicas"] == 2  # ORT CPU default
    assert config["http_options"] == {"host": "127.0.0.1", "port": 9123}
    assert "image_pipeline" in capsys.readouterr().out


def test_build_reports_broken_models(tmp_path, capsys):
    repository = tmp_path / "repository"
    (repository / "broken" / "1").mkdir(parents=True)
    (repository / "broken" / "config.pbtxt").write_text("max_batch_size: nope")
    assert main(["build", str(repository), "-o", str(tmp_path / "cfg.yaml")]) == 0
    assert "broken" in capsys.readouterr().out
    config = yaml.safe_load((tmp_path / "cfg.yaml").read_text())
    assert [app["name"] for app in config["applications"]] == [
        "rayton-server",
        "rayton-grpc",
        "rayton-metrics",
    ]


def test_build_without_grpc(example_repository, tmp_path):
    output = tmp_path / "serve_config.yaml"
    assert main(["build", str(example_repository), "-o", str(output), "--grpc-port", "0"]) == 0
    names = [app["name"] for app in yaml.safe_load(output.read_text())["applications"]]
    assert "rayton-grpc" not in names and names[0] == "rayton-server"


def test_build_metrics_settings_and_without_metrics(example_repository, tmp_path, capsys):
    output = tmp_path / "serve_config.yaml"
    flags = ["--metrics-port", "9102", "--allow-gpu-metrics", "false"]
    flags += ["--metrics-config", "counter_latencies=false", "--metrics-interval-ms", "500"]
    assert main(["build", str(example_repository), "-o", str(output), *flags]) == 0
    apps = {a["name"]: a for a in yaml.safe_load(output.read_text())["applications"]}
    assert apps["rayton-metrics"]["args"] == {
        "metrics_host": "127.0.0.1",
        "metrics_port": 9102,
        "allow_gpu_metrics": False,
        "metrics_interval_ms": 500,
        "metrics_config": ["counter_latencies=false"],
    }
    assert (
        main(["build", str(example_repository), "-o", str(output), "--allow-metrics", "false"]) == 0
    )
    names = [app["name"] for app in yaml.safe_load(output.read_text())["applications"]]
    assert "rayton-metrics" not in names
    capsys.readouterr()
    bad = ["--metrics-config", "cache_latencies=true"]
    assert main(["build", str(example_repository), "-o", str(output), *bad]) == 2
    assert "unknown --metrics-config setting 'cache_latencies'" in capsys.readouterr().err
