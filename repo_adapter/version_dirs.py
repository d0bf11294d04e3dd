"""A model directory's version directories: the one thing the backends and the repository
scan both read, kept below both."""

from __future__ import annotations

import logging
from pathlib import Path

logger = logging.getLogger(__name__)


def available_versions(model_dir: Path) -> list[int]:
    """Numeric version directories; names that are not numbers or start with '0' are ignored."""
    versions = []
    for entry in model_dir.iterdir():
        if not entry.is_dir():
            continue
        if not entry.name.isdigit() or entry.name.startswith("0"):
            logger.warning("ignoring '%s': not a valid version directory", entry)
            continue
        versions.append(int(entry.name))
    return sorted(versions)
