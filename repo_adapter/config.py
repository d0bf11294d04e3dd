"""Model configuration: parse ``config.pbtxt`` (Triton's own schema), normalise, validate, render.

Parsing uses ``tritonclient.grpc.model_config_pb2`` and protobuf text format (never a
hand-written parser). Normalisation and the ``/config`` JSON follow Triton core's
``NormalizeModelConfig``, ``NormalizeInstanceGroup`` and ``ModelConfigToJson``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from google.protobuf import descriptor, json_format, text_format
from tritonclient.grpc import model_config_pb2 as mc

from repo_adapter.backends import backend_class
from repo_adapter.errors import ModelConfigError, NoDeviceError
from repo_adapter.version_traffic import TrafficPolicy, TrafficPolicyError

ModelConfig = mc.ModelConfig
CONFIG_FILENAME = "config.pbtxt"

ENSEMBLE_PLATFORM = "ensemble"


def parse_config_text(text: str, source: str) -> mc.ModelConfig:
    """Parse protobuf text format into a ``ModelConfig``; errors name ``source`` and the field."""
    try:
        return text_format.Parse(text, mc.ModelConfig())
    except text_format.ParseError as err:
        raise ModelConfigError(f"failed to parse {source}: {err}") from None


def load_config_file(path: Path) -> mc.ModelConfig:
    """Read and parse one ``config.pbtxt``."""
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as err:
        raise ModelConfigError(f"failed to read {path}: {err}") from None
    return parse_config_text(text, str(path))


def config_from_json(data: str | dict[str, Any], source: str = "JSON config") -> mc.ModelConfig:
    """Parse a ModelConfig from JSON (the repository API's ``parameters.config``)."""
    try:
        if isinstance(data, str):
            data = json.loads(data)
        return json_format.ParseDict(data, mc.ModelConfig())
    except (ValueError, json_format.ParseError) as err:
        raise ModelConfigError(f"failed to parse {source}: {err}") from None


def normalize_config(config: mc.ModelConfig, gpu_ids: Sequence[int] = ()) -> None:
    """Apply Triton's normalisation in place; ``gpu_ids`` are the GPUs instances may use."""
    if not config.HasField("version_policy"):
        config.version_policy.latest.num_versions = 1

    if config.HasField("dynamic_batching"):
        if not config.dynamic_batching.preferred_batch_size and config.max_batch_size > 0:
            config.dynamic_batching.preferred_batch_size.append(config.max_batch_size)

    if config.HasField("sequence_batching"):
        seq = config.sequence_batching
        if seq.max_sequence_idle_microseconds == 0:
            seq.max_sequence_idle_microseconds = 1_000_000
        if seq.HasField("oldest") and not seq.oldest.preferred_batch_size:
            if config.max_batch_size > 0:
                seq.oldest.preferred_batch_size.append(config.max_batch_size)

    if config.HasField("ensemble_scheduling"):
        return  # ensembles have no instances and no optimisation settings

    optimization = config.optimization
    if not optimization.HasField("input_pinned_memory"):
        optimization.input_pinned_memory.enable = True
    if not optimization.HasField("output_pinned_memory"):
        optimization.output_pinned_memory.enable = True

    _normalize_instance_groups(config, sorted(set(gpu_ids)))


def _normalize_instance_groups(config: mc.ModelConfig, gpu_ids: list[int]) -> None:
    group_cls = mc.ModelInstanceGroup
    if not config.instance_group:
        group = config.instance_group.add()
        group.name = config.name
    for index, group in enumerate(config.instance_group):
        if not group.name:
            group.name = f"{config.name}_{index}"
        if group.kind == group_cls.KIND_AUTO:
            usable = gpu_ids and all(gpu in gpu_ids for gpu in group.gpus)
            group.kind = group_cls.KIND_GPU if usable else group_cls.KIND_CPU
        if group.count < 1:
            group.count = 1
            if group.kind == group_cls.KIND_CPU:
                group.count = _default_cpu_instance_count(config.backend)
        if group.kind == group_cls.KIND_GPU and not group.gpus:
            group.gpus.extend(gpu_ids)


def _default_cpu_instance_count(backend: str) -> int:
    """What the backend declares (core's SetDefaultInstanceCount); 1 for a backend unknown
    here, whose own check reports it."""
    try:
        return backend_class(backend).default_cpu_instance_count
    except ModelConfigError:
        return 1


def validate_config(
    config: mc.ModelConfig, source: str, gpu_ids: Sequence[int] | None = None
) -> None:
    """Reject configurations Triton would refuse to load; messages name ``source`` and the field.

    Expects a normalised config. ``gpu_ids`` (the GPUs instances may use) enables the check
    that every GPU an instance group lists exists; a ``KIND_GPU`` group left without GPUs by
    normalisation (no GPU available) is always an error, as in Triton.
    """
    name = config.name

    def fail(field: str, problem: str) -> None:
        raise ModelConfigError(f"model '{name}' ({source}): '{field}' {problem}")

    if config.max_batch_size < 0:
        fail("max_batch_size", "must be >= 0")
    is_ensemble = config.platform == ENSEMBLE_PLATFORM
    if is_ensemble and config.backend:
        fail("backend", "must be empty for an ensemble")
    if is_ensemble and not config.HasField("ensemble_scheduling"):
        fail("ensemble_scheduling", "must be set for platform 'ensemble'")
    if not is_ensemble and config.HasField("ensemble_scheduling"):
        fail("ensemble_scheduling", "is only allowed for platform 'ensemble'")
    if is_ensemble and config.instance_group:
        fail("instance_group", "is not allowed for an ensemble")

    for kind, tensors in (("input", config.input), ("output", config.output)):
        seen: set[str] = set()
        for tensor in tensors:
            field = f"{kind} '{tensor.name}'"
            if not tensor.name:
                fail(kind, "has an entry without a name")
            if tensor.name in seen:
                fail(field, "is declared more than once")
            seen.add(tensor.name)
            if tensor.data_type == mc.TYPE_INVALID:
                fail(f"{field}.data_type", "must be specified")
            if not tensor.dims:
                fail(f"{field}.dims", "must have at least one dimension")
            for dim in tensor.dims:
                if dim < 1 and dim != -1:
                    fail(f"{field}.dims", f"has invalid dimension {dim} (must be >= 1 or -1)")
            if tensor.HasField("reshape"):
                _validate_reshape(tensor, config.max_batch_size, f"{field}.reshape", fail)
            if kind == "input" and tensor.format in (
                mc.ModelInput.FORMAT_NHWC,
                mc.ModelInput.FORMAT_NCHW,
            ):
                if len(tensor.dims) != 3:
                    fail(f"{field}.format", "NHWC/NCHW require 3 dims")

    if config.HasField("dynamic_batching"):
        batching = config.dynamic_batching
        for size in batching.preferred_batch_size:
            if size < 1 or size > config.max_batch_size:
                fail(
                    "dynamic_batching.preferred_batch_size",
                    f"value {size} must be in [1, max_batch_size={config.max_batch_size}]",
                )
        if batching.priority_levels > 0:
            if not 1 <= batching.default_priority_level <= batching.priority_levels:
                fail(
                    "dynamic_batching.default_priority_level",
                    f"must be in [1, priority_levels={batching.priority_levels}]",
                )
            for level in batching.priority_queue_policy:
                if not 1 <= level <= batching.priority_levels:
                    fail("dynamic_batching.priority_queue_policy", f"has invalid level {level}")
        if batching.preserve_ordering and batching.priority_levels > 1:
            fail("dynamic_batching.preserve_ordering", "cannot be used with priority levels")
        if batching.preserve_ordering:
            policies = [batching.default_queue_policy, *batching.priority_queue_policy.values()]
            for policy in policies:
                if (
                    policy.timeout_action == mc.ModelQueuePolicy.DELAY
                    and policy.default_timeout_microseconds != 0
                ):
                    fail(
                        "dynamic_batching.preserve_ordering",
                        "cannot be used with a DELAY queue policy that has a timeout",
                    )

    if config.HasField("sequence_batching"):
        sequence = config.sequence_batching
        if config.response_cache.enable:
            fail("response_cache", "is not supported with the sequence batcher")
        for control_input in sequence.control_input:
            for control in control_input.control:
                if (
                    control.kind == mc.ModelSequenceBatching.Control.CONTROL_SEQUENCE_CORRID
                    and control.data_type not in _CORRID_TYPES
                ):
                    fail(
                        f"sequence_batching.control_input '{control_input.name}'",
                        "CONTROL_SEQUENCE_CORRID data_type must be TYPE_UINT64, TYPE_INT64, "
                        "TYPE_UINT32, TYPE_INT32 or TYPE_STRING",
                    )
        for size in sequence.oldest.preferred_batch_size:
            if size < 1 or size > config.max_batch_size:
                fail(
                    "sequence_batching.oldest.preferred_batch_size",
                    f"value {size} must be in [1, max_batch_size={config.max_batch_size}]",
                )
    if config.model_transaction_policy.decoupled and config.response_cache.enable:
        fail("response_cache", "is not supported for decoupled models")

    group_cls = mc.ModelInstanceGroup
    for group in config.instance_group:
        field = f"instance_group '{group.name}'"
        if group.kind in (group_cls.KIND_CPU, group_cls.KIND_MODEL) and group.gpus:
            kind = group_cls.Kind.Name(group.kind)
            fail(field, f"has kind {kind} but specifies one or more GPUs")
        if group.kind == group_cls.KIND_GPU:
            if not group.gpus:
                raise NoDeviceError(
                    f"model '{name}' ({source}): '{field}' has kind KIND_GPU but no GPUs are "
                    f"available: needs {max(group.count, 1)} GPU instance(s), the cluster has "
                    "0 GPUs"
                )
            if gpu_ids is not None:
                for gpu in group.gpus:
                    if gpu not in gpu_ids:
                        fail(field, f"specifies unavailable GPU {gpu}")

    policy = config.version_policy
    if policy.HasField("latest") and policy.latest.num_versions < 1:
        fail("version_policy.latest.num_versions", "must be >= 1")
    try:
        TrafficPolicy.from_config(config)
    except TrafficPolicyError as err:
        raise ModelConfigError(f"model '{name}' ({source}): {err.message}") from None


_CORRID_TYPES = (mc.TYPE_UINT64, mc.TYPE_INT64, mc.TYPE_UINT32, mc.TYPE_INT32, mc.TYPE_STRING)


def _validate_reshape(tensor, max_batch_size: int, field: str, fail) -> None:
    """Triton's ``ValidateIOShape`` reshape rules."""
    shape = list(tensor.reshape.shape)
    if not shape and max_batch_size == 0:
        fail(field, "cannot be empty for a non-batching model (scalar tensors)")
    for dim in shape:
        if dim < 1 and dim != -1:
            fail(field, f"has invalid dimension {dim} (must be >= 1 or -1)")
    # Same element count between each pair of -1 dims (an empty shape counts as 1 element).
    if _wildcard_chunks(tensor.dims) != _wildcard_chunks(shape):
        fail(field, "must have the same element count as dims")


def _wildcard_chunks(dims: Sequence[int]) -> list[int]:
    """Element counts of the runs between -1 dims (one run when there is no -1)."""
    chunks, current = [], 1
    for dim in dims:
        if dim == -1:
            chunks.append(current)
            current = 1
        else:
            current *= dim
    chunks.append(current)
    return chunks


# ---------------------------------------------------------------------------------------------
# /config JSON rendering


# The ModelConfig as JSON (``/config``): protobuf's JSON form, its keys the schema's.
ConfigDocument = dict[str, Any]


def config_to_json_dict(config: mc.ModelConfig) -> ConfigDocument:
    """The model configuration as Triton's ``/config`` endpoint renders it.

    Every field printed at its default, enums as names, original field names, and int64
    fields as JSON numbers (protobuf's JSON mapping writes them as strings).
    """
    rendered = json_format.MessageToDict(
        config,
        preserving_proto_field_name=True,
        always_print_fields_with_no_presence=True,
    )
    return _as_triton_json(config.DESCRIPTOR, rendered, path=())


def config_to_json_text(config: mc.ModelConfig) -> str:
    return json.dumps(config_to_json_dict(config), separators=(",", ":"))


_INT64_TYPES = (
    descriptor.FieldDescriptor.TYPE_INT64,
    descriptor.FieldDescriptor.TYPE_UINT64,
    descriptor.FieldDescriptor.TYPE_SINT64,
    descriptor.FieldDescriptor.TYPE_FIXED64,
    descriptor.FieldDescriptor.TYPE_SFIXED64,
)
# Triton leaves these int64 values as protobuf's JSON strings (it only fixes a listed set).
_KEEP_INT64_STRINGS = (
    ("optimization", "cuda", "graph_spec"),
    ("sequence_batching", "state", "initial_state"),
)


def _as_triton_json(desc: descriptor.Descriptor, value: dict[str, Any], path: tuple) -> dict:
    """Fields in proto declaration order (as Triton prints them), int64 values as numbers."""
    keep_strings = any(path[: len(prefix)] == prefix for prefix in _KEEP_INT64_STRINGS)
    ordered: dict[str, Any] = {}
    for field in desc.fields:
        if field.name not in value:
            continue
        item = value[field.name]
        sub_path = (*path, field.name)
        if field.message_type is not None:
            sub = field.message_type
            if sub.GetOptions().map_entry:
                value_field = sub.fields_by_name["value"]
                if value_field.message_type is not None:
                    item = {
                        k: _as_triton_json(value_field.message_type, v, sub_path)
                        for k, v in item.items()
                    }
                elif value_field.type in _INT64_TYPES and not keep_strings:
                    item = {k: int(v) for k, v in item.items()}
            elif _is_repeated(field):
                item = [_as_triton_json(sub, element, sub_path) for element in item]
            else:
                item = _as_triton_json(sub, item, sub_path)
        elif field.type in _INT64_TYPES and not keep_strings:
            item = [int(v) for v in item] if isinstance(item, list) else int(item)
        ordered[field.name] = item
    return ordered


def _is_repeated(field: descriptor.FieldDescriptor) -> bool:
    # ``label`` is deprecated in protobuf >= 6; ``is_repeated`` is not on older releases.
    is_repeated = getattr(field, "is_repeated", None)
    if is_repeated is not None:
        return is_repeated() if callable(is_repeated) else bool(is_repeated)
    return field.label == descriptor.FieldDescriptor.LABEL_REPEATED
