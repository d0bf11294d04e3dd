"""The backend layer on a GPU, without Ray: what a GPU node of a rayton cluster runs per replica.

    python -m benchmarks.gpu_check                  # on a machine with a CUDA GPU
    python -m benchmarks.gpu_check --device cpu     # the same steps on CPU (a smoke run)

Writes a small repository (a TorchScript MLP, and its ONNX export where torch can export),
loads each model through rayton's backends as a ``KIND_GPU`` instance (TorchScript on CUDA,
ONNX Runtime's CUDA provider where the installed build has it, TensorRT where it is installed)
and measures throughput; then runs N instances of the TorchScript model as N processes sharing
GPU 0, each capped at 1/N of its memory (as ``count: N`` packs N replicas on a GPU), and prints
the throughput per instance count and every instance's peak memory. Installs nothing, needs
neither Ray nor the network.
"""

from __future__ import annotations

import argparse
import itertools
import json
import multiprocessing
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

LAYERS = (512, 2048, 2048, 1000)
CONFIG = """\
name: "{name}"
backend: "{backend}"
max_batch_size: 64
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ {width} ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ {classes} ] }} ]
instance_group [ {{ kind: {kind} count: 1 }} ]
"""


def _mlp():
    import torch

    torch.manual_seed(0)
    layers: list[Any] = []
    for fan_in, fan_out in itertools.pairwise(LAYERS):
        layers += [torch.nn.Linear(fan_in, fan_out), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers[:-1]).eval()


def write_repository(root: Path, kind: str) -> dict[str, str]:
    """The models this check loads: name -> "" (written) or why it could not be."""
    import torch

    module = _mlp()
    example = torch.zeros(1, LAYERS[0])
    written: dict[str, str] = {}
    for name, backend, filename in (
        ("mlp_torchscript", "pytorch", "model.pt"),
        ("mlp_onnx", "onnxruntime", "model.onnx"),
    ):
        version = root / name / "1"
        version.mkdir(parents=True)
        (root / name / "config.pbtxt").write_text(
            CONFIG.format(
                name=name, backend=backend, width=LAYERS[0], classes=LAYERS[-1], kind=kind
            )
        )
        try:
            if backend == "pytorch":
                torch.jit.trace(module, example).save(str(version / filename))
            else:
                torch.onnx.export(
                    module,
                    example,
                    str(version / filename),
                    input_names=["INPUT0"],
                    output_names=["OUTPUT0"],
                    dynamic_axes={"INPUT0": {0: "batch"}, "OUTPUT0": {0: "batch"}},
                    dynamo=False,
                )
            written[name] = ""
        except Exception as err:  # an export this torch build cannot do
            written[name] = f"{type(err).__name__}: {err}"
    return written


def _backend(root: Path, name: str, kind: str, fraction: float):
    from repo_adapter.backends import backend_class
    from repo_adapter.backends.base import InstanceSpec, ModelVersion
    from repo_adapter.repository import scan_model

    scanned = scan_model(root / name, gpu_ids=[0] if kind == "KIND_GPU" else [])
    if scanned.error:
        raise RuntimeError(scanned.error)
    config = scanned.config
    instance = InstanceSpec(
        name=f"{name}_0",
        kind="GPU" if kind == "KIND_GPU" else "CPU",
        device_id=0,
        gpu_memory_fraction=fraction,
    )
    backend = backend_class(config.backend)(ModelVersion(name, 1, config, root / name), instance)
    backend.load()
    return backend


def measure(backend, batch: int, seconds: float) -> dict[str, float]:
    """Rows per second running ``batch``-row batches for ``seconds`` (after a warm-up)."""
    rows = np.random.default_rng(0).standard_normal((batch, LAYERS[0])).astype(np.float32)
    for _ in range(3):
        backend.run({"INPUT0": rows})
    done, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        out = backend.run({"INPUT0": rows})["OUTPUT0"]
        done += batch
    elapsed = time.perf_counter() - start
    assert out.shape == (batch, LAYERS[-1])
    return {"rows_per_s": done / elapsed, "batches": done / batch}


def _peak_memory_bytes() -> int:
    import torch

    return int(torch.cuda.max_memory_reserved()) if torch.cuda.is_available() else 0


def _instance_worker(args: tuple) -> dict[str, Any]:
    root, kind, fraction, batch, seconds, barrier = args
    backend = _backend(Path(root), "mlp_torchscript", kind, fraction)
    barrier.wait()  # every instance loaded: they run at the same time
    result = measure(backend, batch, seconds)
    return {**result, "peak_bytes": _peak_memory_bytes(), "fraction": fraction}


def shared_gpu(root: Path, kind: str, counts: list[int], batch: int, seconds: float) -> list:
    """N instances of the TorchScript MLP as N processes on GPU 0, each capped at 1/N."""
    context = multiprocessing.get_context("spawn")  # CUDA cannot be forked
    results = []
    for count in counts:
        with context.Manager() as manager:
            barrier = manager.Barrier(count)
            work = [(str(root), kind, 1.0 / count, batch, seconds, barrier)] * count
            with context.Pool(count) as pool:
                instances = pool.map(_instance_worker, work)
        total = sum(i["rows_per_s"] for i in instances)
        results.append({"instances": count, "rows_per_s": total, "per_instance": instances})
    return results


def _runtimes(kind: str) -> dict[str, str]:
    info: dict[str, str] = {}
    import torch

    info["torch"] = torch.__version__ + (
        f" (CUDA {torch.version.cuda}, {torch.cuda.get_device_name(0)})"
        if torch.cuda.is_available()
        else " (no CUDA device)"
    )
    try:
        import onnxruntime

        info["onnxruntime"] = (
            f"{onnxruntime.__version__} {','.join(onnxruntime.get_available_providers())}"
        )
    except ImportError:
        info["onnxruntime"] = "not installed"
    try:
        import tensorrt

        info["tensorrt"] = tensorrt.__version__
    except ImportError:
        info["tensorrt"] = "not installed"
    return info


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=5.0, help="per measurement")
    parser.add_argument("--instances", default="1,2,4", help="instance counts sharing GPU 0")
    parser.add_argument("--json", default="", help="also write the results to this file")
    args = parser.parse_args(argv)
    kind = "KIND_GPU" if args.device == "cuda" else "KIND_CPU"
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            print("error: no CUDA device (use --device cpu for a smoke run)")
            return 1
    report: dict[str, Any] = {"device": args.device, "runtimes": _runtimes(kind)}
    with tempfile.TemporaryDirectory(prefix="rayton-gpu-check-") as tmp:
        root = Path(tmp)
        written = write_repository(root, kind)
        backends: dict[str, Any] = {}
        for name, problem in written.items():
            if problem:
                backends[name] = {"skipped": problem}
                continue
            try:
                backend = _backend(root, name, kind, 1.0)
                result = measure(backend, args.batch, args.seconds)
                backends[name] = {**result, "peak_bytes": _peak_memory_bytes()}
                backend.unload()
            except Exception as err:
                backends[name] = {"failed": f"{type(err).__name__}: {err}"}
        report["backends"] = backends
        report["tensorrt"] = _tensorrt_note(report["runtimes"]["tensorrt"])
        counts = [int(c) for c in args.instances.split(",") if c]
        report["shared_gpu"] = shared_gpu(root, kind, counts, args.batch, args.seconds)
    print(format_report(report))
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2))
    return 0


def _tensorrt_note(version: str) -> str:
    if version == "not installed":
        return "TensorRT not installed: its backend was not run"
    return f"TensorRT {version} installed (engines are built per GPU: run the tensorrt tests)"


def format_report(report: dict[str, Any]) -> str:
    """Markdown for BENCHMARKS.md."""
    lines = [f"device: {report['device']}"]
    lines += [f"- {name}: {version}" for name, version in report["runtimes"].items()]
    lines += ["", "| model (backend) | rows/s | peak memory MiB |", "|---|---|---|"]
    for name, result in report["backends"].items():
        if "rows_per_s" in result:
            mib = result["peak_bytes"] / 2**20
            lines.append(f"| {name} | {result['rows_per_s']:.0f} | {mib:.0f} |")
        else:
            lines.append(f"| {name} | {result.get('skipped') or result.get('failed')} | |")
    lines += ["", report["tensorrt"], ""]
    lines += ["| instances on GPU 0 | total rows/s | each instance: rows/s, peak MiB (cap) |"]
    lines += ["|---|---|---|"]
    for row in report["shared_gpu"]:
        each = "; ".join(
            f"{i['rows_per_s']:.0f}, {i['peak_bytes'] / 2**20:.0f} ({i['fraction']:.2f})"
            for i in row["per_instance"]
        )
        lines.append(f"| {row['instances']} | {row['rows_per_s']:.0f} | {each} |")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
