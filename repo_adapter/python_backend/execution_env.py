"""A python model's own packages: Triton's ``EXECUTION_ENV_PATH`` parameter.

``parameters { key: "EXECUTION_ENV_PATH" value: { string_value:
"$$TRITON_MODEL_DIRECTORY/env.tar.gz" } }`` names a packed environment (``conda-pack``, or a
tar of a venv: anything with ``lib/pythonX.Y/site-packages``). It is unpacked once per node
into a cache keyed by the archive's content, and its ``site-packages`` goes first on the
model's import path.

Design: Triton runs such a model in a stub process of the archive's own interpreter and copies
every tensor through shared memory. rayton runs it in its replica (a Ray worker, which needs
Ray itself, so the archive's interpreter cannot be the replica's) with the archive's
packages in front: no extra process and no copy per request, the cost of an ordinary python
model. It takes an archive built for the replica's Python (``X.Y`` equal), since compiled
packages are built for one; a mismatch makes the model UNAVAILABLE with both versions named.
Because packages are process-wide, such a model always gets a replica of its own (never the
shared host).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import sys
import tarfile
import tempfile
from pathlib import Path

from tritonclient.grpc import model_config_pb2 as mc

from repo_adapter.errors import InferenceServerError, StatusCode

PARAMETER = "EXECUTION_ENV_PATH"
MODEL_DIRECTORY_VARIABLE = "$$TRITON_MODEL_DIRECTORY"
CACHE_ENV = "RAYTON_EXECUTION_ENV_CACHE"
_CHUNK = 1 << 20


def execution_env_path(config: mc.ModelConfig, model_dir: Path) -> Path | None:
    """The archive ``EXECUTION_ENV_PATH`` names (``$$TRITON_MODEL_DIRECTORY`` expanded), or
    None when the model has none."""
    if PARAMETER not in config.parameters:
        return None
    value = config.parameters[PARAMETER].string_value.strip()
    if not value:
        return None
    path = Path(value.replace(MODEL_DIRECTORY_VARIABLE, str(model_dir)))
    return path if path.is_absolute() else model_dir / path


def cache_root() -> Path:
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "rayton" / "execution-envs")


def prepare(archive: Path, model: str) -> Path:
    """The ``site-packages`` of ``archive``, unpacked under :func:`cache_root` on first use.

    Raises :class:`InferenceServerError` (UNAVAILABLE) with the reason when the archive is
    missing, unreadable, unsafe (members outside it) or built for another Python.
    """
    fail = _failure(model, archive)
    if not archive.is_file():
        raise fail("the file does not exist")
    digest = _digest(archive)
    target = cache_root() / digest
    if not target.is_dir():
        _unpack(archive, target, fail)
    return _site_packages(target, fail)


def _failure(model: str, archive: Path):
    def fail(reason: str) -> InferenceServerError:
        return InferenceServerError(
            f"failed to set up the execution environment of Python model '{model}' from "
            f"'{archive}': {reason}",
            StatusCode.UNAVAILABLE,
        )

    return fail


def _digest(archive: Path) -> str:
    sha = hashlib.sha256()
    with archive.open("rb") as handle:
        while chunk := handle.read(_CHUNK):
            sha.update(chunk)
    return sha.hexdigest()[:24]


def _unpack(archive: Path, target: Path, fail) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".unpacking-", dir=target.parent))
    try:
        try:
            with tarfile.open(archive) as tar:
                tar.extractall(staging, filter=_site_packages_only)
        except (tarfile.TarError, OSError, EOFError) as err:
            raise fail(f"it is not a readable tar archive ({type(err).__name__}: {err})") from None
        # Another replica on this node may have finished first: keep the first one.
        with contextlib.suppress(OSError):
            staging.rename(target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    if not target.is_dir():
        raise fail("unpacking left no environment behind")


_SITE_MEMBER = re.compile(r"^(\./)?lib/python3\.\d+/site-packages(/|$)")


def _site_packages_only(member: tarfile.TarInfo, destination: str) -> tarfile.TarInfo | None:
    """Only the packages are unpacked (an archived venv's ``bin/python`` links to an absolute
    path, and the interpreter is not used); each member through tarfile's ``data`` filter,
    which refuses anything that would land outside the cache or link out of it."""
    if not _SITE_MEMBER.match(member.name):
        return None
    return tarfile.data_filter(member, destination)


def _site_packages(root: Path, fail) -> Path:
    found = sorted(root.glob("lib/python3.*/site-packages"))
    if not found:
        raise fail("it holds no lib/python3.*/site-packages (a conda-pack or venv archive)")
    wanted = f"python{sys.version_info.major}.{sys.version_info.minor}"
    for path in found:
        if path.parent.name == wanted:
            return path
    built = ", ".join(p.parent.name for p in found)
    raise fail(
        f"it was built for {built}, the replica runs {wanted}: pack the environment with "
        f"Python {sys.version_info.major}.{sys.version_info.minor}"
    )


def activate(site_packages: Path) -> None:
    """Put ``site_packages`` first on this process's import path (and its ``.pth`` files)."""
    import site

    path = str(site_packages)
    if path in sys.path:
        return
    before = list(sys.path)
    site.addsitedir(path)  # processes .pth files, appends
    added = [p for p in sys.path if p not in before]
    sys.path[:] = added + before
