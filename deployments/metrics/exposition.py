"""Prometheus text exposition (format 0.0.4) of metric families, as Triton's ``/metrics`` prints it.

Rendered here rather than with ``prometheus_client``'s registry: that library appends
``_total`` to every counter's samples, and Triton's counters (``nv_inference_count``, ...)
have no suffix. Parsers (Prometheus, ``prometheus_client.parser``) read both forms.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


@dataclass
class Sample:
    """One line: ``<family name><suffix>{labels} value`` (suffix ``_count``, ``_sum``, ...)."""

    labels: Mapping[str, str]
    value: float
    suffix: str = ""


@dataclass
class Family:
    """A metric family: name, type (``counter``, ``gauge``, ``summary``, ``histogram``), help."""

    name: str
    kind: str
    help: str
    samples: list[Sample] = field(default_factory=list)

    def add(self, labels: Mapping[str, str], value: float, suffix: str = "") -> None:
        self.samples.append(Sample(labels, value, suffix))


def render(families: Iterable[Family]) -> str:
    """The exposition text of ``families`` (families without samples are left out)."""
    lines: list[str] = []
    for family in families:
        if not family.samples:
            continue
        lines.append(f"# HELP {family.name} {_escape_help(family.help)}")
        lines.append(f"# TYPE {family.name} {family.kind}")
        for sample in family.samples:
            lines.append(
                f"{family.name}{sample.suffix}{_labels(sample.labels)} {format_value(sample.value)}"
            )
    return "\n".join(lines) + "\n" if lines else ""


def format_value(value: float) -> str:
    """Integers without a fraction (as Triton prints counters), NaN and infinities by name."""
    if isinstance(value, bool):
        return str(int(value))
    if isinstance(value, int):
        return str(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value.is_integer() and abs(value) < 2**53:
        return str(int(value))
    return repr(value)


def _labels(labels: Mapping[str, str]) -> str:
    if not labels:
        return ""
    inner = ",".join(f'{key}="{_escape_label(str(value))}"' for key, value in labels.items())
    return "{" + inner + "}"


def _escape_label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")
