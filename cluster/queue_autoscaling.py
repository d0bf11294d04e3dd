"""Autoscaling on Triton's own signals: how many requests wait in a model's queue, and how
long they wait there, instead of Serve's count of the requests each replica holds.

A model opts in through its config's parameters, beside ``AUTOSCALING_CONFIG`` (whose
bounds, delays and ``min_replicas: 0`` still apply):

* ``AUTOSCALING_TARGET_QUEUE_TIME_US``: replicas so that a request's mean time in the queue
  (Triton's ``queue`` statistic, the batcher's delay included) stays near this;
* ``AUTOSCALING_TARGET_PENDING_REQUESTS``: replicas so that each holds about this many
  requests not yet executing (Triton's ``nv_inference_pending_request_count``).

With both, the larger answer wins. Each replica reports both signals to Serve through
``record_autoscaling_stats`` (:mod:`deployments.apps.model_deployment`), and Serve's
controller runs :class:`QueueSignalPolicy` on them, wrapped by Serve in the config's bounds,
scaling factors and delays. A replica that holds requests is never scaled away for a short
queue, and a model at zero replicas starts one as soon as a request waits for it (Serve's
cold start).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tritonclient.grpc import model_config_pb2 as mc

QUEUE_TIME_PARAMETER = "AUTOSCALING_TARGET_QUEUE_TIME_US"
PENDING_PARAMETER = "AUTOSCALING_TARGET_PENDING_REQUESTS"
# The names of the signals in the replicas' reports to Serve.
PENDING_METRIC = "rayton_pending_requests"
QUEUE_TIME_METRIC = "rayton_queue_time_us"
POLICY_FUNCTION = "cluster.queue_autoscaling:QueueSignalPolicy"


@dataclass(frozen=True)
class QueueTargets:
    """What a model's replicas are sized for (None: that signal is not used)."""

    queue_time_us: float | None = None
    pending_requests: float | None = None

    def serve_policy(self) -> dict[str, Any]:
        """Serve's ``autoscaling_config.policy`` that scales on these targets."""
        return {
            "policy_function": POLICY_FUNCTION,
            "policy_kwargs": {
                "queue_time_us": self.queue_time_us,
                "pending_requests": self.pending_requests,
            },
        }


def queue_targets(config: mc.ModelConfig) -> QueueTargets | None:
    """The targets a model config's parameters set; None when it sets neither.

    Raises:
        ValueError: a target that is not a positive number.
    """
    values = {}
    for key in (QUEUE_TIME_PARAMETER, PENDING_PARAMETER):
        if key not in config.parameters:
            continue
        text = config.parameters[key].string_value
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not (math.isfinite(value) and value > 0):
            raise ValueError(f"parameter '{key}' must be a positive number, not '{text}'")
        values[key] = value
    if not values:
        return None
    return QueueTargets(values.get(QUEUE_TIME_PARAMETER), values.get(PENDING_PARAMETER))


def desired_replicas(
    targets: QueueTargets,
    replicas: int,
    pending: Mapping[Any, float],
    queue_time_us: Mapping[Any, float],
    held_requests: float,
) -> float:
    """How many replicas the signals ask for, before Serve's bounds and delays.

    ``pending`` and ``queue_time_us`` are each running replica's reports (averaged over
    Serve's look-back window); ``held_requests`` all the requests the replicas hold or
    Serve's handles queue for them. Each target asks for the replicas that would bring its
    signal to the target at today's load: total pending over the target per replica, or
    today's replicas scaled by the mean queue time over its target.
    """
    wanted = [0.0]
    if targets.pending_requests is not None and pending:
        wanted.append(sum(pending.values()) / targets.pending_requests)
    if targets.queue_time_us is not None and queue_time_us:
        mean = sum(queue_time_us.values()) / len(queue_time_us)
        wanted.append(replicas * mean / targets.queue_time_us)
    desired = max(wanted)
    if held_requests > 0:  # a short queue never scales away the replica that runs them
        desired = max(desired, 1.0)
    return desired


class QueueSignalPolicy:
    """Serve's custom autoscaling policy on a model's queue signals (see the module)."""

    def __init__(
        self, queue_time_us: float | None = None, pending_requests: float | None = None
    ) -> None:
        self.targets = QueueTargets(queue_time_us, pending_requests)

    def __call__(self, ctx: Any) -> tuple[float, dict[str, Any]]:
        """``ctx`` is Serve's ``AutoscalingContext``; the policy keeps no state of its own."""
        metrics = ctx.aggregated_metrics or {}
        desired = desired_replicas(
            self.targets,
            ctx.current_num_replicas,
            metrics.get(PENDING_METRIC, {}),
            metrics.get(QUEUE_TIME_METRIC, {}),
            ctx.total_num_requests,
        )
        return desired, {}
