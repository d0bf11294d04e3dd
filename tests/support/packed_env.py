"""Packed Python environments for ``EXECUTION_ENV_PATH``: a real venv with a package the
server's environment does not have, archived as conda-pack archives are (``tar.gz`` whose
root holds ``bin/`` and ``lib/pythonX.Y/site-packages``)."""

from __future__ import annotations

import subprocess
import sys
import tarfile
from pathlib import Path

PACKAGE = "rayton_packed_only"  # importable only from the archive
PACKAGE_CODE = (
    'GREETING = "hello from the packed environment"\n\n\ndef triple(x):\n    return x * 3\n'
)


def packed_venv(directory: Path, python: str = "") -> Path:
    """``directory/env.tar.gz``: a venv of this interpreter holding :data:`PACKAGE`.

    ``python``: name the ``lib/<python>`` directory differently (an archive built for another
    Python), by renaming it after the venv is made.
    """
    venv = directory / "venv"
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120
    )
    (site,) = venv.glob("lib/python3.*/site-packages")
    (site / PACKAGE).mkdir()
    (site / PACKAGE / "__init__.py").write_text(PACKAGE_CODE)
    if python:
        site.parent.rename(site.parent.with_name(python))
    archive = directory / "env.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        for entry in sorted(venv.iterdir()):
            tar.add(entry, arcname=entry.name)
    return archive
