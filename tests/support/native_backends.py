"""The test backends written here in C (``tests/repo_adapter/backends/native_backends``),
built with the project's own build module, for the native backend tests."""

from __future__ import annotations

from pathlib import Path

from repo_adapter.backends.native.build import BuildError, build_backend, build_host
from tests.support.requirements import missing

SOURCES = Path(__file__).parents[1] / "repo_adapter" / "backends" / "native_backends"
# A model served by ``scale.c``: OUT = IN * 2, batched.
SCALE_CONFIG = """\
backend: "scale"
max_batch_size: 8
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] } ]
dynamic_batching { }
"""
# ``scale.c`` in each variant (its compile-time switches).
SCALE_VARIANTS: dict[str, tuple[str, ...]] = {
    "plain": (),
    "decoupled": ("DECOUPLED",),
    "refuses": ("FAIL_INITIALIZE",),
    "no_execute": ("NO_EXECUTE",),
    "crashes": ("CRASH",),
    "newer_api": ("NEWER_API",),
    "autocomplete": ("AUTOCOMPLETE",),
}


def build_scale_variants(root: Path) -> dict[str, Path]:
    """``libtriton_scale.so`` in each variant, each in a directory of its own under ``root``
    (the host built first; a machine without a compiler skips, CI fails)."""
    try:
        build_host()
        return {
            variant: build_backend([SOURCES / "scale.c"], "scale", root / variant, defines)
            for variant, defines in SCALE_VARIANTS.items()
        }
    except BuildError as err:
        missing(str(err))
        raise
