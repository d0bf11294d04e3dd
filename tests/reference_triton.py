"""Run the real ``tritonserver`` bundled with ``nvidia-pytriton`` as a reference for tests.

PyTriton (``pip install nvidia-pytriton``) ships a complete tritonserver 2.51 binary with the
Python backend only. :class:`ReferenceTriton` starts it directly, without PyTriton's own
Python API, on a model repository of our choosing:

* a private workspace holds ``backends/python/`` (``libtriton_python.so``,
  ``triton_python_backend_utils.py`` and the ``triton_python_backend_stub`` built for the
  running Python version), because the bundled tree has no stub in place;
* ``LD_LIBRARY_PATH`` starts with the workspace's ``lib`` (``libtritonserver.so``, a link to
  the bundled library the wheel renamed, for C backends linked against that name), the
  running Python's ``lib`` directory (the stub links ``libpython3.X.so``; a different build of
  the same version breaks model loading), then ``nvidia_pytriton.libs`` (the bundled shared
  libraries);
* ``PATH`` starts with the ``bin`` directory of the stubs' Python environment (see
  :func:`stub_bin_dir`), so the stub's Python finds its packages (``numpy`` < 2 is required
  by the 2.51 backend utilities);
* every endpoint binds to 127.0.0.1 on ports the OS hands out (never fixed ports);
* the server runs in its own process session and :meth:`ReferenceTriton.stop` signals the
  whole process group (server plus Python-backend stubs), SIGTERM then SIGKILL.

Usage::

    with ReferenceTriton(repo_dir) as triton:
        requests.get(f"{triton.http_url}/v2/models/m/config")

Tests that need it call :func:`require_reference_triton` first; it skips (instead of failing)
where the package is missing or the binary cannot run on the platform (glibc < 2.35, ...),
except in CI, where it fails (:mod:`tests.support.requirements`).
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from tests.support.ports import free_ports

HOST = "127.0.0.1"

_PYTHON_BACKEND_FILES = ("libtriton_python.so", "triton_python_backend_utils.py")
_STUB_NAME = "triton_python_backend_stub"


class ReferenceTritonError(RuntimeError):
    """The reference server could not be found or failed to start."""


# ---------------------------------------------------------------------------------------------
# Locating the bundled server


def _pytriton_dir() -> Path | None:
    try:
        spec = importlib.util.find_spec("pytriton")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def find_tritonserver() -> Path | None:
    """Path of the ``tritonserver`` binary inside the installed ``pytriton`` package, or None."""
    package = _pytriton_dir()
    if package is None:
        return None
    binary = package / "tritonserver" / "bin" / "tritonserver"
    return binary if binary.is_file() else None


def _server_root() -> Path:
    binary = find_tritonserver()
    if binary is None:
        raise ReferenceTritonError(
            "tritonserver not found: install nvidia-pytriton (it bundles tritonserver 2.51)"
        )
    return binary.parent.parent  # .../pytriton/tritonserver


def _libs_dir(server_root: Path) -> Path:
    # The auditwheel-vendored shared libraries sit next to the pytriton package.
    return server_root.parent.parent / "nvidia_pytriton.libs"


def _stub_path(server_root: Path) -> Path:
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    return server_root / "python_backend_stubs" / version / _STUB_NAME


REFERENCE_VENV_ENV = "RAYTON_REFERENCE_VENV"


def server_environment(
    base: dict[str, str] | None = None, library_dirs: Sequence[Path] = ()
) -> dict[str, str]:
    """Environment for the binary and its Python-backend stubs (see the module docstring);
    ``library_dirs`` go first on ``LD_LIBRARY_PATH``."""
    env = dict(os.environ if base is None else base)
    server_root = _server_root()
    libs = [
        *map(str, library_dirs),
        str(Path(sys.base_prefix) / "lib"),
        str(_libs_dir(server_root)),
    ]
    if env.get("LD_LIBRARY_PATH"):
        libs.append(env["LD_LIBRARY_PATH"])
    env["LD_LIBRARY_PATH"] = os.pathsep.join(libs)
    env["PATH"] = os.pathsep.join(p for p in (str(stub_bin_dir()), env.get("PATH", "")) if p)
    return env


def stub_bin_dir() -> Path:
    """``bin`` of the environment whose packages the Python-backend stubs import.

    Triton 2.51's stub reads numpy arrays through numpy 1.x's ABI (under numpy 2 it sees
    empty tensors), so ``make setup`` builds a small numpy<2 environment, ``.venv-reference``,
    for the stubs alone; ``RAYTON_REFERENCE_VENV`` names another one. Without either, the
    running interpreter's environment is used.
    """
    configured = os.environ.get(REFERENCE_VENV_ENV)
    candidates = [Path(configured)] if configured else []
    candidates.append(Path(__file__).resolve().parents[1] / ".venv-reference")
    for venv in candidates:
        if (venv / "bin" / "python").exists():
            return venv / "bin"
    return Path(sys.executable).parent


# ---------------------------------------------------------------------------------------------
# Ports


# ---------------------------------------------------------------------------------------------
# The server


class ReferenceTriton:
    """A tritonserver 2.51 process serving ``model_repository`` on loopback ports.

    ``extra_args`` are appended to the command line (e.g. ``--model-control-mode=explicit``).
    ``extra_backends``: directories copied into the server's backend directory as
    ``<name>/`` (a python-based backend's ``model.py``, say).
    ``start_timeout`` bounds the wait for ``/v2/health/live``; in the default model control
    mode the HTTP endpoint only comes up after every model was (tried to be) loaded.
    """

    def __init__(
        self,
        model_repository: Path | str | Sequence[Path | str],
        extra_args: Iterable[str] = (),
        start_timeout: float = 60.0,
        stop_timeout: float = 15.0,
        extra_backends: Mapping[str, Path] | None = None,
    ) -> None:
        if isinstance(model_repository, (str, Path)):
            model_repository = [model_repository]
        self.model_repositories = [Path(p).resolve() for p in model_repository]
        self.extra_args = list(extra_args)
        self.extra_backends = dict(extra_backends or {})
        self.start_timeout = start_timeout
        self.stop_timeout = stop_timeout
        self.http_port = self.grpc_port = self.metrics_port = 0
        self.workspace: Path | None = None
        self.log_path: Path | None = None
        self._process: subprocess.Popen | None = None
        self._log_file = None

    # -- public API ---------------------------------------------------------------------------

    @property
    def http_url(self) -> str:
        """Base URL of the HTTP endpoint, e.g. ``http://127.0.0.1:PORT``."""
        return f"http://{HOST}:{self.http_port}"

    @property
    def grpc_url(self) -> str:
        """``host:port`` of the gRPC endpoint (the form tritonclient.grpc expects)."""
        return f"{HOST}:{self.grpc_port}"

    @property
    def metrics_url(self) -> str:
        """URL of the Prometheus metrics page."""
        return f"http://{HOST}:{self.metrics_port}/metrics"

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def log_text(self) -> str:
        """Everything the server has logged so far."""
        if self.log_path is None or not self.log_path.exists():
            return ""
        return self.log_path.read_text(errors="replace")

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])

    def command(self) -> list[str]:
        """The tritonserver command line (valid once ports and workspace are chosen)."""
        assert self.workspace is not None
        server_root = _server_root()
        cmd = [str(server_root / "bin" / "tritonserver")]
        cmd += [f"--model-repository={path}" for path in self.model_repositories]
        cmd += [
            f"--backend-directory={self.workspace / 'backends'}",
            f"--cache-directory={server_root / 'caches'}",
            f"--http-address={HOST}",
            f"--grpc-address={HOST}",
            f"--metrics-address={HOST}",
            f"--http-port={self.http_port}",
            f"--grpc-port={self.grpc_port}",
            f"--metrics-port={self.metrics_port}",
            "--exit-on-error=false",
            "--exit-timeout-secs=5",
            *self.extra_args,
        ]
        return cmd

    def start(self, port_attempts: int = 3) -> ReferenceTriton:
        """Start the server and wait until it is live; raises with the log tail on failure."""
        if self.running():
            return self
        for attempt in range(port_attempts):
            self._launch()
            try:
                self._wait_live()
                return self
            except ReferenceTritonError:
                in_use = "already in use" in self.log_text()
                self.stop()
                if not in_use or attempt == port_attempts - 1:
                    raise
        raise AssertionError("unreachable")

    @property
    def session_id(self) -> int:
        """The process session of the running server (its stub processes share it)."""
        if self._process is None:
            raise ReferenceTritonError("the reference Triton is not running")
        return self._process.pid  # started with start_new_session=True: it leads its session

    def stop(self) -> None:
        """Stop the server and every process of its group; never leaves orphans behind."""
        process, self._process = self._process, None
        if process is not None:
            _terminate_group(process, self.stop_timeout)
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None
        with contextlib.suppress(ValueError):
            atexit.unregister(self.stop)

    def cleanup(self) -> None:
        """Stop and delete the workspace (including the log)."""
        self.stop()
        if self.workspace is not None:
            shutil.rmtree(self.workspace, ignore_errors=True)
            self.workspace = None
            self.log_path = None

    def __enter__(self) -> ReferenceTriton:
        try:
            return self.start()
        except BaseException:
            self.cleanup()  # the exception already carries the log tail
            raise

    def __exit__(self, *exc_info: object) -> None:
        self.cleanup()

    # -- HTTP helpers -------------------------------------------------------------------------

    def request(
        self, method: str, path: str, body: Any = None, timeout: float = 30.0
    ) -> tuple[int, Any]:
        """One HTTP request to the server; returns ``(status, parsed JSON or text or None)``."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(f"{self.http_url}{path}", data=data, method=method)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                status, raw = resp.status, resp.read()
        except urllib.error.HTTPError as err:
            status, raw = err.code, err.read()
        if not raw:
            return status, None
        try:
            return status, json.loads(raw)
        except ValueError:
            return status, raw.decode(errors="replace")

    def model_config(self, model: str, version: str = "") -> dict[str, Any]:
        """``GET /v2/models/<model>[/versions/<v>]/config``; raises on a non-200 answer."""
        path = f"/v2/models/{model}" + (f"/versions/{version}" if version else "") + "/config"
        status, body = self.request("GET", path)
        if status != 200:
            raise ReferenceTritonError(f"GET {path} -> {status}: {body}")
        return body

    def repository_index(self) -> list[dict[str, Any]]:
        """``POST /v2/repository/index``: every model with its state and reason."""
        status, body = self.request("POST", "/v2/repository/index", {})
        if status != 200:
            raise ReferenceTritonError(f"repository index -> {status}: {body}")
        return body

    # -- internals ----------------------------------------------------------------------------

    def _prepare_workspace(self) -> None:
        if self.workspace is not None:
            return
        server_root = _server_root()
        stub = _stub_path(server_root)
        if not stub.is_file():
            raise ReferenceTritonError(
                f"no Python backend stub for Python {sys.version_info.major}."
                f"{sys.version_info.minor} in {stub.parent.parent}"
            )
        self.workspace = Path(tempfile.mkdtemp(prefix="rayton-reftriton-"))
        python_dir = self.workspace / "backends" / "python"
        python_dir.mkdir(parents=True)
        for name in _PYTHON_BACKEND_FILES:
            shutil.copy2(server_root / "backends" / "python" / name, python_dir / name)
        shutil.copy2(stub, python_dir / _STUB_NAME)
        for name, source in self.extra_backends.items():
            shutil.copytree(source, self.workspace / "backends" / name)
        # The wheel renamed libtritonserver.so (auditwheel); a C backend built against Triton
        # (or rayton's host) needs it under its own name. The link is the same file, so the
        # loader reuses the copy the server already has.
        (renamed,) = _libs_dir(server_root).glob("libtritonserver-*.so")
        (self.workspace / "lib").mkdir()
        (self.workspace / "lib" / "libtritonserver.so").symlink_to(renamed)
        self.log_path = self.workspace / "tritonserver.log"

    def _launch(self) -> None:
        self._prepare_workspace()
        assert self.log_path is not None
        self.http_port, self.grpc_port, self.metrics_port = free_ports(3)
        self._log_file = open(self.log_path, "ab")  # noqa: SIM115 - closed in stop()
        self._process = subprocess.Popen(
            self.command(),
            env=server_environment(library_dirs=[self.workspace / "lib"]),
            cwd=self.workspace,
            stdin=subprocess.DEVNULL,
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        atexit.register(self.stop)

    def _wait_live(self) -> None:
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if not self.running():
                code = self._process.returncode if self._process else None
                raise ReferenceTritonError(
                    f"tritonserver exited with code {code} during startup; log tail:\n"
                    f"{self.log_tail()}"
                )
            try:
                status, _ = self.request("GET", "/v2/health/live", timeout=2.0)
                if status == 200:
                    return
            except (OSError, urllib.error.URLError):
                pass
            time.sleep(0.25)
        raise ReferenceTritonError(
            f"tritonserver not live after {self.start_timeout:.0f}s; log tail:\n{self.log_tail()}"
        )


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _terminate_group(process: subprocess.Popen, timeout: float) -> None:
    """SIGTERM the process group led by ``process``; SIGKILL whatever is left after timeout."""
    pgid = process.pid  # start_new_session=True: the server leads its own group
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=timeout)
    while _group_alive(pgid) and time.monotonic() < deadline:
        time.sleep(0.1)
    if _group_alive(pgid):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=5)
    # Python-backend stubs die with their parent; give them a moment, then force them too.
    deadline = time.monotonic() + 5
    while _group_alive(pgid) and time.monotonic() < deadline:
        time.sleep(0.1)
    if _group_alive(pgid):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)


# ---------------------------------------------------------------------------------------------
# pytest integration

_SKIP_REASON: str | None = None
_PROBED = False


def reference_triton_skip_reason() -> str | None:
    """Why the reference server cannot run here, or None when it can (probed once)."""
    global _SKIP_REASON, _PROBED
    if _PROBED:
        return _SKIP_REASON
    _PROBED = True
    _SKIP_REASON = _probe()
    return _SKIP_REASON


def _probe() -> str | None:
    binary = find_tritonserver()
    if binary is None:
        return "reference tritonserver unavailable: nvidia-pytriton is not installed"
    if not sys.platform.startswith("linux"):
        return f"reference tritonserver needs Linux (this is {sys.platform})"
    server_root = binary.parent.parent
    if not _stub_path(server_root).is_file():
        return (
            "reference tritonserver has no Python backend stub for Python "
            f"{sys.version_info.major}.{sys.version_info.minor}"
        )
    try:
        result = subprocess.run(
            [str(binary), "--help"],
            env=server_environment(),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"reference tritonserver cannot run: {err}"
    output = result.stdout + result.stderr
    if "Usage: tritonserver" not in output:
        detail = output.strip().splitlines()[-1] if output.strip() else f"rc={result.returncode}"
        return (
            f"reference tritonserver cannot run on this platform (glibc >= 2.35 needed?): {detail}"
        )
    return None


def require_reference_triton() -> None:
    """Skip with a clear reason (fail in CI) unless the reference tritonserver can run here."""
    from tests.support.requirements import missing

    reason = reference_triton_skip_reason()
    if reason is not None:
        missing(reason)
