"""A python model with several versions, each answering its own version number: what the
version traffic tests count (repo_adapter/version_traffic.py)."""

from __future__ import annotations

from pathlib import Path

VERSIONED_MODEL = """
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.version = int(args["model_version"])

    def execute(self, requests):
        responses = []
        for request in requests:
            data = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            if self.version == {FAILING_VERSION} and (data < 0).any():
                responses.append(
                    pb_utils.InferenceResponse(error=pb_utils.TritonError("negative input"))
                )
                continue
            if self.version == {SLOW_VERSION}:
                time.sleep({SLOW_S})
            version = np.full(data.shape, self.version, np.int32)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("VERSION", version)]))
        return responses
"""

VERSIONED_CONFIG = """
name: "{NAME}"
backend: "python"
max_batch_size: 8
dynamic_batching {{ }}
version_policy: {{ all {{ }} }}
input [ {{ name: "IN" data_type: TYPE_FP32 dims: [ 1 ] }} ]
output [ {{ name: "VERSION" data_type: TYPE_INT32 dims: [ 1 ] }} ]
instance_group [ {{ kind: KIND_CPU count: 1 }} ]
{PARAMETERS}
"""


def write_versioned_model(
    root: Path,
    name: str = "versioned",
    versions: tuple[int, ...] = (1, 2, 3),
    parameters: dict[str, str] | None = None,
    failing_version: int = 0,
    slow_version: int = 0,
    slow_s: float = 0.0,
) -> Path:
    """``root/name`` with ``versions``; ``parameters`` go in its config (the traffic policy).
    ``failing_version`` fails a request with a negative input; ``slow_version`` sleeps
    ``slow_s`` per request."""
    model_dir = root / name
    model_dir.mkdir(parents=True)
    entries = "\n".join(
        f'parameters {{ key: "{key}" value: {{ string_value: "{value}" }} }}'
        for key, value in (parameters or {}).items()
    )
    (model_dir / "config.pbtxt").write_text(VERSIONED_CONFIG.format(NAME=name, PARAMETERS=entries))
    source = (
        VERSIONED_MODEL.replace("{FAILING_VERSION}", str(failing_version))
        .replace("{SLOW_VERSION}", str(slow_version))
        .replace("{SLOW_S}", repr(slow_s))
    )
    for version in versions:
        (model_dir / str(version)).mkdir()
        (model_dir / str(version) / "model.py").write_text(source)
    return model_dir


PID_MODEL = """
import os

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        pid = np.array([[os.getpid()]], np.int64)
        return [
            pb_utils.InferenceResponse([pb_utils.Tensor("PID", np.repeat(pid, len(
                pb_utils.get_input_tensor_by_name(r, "IN").as_numpy()), axis=0))])
            for r in requests
        ]
"""

PID_CONFIG = """
name: "{NAME}"
backend: "python"
max_batch_size: 8
dynamic_batching {{ }}
input [ {{ name: "IN" data_type: TYPE_FP32 dims: [ 1 ] }} ]
output [ {{ name: "PID" data_type: TYPE_INT64 dims: [ 1 ] }} ]
instance_group [ {{ kind: KIND_CPU count: {COUNT} }} ]
{PARAMETERS}
"""


def write_pid_model(root: Path, name: str, parameters: dict[str, str], replicas: int = 1) -> Path:
    """``root/name``: answers the pid of the process that ran it (a replaced replica's
    successor answers another)."""
    model_dir = root / name
    (model_dir / "1").mkdir(parents=True)
    entries = "\n".join(  # single-quoted: a value may be JSON
        f"parameters {{ key: \"{key}\" value: {{ string_value: '{value}' }} }}"
        for key, value in parameters.items()
    )
    (model_dir / "config.pbtxt").write_text(
        PID_CONFIG.format(NAME=name, COUNT=replicas, PARAMETERS=entries)
    )
    (model_dir / "1" / "model.py").write_text(PID_MODEL)
    return model_dir
