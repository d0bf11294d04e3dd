"""The backend layer on a GPU, without Ray: what a GPU node of a rayton cluster runs per replica.

    python -m benchmarks.gpu_check                  # on a machine with a CUDA GPU
    python -m benchmarks.gpu_check --device cpu     # the same steps on CPU (a smoke run)

Writes a small repository (the benchmarks' ``mlp`` and conv net, each as TorchScript and as
ONNX), then per model and runtime measures rows/s of the raw framework (numpy to the device,
forward, back to numpy) against rayton's backend loaded as a ``KIND_GPU`` instance at the same
batch size (ONNX Runtime only where the installed build has its CUDA provider); then runs N
instances of each model as N processes sharing GPU 0, each capped at 1/N of its memory (as
``count: N`` packs N replicas on a GPU). Installs nothing, needs neither Ray nor the network.
"""

from __future__ import annotations

import argparse
import itertools
import json
import multiprocessing
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

# The benchmark models of BENCHMARKS.md, in torch: ``mlp`` (benchmarks/models.py) and the
# conv net of examples/builders.py (same blocks, 3x160x160 in, 1000 classes).
MLP_LAYERS = (512, 2048, 2048, 1000)
CONVNET_BLOCKS = ((32, 2), (64, 2), (64, 1), (128, 2), (128, 1), (256, 2))
CLASSES = 1000


@dataclass(frozen=True)
class CheckedModel:
    """One model of the check: its input row shape and the batch size it is measured at."""

    name: str
    row_shape: tuple[int, ...]
    batch: int


MODELS = (CheckedModel("mlp", (512,), 32), CheckedModel("convnet", (3, 160, 160), 8))

CONFIG = """\
name: "{name}"
backend: "{backend}"
max_batch_size: 64
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ {dims} ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ {classes} ] }} ]
instance_group [ {{ kind: {kind} count: 1 }} ]
"""


def torch_module(model: CheckedModel):
    """The model as an eval-mode torch module whose forward() argument is named INPUT0."""
    import torch

    torch.manual_seed(0)
    layers: list[Any] = []
    if model.name == "mlp":
        for fan_in, fan_out in itertools.pairwise(MLP_LAYERS):
            layers += [torch.nn.Linear(fan_in, fan_out), torch.nn.ReLU()]
        layers.pop()
    else:
        channels = model.row_shape[0]
        for out, stride in CONVNET_BLOCKS:
            layers += [
                torch.nn.Conv2d(channels, out, 3, stride=stride, padding=1, bias=False),
                torch.nn.BatchNorm2d(out),
                torch.nn.ReLU(),
            ]
            channels = out
        layers += [
            torch.nn.AdaptiveAvgPool2d(1),
            torch.nn.Flatten(),
            torch.nn.Linear(channels, CLASSES, bias=False),
        ]

    class Named(torch.nn.Module):
        # The pytorch backend binds inputs to forward()'s argument names.
        def __init__(self) -> None:
            super().__init__()
            self.body = torch.nn.Sequential(*layers)

        def forward(self, INPUT0):  # noqa: N803 - the config's input name
            return self.body(INPUT0)

    return Named().eval()


def write_repository(root: Path, kind: str) -> dict[str, str]:
    """The repository this check loads: name -> "" (written) or why it could not be."""
    import torch

    written: dict[str, str] = {}
    for model in MODELS:
        module = torch_module(model)
        example = torch.zeros(1, *model.row_shape)
        for backend, filename in (("pytorch", "model.pt"), ("onnxruntime", "model.onnx")):
            name = repository_name(model, backend)
            version = root / name / "1"
            version.mkdir(parents=True)
            dims = ", ".join(str(d) for d in model.row_shape)
            (root / name / "config.pbtxt").write_text(
                CONFIG.format(name=name, backend=backend, dims=dims, classes=CLASSES, kind=kind)
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


def repository_name(model: CheckedModel, backend: str) -> str:
    return f"{model.name}_{'torchscript' if backend == 'pytorch' else 'onnx'}"


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


def _rows(model: CheckedModel) -> np.ndarray:
    rng = np.random.default_rng(0)
    return rng.standard_normal((model.batch, *model.row_shape)).astype(np.float32)


def measure(run: Callable[[np.ndarray], np.ndarray], model: CheckedModel, seconds: float):
    """Rows per second of ``run`` on ``model.batch``-row batches, numpy in and out."""
    rows = _rows(model)
    for _ in range(5):
        out = run(rows)
    done, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        out = run(rows)
        done += model.batch
    elapsed = time.perf_counter() - start
    assert out.shape == (model.batch, CLASSES), out.shape
    return {"rows_per_s": done / elapsed, "batches": done / model.batch}


def raw_torch(model: CheckedModel, device: str) -> Callable[[np.ndarray], np.ndarray]:
    """What a hand-written handler does: numpy -> device, forward, -> numpy."""
    import torch

    module = torch.jit.trace(torch_module(model), torch.zeros(1, *model.row_shape)).to(device)

    def run(rows: np.ndarray) -> np.ndarray:
        with torch.inference_mode():
            return module(torch.from_numpy(rows).to(device)).cpu().numpy()

    return run


def raw_onnxruntime(path: Path, device: str) -> Callable[[np.ndarray], np.ndarray]:
    import onnxruntime

    providers = ["CPUExecutionProvider"]
    if device == "cuda":
        providers.insert(0, "CUDAExecutionProvider")
    session = onnxruntime.InferenceSession(str(path), providers=providers)
    if device == "cuda" and "CUDAExecutionProvider" not in session.get_providers():
        raise RuntimeError("this onnxruntime build has no CUDA execution provider")
    return lambda rows: session.run(None, {"INPUT0": rows})[0]


def _served(backend) -> Callable[[np.ndarray], np.ndarray]:
    return lambda rows: backend.run({"INPUT0": rows})["OUTPUT0"]


def compare(root: Path, model: CheckedModel, kind: str, seconds: float) -> dict[str, Any]:
    """Raw framework and rayton's backend on the same batches, per runtime."""
    device = "cuda" if kind == "KIND_GPU" else "cpu"
    result: dict[str, Any] = {"batch": model.batch}
    for backend_name, raw in (
        ("pytorch", lambda: raw_torch(model, device)),
        (
            "onnxruntime",
            lambda: raw_onnxruntime(
                root / repository_name(model, "onnxruntime") / "1" / "model.onnx", device
            ),
        ),
    ):
        name = repository_name(model, backend_name)
        try:
            raw_rows = measure(raw(), model, seconds)["rows_per_s"]
            backend = _backend(root, name, kind, 1.0)
            served = measure(_served(backend), model, seconds)
            backend.unload()
            result[backend_name] = {
                "raw_rows_per_s": raw_rows,
                "rayton_rows_per_s": served["rows_per_s"],
            }
        except Exception as err:
            result[backend_name] = {"failed": f"{type(err).__name__}: {err}"}
    return result


def _peak_memory_bytes() -> int:
    import torch

    return int(torch.cuda.max_memory_reserved()) if torch.cuda.is_available() else 0


def _instance_worker(args: tuple) -> dict[str, Any]:
    root, name, model, kind, fraction, seconds, barrier = args
    backend = _backend(Path(root), name, kind, fraction)
    barrier.wait()  # every instance loaded: they run at the same time
    result = measure(_served(backend), model, seconds)
    return {**result, "peak_bytes": _peak_memory_bytes(), "fraction": fraction}


def shared_gpu(
    root: Path, name: str, model: CheckedModel, kind: str, counts: list[int], seconds: float
) -> list[dict[str, Any]]:
    """N instances of one model as N processes on GPU 0, each capped at 1/N of its memory."""
    context = multiprocessing.get_context("spawn")  # CUDA cannot be forked
    results = []
    for count in counts:
        with context.Manager() as manager:
            barrier = manager.Barrier(count)
            work = [(str(root), name, model, kind, 1.0 / count, seconds, barrier)] * count
            with context.Pool(count) as pool:
                instances = pool.map(_instance_worker, work)
        total = sum(i["rows_per_s"] for i in instances)
        results.append({"instances": count, "rows_per_s": total, "per_instance": instances})
    return results


def _runtimes() -> dict[str, str]:
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
    parser.add_argument("--seconds", type=float, default=3.0, help="per measurement")
    parser.add_argument("--instances", default="1,4", help="instance counts sharing GPU 0")
    parser.add_argument("--json", default="", help="also write the results to this file")
    args = parser.parse_args(argv)
    kind = "KIND_GPU" if args.device == "cuda" else "KIND_CPU"
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            print("error: no CUDA device (use --device cpu for a smoke run)")
            return 1
    report: dict[str, Any] = {"device": args.device, "runtimes": _runtimes()}
    counts = [int(c) for c in args.instances.split(",") if c]
    with tempfile.TemporaryDirectory(prefix="rayton-gpu-check-") as tmp:
        root = Path(tmp)
        report["not_written"] = {n: why for n, why in write_repository(root, kind).items() if why}
        report["models"] = {}
        for model in MODELS:
            compared = compare(root, model, kind, args.seconds)
            shared = {}
            for backend_name in ("pytorch", "onnxruntime"):
                if "failed" not in compared[backend_name]:
                    name = repository_name(model, backend_name)
                    shared[name] = shared_gpu(root, name, model, kind, counts, args.seconds)
            report["models"][model.name] = {"compared": compared, "shared_gpu": shared}
            print(format_report(report), flush=True)  # partial results survive a timeout
    report["tensorrt"] = _tensorrt_note(report["runtimes"]["tensorrt"])
    print(report["tensorrt"])
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
    lines += [f"- {name} not written: {why}" for name, why in report["not_written"].items()]
    lines += [
        "",
        "| model | batch | runtime | raw rows/s | rayton backend rows/s | rayton / raw |",
        "|---|---|---|---|---|---|",
    ]
    for model_name, result in report["models"].items():
        compared = result["compared"]
        for runtime in ("pytorch", "onnxruntime"):
            row = compared[runtime]
            if "failed" in row:
                lines.append(
                    f"| {model_name} | {compared['batch']} | {runtime} | {row['failed']} |||"
                )
                continue
            raw, served = row["raw_rows_per_s"], row["rayton_rows_per_s"]
            lines.append(
                f"| {model_name} | {compared['batch']} | {runtime} | {raw:.0f} | {served:.0f} "
                f"| {served / raw:.2f} |"
            )
    lines += [
        "",
        "| model | instances on GPU 0 | total rows/s | each instance: rows/s, peak MiB (cap) |",
        "|---|---|---|---|",
    ]
    for result in report["models"].values():
        for name, rows in result["shared_gpu"].items():
            for row in rows:
                each = "; ".join(
                    f"{i['rows_per_s']:.0f}, {i['peak_bytes'] / 2**20:.0f} ({i['fraction']:.2f})"
                    for i in row["per_instance"]
                )
                lines.append(f"| {name} | {row['instances']} | {row['rows_per_s']:.0f} | {each} |")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
