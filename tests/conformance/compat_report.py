"""Write the README's "Compatibility with Triton" section from the conformance suite itself.

The section is generated from the checked cases (:mod:`tests.conformance.cases`), the model
repository and the allow-list (:mod:`tests.conformance.allowlist`), so it cannot drift from
what the suite enforces::

    python -m tests.conformance.compat_report            # markdown to stdout
    python -m tests.conformance.compat_report -o FILE    # or to a file
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

from tests.conformance.allowlist import (
    ALLOWED,
    CACHE_ALLOWED,
    DECOUPLED_ALLOWED,
    EXPLICIT_ALLOWED,
    KNOWN_GAPS,
    NATIVE_ALLOWED,
    NATIVE_KNOWN_GAPS,
    SEQUENCE_ALLOWED,
    SHM_ALLOWED,
    Difference,
)
from tests.conformance.cache_cases import CACHE_REGISTRY
from tests.conformance.cases import CASES, MODELS, NOT_COMPARED
from tests.conformance.decoupled_cases import DECOUPLED_REGISTRY
from tests.conformance.explicit_cases import EXPLICIT_REGISTRY
from tests.conformance.native_cases import NATIVE_REGISTRY
from tests.conformance.sequence_cases import SEQUENCE_REGISTRY
from tests.conformance.shm_cases import SHM_REGISTRY

REPOSITORY = Path(__file__).parent / "model_repository"

# Case groups in the order the section lists them.
GROUP_TITLES = {
    "health": "Health and readiness",
    "paths": "Routes (trailing slashes, unknown actions)",
    "metadata": "Server and model metadata",
    "config": "Model configuration (`/config`, every key and value)",
    "repository": "Repository extension",
    "infer": "Inference (tritonclient.http, raw JSON, binary, compressed)",
    "errors": "Errors (status code and message)",
    "classification": "Classification extension",
    "statistics": "Statistics extension (exact counts after the whole sequence)",
    "trace": "Trace extension (`/v2/trace/setting`)",
    "logging": "Logging extension (`/v2/logging`)",
    "metrics": "Prometheus metrics (`/metrics`: families, types, labels, per-model counts)",
    "explicit": "Explicit model control (`--model-control-mode explicit --load-model '*'` on "
    "both, `tests/conformance/test_explicit_mode.py`)",
    "native": "Backends of one's own (the same `libtriton_scale.so`, a C test backend, "
    "`libtriton_imgprep.so`, the C++ example built with CMake, and a python-based backend "
    "`backends/scaling/model.py`, loaded by both, `tests/conformance/test_native_backends.py`)",
    "decoupled": "Decoupled models (a python model sending from its own thread after `execute` "
    "returned, the C test backend built decoupled, and an ensemble with the python model as "
    "a step; `ModelStreamInfer` over `tritonclient.grpc`, "
    "`tests/conformance/test_decoupled_models.py`)",
    "sequence": "Sequence batcher (a stateful python model with START, END, READY and CORRID "
    "control inputs, `oldest` and `direct` strategies, and a python model with implicit "
    "state, `tests/conformance/test_sequence_models.py`)",
    "cache": "Response cache (`--cache-config local,size=1048576` on both; a python model with "
    "`response_cache { enable: true }` and an ensemble with it over a member without it, "
    "`tests/conformance/test_response_cache.py`)",
    "shared_memory": "System shared memory (regions made with tritonclient's shared-memory "
    "utilities; register, status, inputs and outputs through regions, Triton's errors, "
    "unregister; CUDA shared memory's status, unregister and the registrations a machine "
    "without a GPU refuses; `--allow-client-shm` on rayton, "
    "`tests/conformance/test_shared_memory.py`)",
    "generate": "Generate extension (`/generate`, `/generate_stream` as server-sent events, on "
    "the decoupled models above and a plain python model, "
    "`tests/conformance/test_decoupled_models.py`)",
}


def model_lines(repository: Path = REPOSITORY) -> list[str]:
    """One line per model: its name and the first comment line of its config.pbtxt."""
    lines = []
    for config in sorted(repository.glob("*/config.pbtxt")):
        first = config.read_text().splitlines()[0]
        summary = first.lstrip("# ").strip() if first.startswith("#") else ""
        lines.append(f"- `{config.parent.name}`: {summary}")
    return lines


def _generic(description: str) -> str:
    """A per-model description with the model replaced by ``<model>``."""
    for model in MODELS:
        description = re.sub(rf"/v2/models/{model}(?=/|$|:| )", "/v2/models/<model>", description)
        description = description.replace(f"'{model}'", "'<model>'")
    return description


def case_lines() -> list[str]:
    """Checked cases, grouped, as a markdown list; per-model cases are listed once."""
    lines = []
    for group, title in GROUP_TITLES.items():
        every = (
            *CASES,
            *EXPLICIT_REGISTRY.cases,
            *NATIVE_REGISTRY.cases,
            *DECOUPLED_REGISTRY.cases,
            *SEQUENCE_REGISTRY.cases,
            *CACHE_REGISTRY.cases,
            *SHM_REGISTRY.cases,
        )
        cases = [case for case in every if case.group == group]
        counts = Counter(_generic(case.description) for case in cases)
        items = _unique(
            f"{_generic(c.description)} (each model)"
            if counts[_generic(c.description)] > 1
            else c.description
            for c in cases
        )
        if items:
            lines.append(f"- **{title}** ({len(cases)} cases): " + "; ".join(items) + ".")
    return lines


def _where(entry: Difference) -> str:
    case = "any case" if entry.case == "*" else f"`{entry.case}`"
    return f"{case} at `{entry.path}`"


def difference_lines(entries: Iterable[Difference], with_fix: bool = False) -> list[str]:
    """One line per distinct reason, with where it applies."""
    by_reason: dict[str, list[Difference]] = {}
    for entry in entries:
        by_reason.setdefault(entry.reason, []).append(entry)
    lines = []
    for reason, group in by_reason.items():
        where = "; ".join(_unique(_where(e) for e in group))
        fix = f" Fix belongs in `{group[0].fix_in}`." if with_fix and group[0].fix_in else ""
        lines.append(f"- {reason}{fix} ({where})")
    return lines


def _unique(items: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(items))


def render() -> str:
    """The whole markdown section."""
    parts = [
        "## Compatibility with Triton",
        "",
        "`tests/conformance` runs the same sequence of "
        f"{len(CASES)} requests against the real Triton (tritonserver 2.51, bundled with "
        "`nvidia-pytriton`) and against rayton, both serving one model repository unmodified, "
        "through `tritonclient.http` and raw HTTP, then the client cases again through "
        "`tritonclient.grpc`. It compares status codes, error messages, "
        "metadata, `/config` JSON, outputs (datatype, shape, values), statistics counts, "
        "the extension list and the Prometheus metrics. Only what legitimately varies "
        "between runs is normalised away: "
        "durations and timestamps (only whether time was recorded is compared), the Python "
        "traceback Triton appends to model errors, and the order of outputs and of inputs "
        "named in messages (Triton's is hash-map order). Every other difference fails the "
        "suite unless it is listed in `tests/conformance/allowlist.py` with its reason.",
        "",
        "The repository (`tests/conformance/model_repository`, Python-backend models):",
        "",
        *model_lines(),
        "",
        "### Identical",
        "",
        "Everything below answers exactly as Triton does, except the differences listed after it.",
        "",
        *case_lines(),
        "",
        "### Different by design",
        "",
        *difference_lines(
            ALLOWED
            + EXPLICIT_ALLOWED
            + NATIVE_ALLOWED
            + DECOUPLED_ALLOWED
            + SEQUENCE_ALLOWED
            + CACHE_ALLOWED
            + SHM_ALLOWED
        ),
        "",
    ]
    if KNOWN_GAPS or NATIVE_KNOWN_GAPS:
        parts += [
            "### Known gaps (to be fixed; reported as expected failures)",
            "",
            *difference_lines(KNOWN_GAPS + NATIVE_KNOWN_GAPS, with_fix=True),
            "",
        ]
    parts += [
        "### Not compared",
        "",
        *(f"- {what}: {why}." for what, why in NOT_COMPARED),
        "",
        "Regenerate this section with `python -m tests.conformance.compat_report`.",
        "",
    ]
    return "\n".join(parts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-o", "--output", type=Path, help="write to this file (default stdout)")
    args = parser.parse_args(argv)
    text = render()
    if args.output is None:
        sys.stdout.write(text)
    else:
        args.output.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
