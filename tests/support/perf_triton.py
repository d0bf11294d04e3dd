"""The reference tritonserver 2.51 serving a tiny Python-backend repository, for the
load generator's tests (``rayton perf`` and the benchmarks' client processes).

* ``ident``: FP32 [4] identity, ``max_batch_size: 8``, dynamic batching;
* ``ident_nobatch``: the same without batching;
* ``broken``: fails every request, to check the error path.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from tests.support.requirements import missing

IDENTITY_MODEL = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [
            pb_utils.InferenceResponse(
                output_tensors=[
                    pb_utils.Tensor("OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy())
                ]
            )
            for r in requests
        ]
"""

BROKEN_MODEL = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [
            pb_utils.InferenceResponse(error=pb_utils.TritonError("broken on purpose"))
            for _ in requests
        ]
"""


def _config(name: str, max_batch_size: int, batching: bool) -> str:
    text = (
        f'name: "{name}"\nbackend: "python"\nmax_batch_size: {max_batch_size}\n'
        'input [ { name: "IN" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
        'output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
        "instance_group [ { kind: KIND_CPU count: 1 } ]\n"
    )
    if batching:
        text += "dynamic_batching { max_queue_delay_microseconds: 500 }\n"
    return text


def _write_repository(root: Path) -> Path:
    models = {
        "ident": (_config("ident", 8, True), IDENTITY_MODEL),
        "ident_nobatch": (_config("ident_nobatch", 0, False), IDENTITY_MODEL),
        "broken": (_config("broken", 8, False), BROKEN_MODEL),
    }
    for name, (config, code) in models.items():
        (root / name / "1").mkdir(parents=True)
        (root / name / "config.pbtxt").write_text(config)
        (root / name / "1" / "model.py").write_text(code)
    return root


def serving_idents(root: Path) -> Iterator:
    """The reference tritonserver on loopback ports serving the repository written under
    ``root``, or a skip saying why not."""
    try:
        from tests.reference_triton import (
            ReferenceTriton,
            ReferenceTritonError,
            require_reference_triton,
        )
    except ImportError as err:
        missing(f"reference Triton harness (tests/reference_triton.py) unavailable: {err}")
    require_reference_triton()
    repository = _write_repository(root / "models")
    server = ReferenceTriton(repository, start_timeout=90)
    try:
        server.start()
    except ReferenceTritonError as err:
        server.cleanup()
        missing(f"reference tritonserver could not start: {err}")
    try:
        for model in ("ident", "ident_nobatch"):
            status, _ = server.request("GET", f"/v2/models/{model}/ready")
            if status != 200:
                missing(f"reference model {model} not ready:\n{server.log_tail()}")
        yield server
    finally:
        server.cleanup()
