"""Small python-backend models written into a repository by tests that change it while served.

``write_adder(root, "a", version=2, offset=2.0)`` writes ``a/config.pbtxt`` (if missing) and
``a/2/model.py`` answering ``OUT = IN + offset``, so a client can tell versions apart.
"""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np

ADDER_CONFIG = """\
backend: "python"
max_batch_size: 8
input [ {{ name: "IN" data_type: TYPE_FP32 dims: [ 1 ] }} ]
output [ {{ name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] }} ]
dynamic_batching {{ max_queue_delay_microseconds: {delay_us} }}
instance_group [ {{ kind: KIND_CPU count: 1 }} ]
"""

ADDER_MODEL = """\
import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        {init}

    def execute(self, requests):
        responses = []
        for request in requests:
            value = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            out = pb_utils.Tensor("OUT", (value * {scale} + {offset}).astype(value.dtype))
            responses.append(pb_utils.InferenceResponse([out]))
        return responses
"""

ENSEMBLE_CONFIG = """\
platform: "ensemble"
max_batch_size: 8
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] } ]
ensemble_scheduling {
  step [
    {
      model_name: "%s"
      model_version: -1
      input_map { key: "IN" value: "IN" }
      output_map { key: "OUT" value: "middle" }
    },
    {
      model_name: "%s"
      model_version: -1
      input_map { key: "IN" value: "middle" }
      output_map { key: "OUT" value: "OUT" }
    }
  ]
}
"""


def write_adder(
    root: Path,
    name: str,
    version: int = 1,
    offset: float = 1.0,
    scale: float = 1.0,
    delay_us: int = 1000,
    fail_initialize: bool = False,
    initialize_s: float = 0.0,
) -> Path:
    """A model answering ``IN * scale + offset`` (version ``version``); returns its directory.

    ``initialize_s`` makes its load last that long, so a sampler can see it LOADING."""
    model_dir = root / name
    (model_dir / str(version)).mkdir(parents=True, exist_ok=True)
    config = model_dir / "config.pbtxt"
    if not config.exists():
        config.write_text(ADDER_CONFIG.format(delay_us=delay_us))
    init = 'raise ValueError("init exploded")' if fail_initialize else f"time.sleep({initialize_s})"
    (model_dir / str(version) / "model.py").write_text(
        ADDER_MODEL.format(init=init, offset=offset, scale=scale)
    )
    return model_dir


def write_chain(root: Path, name: str, first: str, second: str) -> Path:
    """An ensemble running ``first`` then ``second``."""
    model_dir = root / name
    (model_dir / "1").mkdir(parents=True, exist_ok=True)
    (model_dir / "config.pbtxt").write_text(ENSEMBLE_CONFIG % (first, second))
    return model_dir


RECORDING_MODEL = """\
import json
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.log = args["model_repository"] + "/calls.jsonl"

    def execute(self, requests):
        values = [pb_utils.get_input_tensor_by_name(r, "IN").as_numpy() for r in requests]
        with open(self.log, "a") as log:
            log.write(json.dumps([v.tolist() for v in values]) + "\\n")
        if {FAIL_ON_ZEROS} and all(not v.any() for v in values):
            raise RuntimeError("zeros are not welcome")
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUT", v + 1)]) for v in values]
"""

WARM_CONFIG = """\
backend: "python"
max_batch_size: 4
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 2 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 2 ] } ]
model_warmup [
  { name: "zeros" batch_size: 3 count: 2
    inputs { key: "IN" value: { data_type: TYPE_FP32 dims: [ 2 ] zero_data: true } } },
  { name: "from_file" batch_size: 1
    inputs { key: "IN" value: { data_type: TYPE_FP32 dims: [ 2 ] input_data_file: "in.raw" } } }
]
"""


def write_warm_model(
    root: Path, fail_on_zeros: bool = False, config: str = WARM_CONFIG, name: str = "warm"
) -> Path:
    """A model with two warmup samples that logs every execution to ``calls.jsonl``."""
    model_dir = root / name
    (model_dir / "1").mkdir(parents=True)
    (model_dir / "config.pbtxt").write_text(config)
    (model_dir / "1" / "model.py").write_text(
        RECORDING_MODEL.replace("{FAIL_ON_ZEROS}", str(fail_on_zeros))
    )
    (model_dir / "warmup").mkdir()
    (model_dir / "warmup" / "in.raw").write_bytes(np.array([7, 8], np.float32).tobytes())
    return model_dir


def model_builder(root: Path, name: str, gate: threading.Event | None = None):
    """A ``BuildModel`` loading ``root/name`` as a SingleModel (after ``gate``, if given)."""
    from deployments.core.single_model import SingleModel
    from repo_adapter.backends import InstanceSpec
    from repo_adapter.repository import scan_model

    def build():
        if gate is not None:
            gate.wait(10)
        scanned = scan_model(root / name)
        return SingleModel(
            scanned.config, scanned.path, scanned.versions, {}, InstanceSpec.cpu(name)
        )

    return build
