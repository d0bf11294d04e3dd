"""Batching rules derived from a model config: Triton's dynamic batcher and queue policies."""

from __future__ import annotations

from dataclasses import dataclass, field

from tritonclient.grpc import model_config_pb2 as mc

from repo_adapter.inference_types import InferRequest

_REJECT = mc.ModelQueuePolicy.REJECT


@dataclass(frozen=True)
class QueuePolicy:
    """One priority level's ``ModelQueuePolicy``."""

    default_timeout_us: int = 0
    allow_timeout_override: bool = False
    max_queue_size: int = 0
    delay_on_timeout: bool = False  # timeout_action DELAY instead of REJECT

    @classmethod
    def from_config(cls, policy: mc.ModelQueuePolicy) -> QueuePolicy:
        return cls(
            default_timeout_us=policy.default_timeout_microseconds,
            allow_timeout_override=policy.allow_timeout_override,
            max_queue_size=policy.max_queue_size,
            delay_on_timeout=policy.timeout_action != _REJECT,
        )

    def timeout_us(self, requested_us: int) -> int:
        """Effective timeout: a request may only lower a non-zero default, and only if allowed."""
        if (
            self.allow_timeout_override
            and requested_us > 0
            and self.default_timeout_us > 0
            and requested_us < self.default_timeout_us
        ):
            return requested_us
        return self.default_timeout_us


@dataclass(frozen=True)
class BatchPolicy:
    """How requests of one model are combined into executions.

    ``max_rows`` is the row budget of one execution (0 when the model has no batch
    dimension: one request per execution). ``dynamic`` is False for models without
    ``dynamic_batching``, which Triton executes one request at a time.
    """

    max_rows: int = 0
    dynamic: bool = False
    max_queue_delay_us: int = 0
    preferred_rows: tuple[int, ...] = ()
    priority_levels: int = 0
    default_priority_level: int = 0
    queue_policies: dict[int, QueuePolicy] = field(default_factory=dict)
    shape_sensitive_inputs: tuple[str, ...] = ()

    @classmethod
    def from_config(cls, config: mc.ModelConfig) -> BatchPolicy:
        sensitive = tuple(
            tensor.name
            for tensor in config.input
            if (-1 in tensor.dims and not tensor.allow_ragged_batch) or tensor.is_shape_tensor
        )
        if config.HasField("sequence_batching"):
            # The sequences' next requests batch together (sequences.py keeps one request
            # of a sequence per batch), with the strategy's delay and preferred sizes.
            sequence = config.sequence_batching
            strategy = sequence.oldest if sequence.HasField("oldest") else sequence.direct
            return cls(
                max_rows=config.max_batch_size,
                dynamic=True,
                max_queue_delay_us=strategy.max_queue_delay_microseconds,
                preferred_rows=tuple(sorted(set(sequence.oldest.preferred_batch_size))),
                shape_sensitive_inputs=sensitive,
            )
        if not config.HasField("dynamic_batching"):
            return cls(max_rows=config.max_batch_size, shape_sensitive_inputs=sensitive)
        batching = config.dynamic_batching
        default_policy = QueuePolicy.from_config(batching.default_queue_policy)
        levels = batching.priority_levels
        policies = {0: default_policy}
        for level in range(1, levels + 1):
            policies[level] = default_policy
        for level, policy in batching.priority_queue_policy.items():
            policies[level] = QueuePolicy.from_config(policy)
        return cls(
            max_rows=config.max_batch_size,
            dynamic=True,
            max_queue_delay_us=batching.max_queue_delay_microseconds,
            preferred_rows=tuple(sorted(set(batching.preferred_batch_size))),
            priority_levels=levels,
            default_priority_level=batching.default_priority_level,
            queue_policies=policies,
            shape_sensitive_inputs=sensitive,
        )

    @property
    def batches_rows(self) -> bool:
        """True when several requests' rows may share one execution."""
        return self.dynamic and self.max_rows > 0

    def priority_of(self, request: InferRequest) -> int:
        """The request's priority level (0 = the default level; out-of-range -> default)."""
        if self.priority_levels == 0:
            return 0
        priority = request.priority
        if priority == 0 or priority > self.priority_levels:
            return self.default_priority_level
        return priority

    def queue_policy(self, level: int) -> QueuePolicy:
        return self.queue_policies.get(level) or self.queue_policies.get(0) or QueuePolicy()

    def batch_key(self, request: InferRequest) -> tuple:
        """Requests may share an execution only if their keys are equal.

        Triton never mixes different shapes on inputs with variable, non-ragged dims, nor
        different sets of supplied (optional) inputs.
        """
        names = tuple(sorted(tensor.name for tensor in request.inputs))
        shapes = tuple(
            (tensor.name, tensor.data.shape[1:] if self.max_rows else tensor.data.shape)
            for tensor in request.inputs
            if tensor.name in self.shape_sensitive_inputs
        )
        return names, shapes
