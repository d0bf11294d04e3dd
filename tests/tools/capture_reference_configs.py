"""Capture Triton's ``/config`` JSON for the config conformance cases from a real tritonserver.

Each directory under ``tests/repo_adapter/config_cases/<case>/`` is one model named
``<case>``: a ``config.pbtxt``, optional extra files (label files ...) and an optional
``case.json`` manifest::

    {"versions": [1, 2, 3],   # version directories to create (default [1])
     "model_file": "model.py" # file put in each version dir; null for ensembles (default)
    }

:func:`build_case_repository` turns the cases into a model repository (every version
directory gets the same tiny python-backend model, :data:`TEMPLATE_MODEL_PY`, so no copies
are committed). The unit tests build the same repository and scan it with our pipeline.

Running this module starts the reference tritonserver (``tests/reference_triton.py``) on that
repository and writes, for each case, either ``expected_config.json`` (the server's
``GET /v2/models/<case>/config``) or, when Triton refuses to load the model,
``expected_error.txt`` (the reason from ``POST /v2/repository/index``)::

    python -m tests.tools.capture_reference_configs [--cases-dir DIR] [CASE ...]
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path

CASES_DIR = Path(__file__).resolve().parent.parent / "repo_adapter" / "config_cases"

MANIFEST = "case.json"
EXPECTED_CONFIG = "expected_config.json"
EXPECTED_ERROR = "expected_error.txt"
_NOT_COPIED = {MANIFEST, EXPECTED_CONFIG, EXPECTED_ERROR}

# A python-backend model that loads for any config: it answers every request with zero-filled
# outputs shaped from the config (wildcards as 1), so warmup requests succeed too.
TEMPLATE_MODEL_PY = '''\
"""Config conformance test model: zero-filled outputs shaped from the model config."""

import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.config = json.loads(args["model_config"])

    def execute(self, requests):
        responses = []
        for request in requests:
            batch = []
            if self.config["max_batch_size"] > 0 and request.inputs():
                batch = [request.inputs()[0].as_numpy().shape[0]]
            tensors = []
            for output in self.config["output"]:
                dims = [max(int(d), 1) for d in output["dims"]]
                dtype = pb_utils.triton_string_to_numpy(output["data_type"])
                tensors.append(pb_utils.Tensor(output["name"], np.zeros(batch + dims, dtype)))
            responses.append(pb_utils.InferenceResponse(tensors))
        return responses
'''


def case_names(cases_dir: Path = CASES_DIR) -> list[str]:
    """Every case directory (one holding a ``config.pbtxt``), sorted."""
    return sorted(p.name for p in cases_dir.iterdir() if (p / "config.pbtxt").is_file())


def read_manifest(case_dir: Path) -> dict:
    """The case's ``case.json`` with defaults filled in."""
    manifest = {"versions": [1], "model_file": "model.py"}
    path = case_dir / MANIFEST
    if path.is_file():
        manifest.update(json.loads(path.read_text()))
    return manifest


def build_case_model(case_dir: Path, repository: Path) -> Path:
    """Materialise one case as ``repository/<case>``; returns the model directory."""
    manifest = read_manifest(case_dir)
    model_dir = repository / case_dir.name
    model_dir.mkdir(parents=True)
    for entry in case_dir.iterdir():
        if entry.name in _NOT_COPIED:
            continue
        if entry.is_dir():
            shutil.copytree(entry, model_dir / entry.name)
        else:
            shutil.copy2(entry, model_dir / entry.name)
    for version in manifest["versions"]:
        version_dir = model_dir / str(version)
        version_dir.mkdir()
        if manifest["model_file"]:
            (version_dir / manifest["model_file"]).write_text(TEMPLATE_MODEL_PY)
    return model_dir


def build_case_repository(
    repository: Path, cases: Iterable[str] | None = None, cases_dir: Path = CASES_DIR
) -> Path:
    """Materialise ``cases`` (default: all) as models of ``repository``."""
    repository.mkdir(parents=True, exist_ok=True)
    for name in case_names(cases_dir) if cases is None else cases:
        build_case_model(cases_dir / name, repository)
    return repository


_LOG_MESSAGE = re.compile(r'^E\S* \S+ \d+ \S+\] "(?P<message>.*)"$')


def error_from_log(log: str, model: str) -> str:
    """The load error tritonserver logged for ``model`` (2.51's index has no reason for
    models rejected while the repository is polled, before any load attempt)."""
    prefixes = (
        f"Poll failed for model directory '{model}': ",
        f"failed to load model '{model}': ",
        f"failed to load '{model}' version ",
    )
    for line in log.splitlines():
        match = _LOG_MESSAGE.match(line)
        if not match:
            continue
        message = match.group("message")
        for prefix in prefixes:
            if message.startswith(prefix):
                message = message[len(prefix) :]
                if prefix.endswith("version "):
                    message = message.split(": ", 1)[-1]
                return message
    return f"model '{model}' not loaded (no error found in the server log)"


def capture(cases_dir: Path = CASES_DIR, cases: Iterable[str] | None = None) -> dict[str, str]:
    """Start the reference server on the cases and write the expected files.

    Returns ``{case: "config" | "error"}``.
    """
    from tests.reference_triton import ReferenceTriton

    # Ensembles need their member models in the same repository, so always load every case
    # and only write the selected ones.
    selected = case_names(cases_dir) if cases is None else list(cases)
    outcome: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="rayton-config-cases-") as tmp:
        repository = build_case_repository(Path(tmp) / "models", cases_dir=cases_dir)
        server = ReferenceTriton(repository, start_timeout=300.0)
        with server:
            index = {entry["name"]: entry for entry in server.repository_index()}
            for name in selected:
                case_dir = cases_dir / name
                for stale in (EXPECTED_CONFIG, EXPECTED_ERROR):
                    (case_dir / stale).unlink(missing_ok=True)
                entry = index.get(name, {})
                if entry.get("state") == "READY":
                    config = server.model_config(name)
                    text = json.dumps(config, indent=2, sort_keys=True) + "\n"
                    (case_dir / EXPECTED_CONFIG).write_text(text)
                    outcome[name] = "config"
                else:
                    reason = entry.get("reason") or error_from_log(server.log_text(), name)
                    reason = reason.replace(str(repository), "<repository>")
                    (case_dir / EXPECTED_ERROR).write_text(reason.strip() + "\n")
                    outcome[name] = "error"
            log = server.log_text()
    (Path(tempfile.gettempdir()) / "rayton-config-cases-tritonserver.log").write_text(log)
    return outcome


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases-dir", type=Path, default=CASES_DIR)
    parser.add_argument("cases", nargs="*", help="cases to (re)capture (default: all)")
    args = parser.parse_args(argv)
    outcome = capture(args.cases_dir, args.cases or None)
    for name, kind in sorted(outcome.items()):
        print(f"{kind:6} {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
