"""Replica recycling, beyond Triton: a model's replicas are replaced after a maximum age or
request count, one at a time, new before old, so a slow leak in a model or its framework
(Triton server#6781, server#5841) never grows past one replica's lifetime.

A model opts in through its config's parameters:

* ``RECYCLE_AFTER_SECONDS``: replace the replicas once they have served this long;
* ``RECYCLE_AFTER_REQUESTS``: replace them once one of them has answered this many requests.

The replacement is Serve's rolling update with surge: the model's deployment gets a new code
version, Serve starts one new replica, routes to it once it runs, then stops an old one
gracefully (its requests finish), and so on. A recycled model therefore has an application of
its own (:mod:`cluster.placement`): the shared host's replicas serve other models too.
"""

from __future__ import annotations

from dataclasses import dataclass

from tritonclient.grpc import model_config_pb2 as mc

AGE_PARAMETER = "RECYCLE_AFTER_SECONDS"
REQUESTS_PARAMETER = "RECYCLE_AFTER_REQUESTS"
# Serve's max_surge_percent for a recycled model: ceil(1% of the replicas) is one replica, so
# a rollout starts one new replica at a time (Serve's own batch is one for < 10 replicas).
ONE_AT_A_TIME_SURGE_PERCENT = 1


@dataclass(frozen=True)
class ReplicaRecycling:
    """When a model's replicas are replaced: after ``max_age_s`` seconds, or once one of them
    answered ``max_requests`` requests (None: that limit is not set)."""

    max_age_s: float | None = None
    max_requests: int | None = None

    def due(self, age_s: float, most_requests: int) -> bool:
        """Whether replicas ``age_s`` old, the busiest of which answered ``most_requests``,
        are to be replaced now."""
        if self.max_age_s is not None and age_s >= self.max_age_s:
            return True
        return self.max_requests is not None and most_requests >= self.max_requests


def replica_recycling(config: mc.ModelConfig) -> ReplicaRecycling | None:
    """The recycling the model's parameters ask for (None: its replicas live as long as Serve
    keeps them).

    Raises :class:`ValueError` for a value that is not a positive number (an integer for the
    request count).
    """
    parameters = config.parameters
    age = parameters[AGE_PARAMETER].string_value.strip() if AGE_PARAMETER in parameters else ""
    requests = (
        parameters[REQUESTS_PARAMETER].string_value.strip()
        if REQUESTS_PARAMETER in parameters
        else ""
    )
    if not age and not requests:
        return None
    max_age_s = None
    if age:
        try:
            max_age_s = float(age)
        except ValueError:
            max_age_s = None
        if max_age_s is None or not 0 < max_age_s < float("inf"):
            raise ValueError(f"parameter '{AGE_PARAMETER}' must be a number > 0, not {age!r}")
    if requests and (not requests.isdigit() or int(requests) < 1):
        raise ValueError(
            f"parameter '{REQUESTS_PARAMETER}' must be an integer >= 1, not {requests!r}"
        )
    return ReplicaRecycling(max_age_s, int(requests) if requests else None)
