"""Traffic between a model's versions, beyond Triton: weights over its ready versions for
requests that name none, and a shadow version that gets a copy of a share of them.

Triton sends a request that names no version to the highest ready one. A model whose config
sets ``VERSION_WEIGHTS`` (``"1:90,2:10"``) spreads those requests over the versions in
proportion to their weights instead; ``SHADOW_VERSION`` and ``SHADOW_PERCENT``
send a copy of that share of them to another version, whose answers are discarded. A request
that names a version still gets that version, and ``version_policy`` still decides which
versions load. The repository API's ``traffic`` extension changes a loaded model's policy live
(:meth:`TrafficPolicy.from_json`).

:class:`VersionSplitter` picks the versions: a smooth weighted round robin (each version's
share exact over every ``sum(weights)`` requests, its turns spread evenly), and the shadow's
share by a running credit, so a replica's split never drifts with chance.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from tritonclient.grpc import model_config_pb2 as mc

from repo_adapter.errors import InferenceServerError

WEIGHTS_PARAMETER = "VERSION_WEIGHTS"
SHADOW_VERSION_PARAMETER = "SHADOW_VERSION"
SHADOW_PERCENT_PARAMETER = "SHADOW_PERCENT"


class TrafficPolicyError(InferenceServerError):
    """A traffic policy that cannot be applied (INVALID_ARG, the default code)."""


@dataclass(frozen=True)
class ShadowShare:
    """Copies of ``percent`` % of the requests that name no version go to ``version``."""

    version: int
    percent: float


@dataclass(frozen=True)
class TrafficPolicy:
    """How the requests that name no version are spread: ``weights`` by version (empty:
    Triton's highest ready version) and an optional ``shadow``."""

    weights: dict[int, float] = field(default_factory=dict)
    shadow: ShadowShare | None = None

    @property
    def is_default(self) -> bool:
        return not self.weights and self.shadow is None

    @classmethod
    def from_config(cls, config: mc.ModelConfig) -> TrafficPolicy:
        """The policy a model's ``parameters`` set (Triton's default without them).

        Raises:
            TrafficPolicyError: a value that does not parse, or a policy the model cannot use.
        """
        parameters = config.parameters

        def text(key: str) -> str:
            return parameters[key].string_value.strip() if key in parameters else ""

        weights: dict[int, float] = {}
        for item in filter(None, (part.strip() for part in text(WEIGHTS_PARAMETER).split(","))):
            version, sep, weight = item.partition(":")
            if not sep:
                raise TrafficPolicyError(
                    f"parameter '{WEIGHTS_PARAMETER}': '{item}' is not VERSION:WEIGHT"
                )
            weights[_version(version, WEIGHTS_PARAMETER)] = _number(weight, WEIGHTS_PARAMETER)
        shadow_version = text(SHADOW_VERSION_PARAMETER)
        shadow_percent = text(SHADOW_PERCENT_PARAMETER)
        shadow = None
        if shadow_version or shadow_percent:
            if not (shadow_version and shadow_percent):
                raise TrafficPolicyError(
                    f"parameters '{SHADOW_VERSION_PARAMETER}' and '{SHADOW_PERCENT_PARAMETER}' "
                    "go together"
                )
            shadow = ShadowShare(
                _version(shadow_version, SHADOW_VERSION_PARAMETER),
                _number(shadow_percent, SHADOW_PERCENT_PARAMETER),
            )
        policy = cls(weights, shadow)
        policy.check(config)
        return policy

    @classmethod
    def from_json(cls, document: Any) -> TrafficPolicy:
        """The policy of a ``traffic`` request body: ``{"weights": {"1": 90, "2": 10},
        "shadow": {"version": "3", "percent": 10}}`` (either key may be left out).

        Raises:
            TrafficPolicyError: a body of another shape.
        """
        if not isinstance(document, dict) or set(document) - {"weights", "shadow"}:
            raise TrafficPolicyError(
                "a traffic policy is a JSON object with 'weights' and/or 'shadow'"
            )
        raw_weights = document.get("weights") or {}
        if not isinstance(raw_weights, dict):
            raise TrafficPolicyError("'weights' must map versions to numbers")
        weights = {
            _version(str(version), "weights"): _number(weight, "weights")
            for version, weight in raw_weights.items()
        }
        raw_shadow = document.get("shadow")
        shadow = None
        if raw_shadow is not None:
            if not isinstance(raw_shadow, dict) or set(raw_shadow) != {"version", "percent"}:
                raise TrafficPolicyError('\'shadow\' must be {"version": V, "percent": P}')
            shadow = ShadowShare(
                _version(str(raw_shadow["version"]), "shadow.version"),
                _number(raw_shadow["percent"], "shadow.percent"),
            )
        policy = cls(weights, shadow)
        policy._check_values()
        return policy

    def to_json(self) -> dict[str, Any]:
        document: dict[str, Any] = {
            "weights": {str(version): weight for version, weight in sorted(self.weights.items())}
        }
        if self.shadow is not None:
            document["shadow"] = {
                "version": str(self.shadow.version),
                "percent": self.shadow.percent,
            }
        return document

    def check(self, config: mc.ModelConfig, ready: Collection[int] | None = None) -> None:
        """Whether the model ``config`` describes can follow this policy (and, given
        ``ready``, whether every version it names is ready).

        Raises:
            TrafficPolicyError: why it cannot.
        """
        self._check_values()
        if self.is_default:
            return
        name = config.name
        if config.platform == "ensemble":
            raise TrafficPolicyError(
                f"model '{name}': a version traffic policy is not supported for ensembles"
            )
        if config.HasField("sequence_batching"):
            raise TrafficPolicyError(
                f"model '{name}': a version traffic policy is not supported for sequence "
                "models (each sequence must stay on one version)"
            )
        if self.shadow is not None and config.model_transaction_policy.decoupled:
            raise TrafficPolicyError(
                f"model '{name}': a shadow version is not supported for decoupled models"
            )
        if ready is None:
            return
        named = set(self.weights) | ({self.shadow.version} if self.shadow else set())
        missing = sorted(named - set(ready))
        if missing:
            raise TrafficPolicyError(
                f"model '{name}': version {', '.join(map(str, missing))} is not ready "
                f"(ready: {', '.join(map(str, sorted(ready))) or 'none'})"
            )

    def _check_values(self) -> None:
        if any(weight < 0 for weight in self.weights.values()):
            raise TrafficPolicyError("version weights must be >= 0")
        if self.weights and not any(self.weights.values()):
            raise TrafficPolicyError("at least one version weight must be above 0")
        if self.shadow is not None and not 0 < self.shadow.percent <= 100:
            raise TrafficPolicyError("the shadow percent must be in (0, 100]")


def _version(text: str, where: str) -> int:
    text = text.strip()
    if not text.isdigit() or int(text) < 1:
        raise TrafficPolicyError(f"{where}: '{text}' is not a model version")
    return int(text)


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool):
        raise TrafficPolicyError(f"{where}: {value!r} is not a number")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise TrafficPolicyError(f"{where}: {value!r} is not a number") from None
    if number != number or number in (float("inf"), float("-inf")):
        raise TrafficPolicyError(f"{where}: {value!r} is not a number")
    return number


class VersionSplitter:
    """One process's picks under a policy, over the versions ready there."""

    def __init__(self, policy: TrafficPolicy, ready: Collection[int]) -> None:
        self.policy = policy
        self._weights = {v: w for v, w in sorted(policy.weights.items()) if v in ready and w > 0}
        self._total = sum(self._weights.values())
        self._current = dict.fromkeys(self._weights, 0.0)
        shadow = policy.shadow
        self._shadow = shadow if shadow is not None and shadow.version in ready else None
        self._shadow_credit = 0.0

    def pick(self) -> int | None:
        """The version for the next request that names none (None: Triton's default, the
        highest ready version, as no weighted version is ready here)."""
        if not self._weights:
            return None
        current = self._current
        for version, weight in self._weights.items():
            current[version] += weight
        chosen = max(current, key=current.__getitem__)
        current[chosen] -= self._total
        return chosen

    def shadow(self) -> int | None:
        """The version that gets a copy of the next request that names none (None: no copy)."""
        if self._shadow is None:
            return None
        self._shadow_credit += self._shadow.percent  # in percent: exact for whole numbers
        if self._shadow_credit < 100.0:
            return None
        self._shadow_credit -= 100.0
        return self._shadow.version


def policy_from_spec(data: Mapping[str, Any] | None, config: mc.ModelConfig) -> TrafficPolicy:
    """The policy a replica follows: the one the repository API set (``data``, its JSON), else
    the one the config's parameters set."""
    if data is not None:
        return TrafficPolicy.from_json(dict(data))
    return TrafficPolicy.from_config(config)
