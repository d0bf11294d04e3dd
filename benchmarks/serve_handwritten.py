"""Run the hand-written baseline app on a local Ray cluster until SIGINT/SIGTERM.

``python -m benchmarks.serve_handwritten --repository DIR --port P``: one application per
model of a benchmark repository (the python models hand-written, see
:mod:`benchmarks.handwritten_serve`), with the same fast-ingress flags rayton uses.
"""

from __future__ import annotations

import argparse
import signal
import threading
from pathlib import Path

from benchmarks.handwritten_serve import HandwrittenModel, HandwrittenServer
from benchmarks.models import MODELS
from cluster.local import start_ray


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repository", required=True, type=Path)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--dashboard-port", type=int, default=8265)
    args = parser.parse_args()

    from ray import serve
    from ray.serve.api import RunTarget

    start_ray(dashboard_port=args.dashboard_port)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    serve.start(http_options={"host": "127.0.0.1", "port": args.port})
    targets = [RunTarget(HandwrittenServer.bind(), name="server", route_prefix="/")]
    for model in MODELS:
        if not model.max_batch_size:  # an app of batched models: the unbatched one is rayton's
            continue
        # a pipeline's classifier runs in the pipeline's own replica
        onnx_model = model.name if model.kind == "onnx" else model.classifier
        path = onnx_model and str((args.repository / onnx_model / "1" / "model.onnx").resolve())
        app = HandwrittenModel.options(name=model.name).bind(
            model.name,
            path,
            list(model.input_dims),
            list(model.output_dims),
            model.max_batch_size,
            model.input_type,
            preprocess=model.kind == "python",
        )
        targets.append(RunTarget(app, name=model.name, route_prefix=f"/v2/models/{model.name}"))
    serve.run_many(targets, wait_for_applications_running=True)
    print("ready", flush=True)
    stop.wait()
    serve.shutdown()


if __name__ == "__main__":
    main()
