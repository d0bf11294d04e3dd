"""Config conformance with tritonserver 2.51, plus unit tests for parsing, validation, rendering.

The conformance cases live in ``config_cases/<case>/``; ``expected_config.json`` (or
``expected_error.txt``) next to each was captured from the real server by
``python -m tests.tools.capture_reference_configs``. These tests never start a server: they
build the same repository, scan it with our pipeline on a machine without GPUs (as the
captures were made) and compare with the committed captures.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from repo_adapter.config import (
    config_from_json,
    config_to_json_dict,
    config_to_json_text,
    load_config_file,
    normalize_config,
    parse_config_text,
    validate_config,
)
from repo_adapter.errors import ModelConfigError, StatusCode
from repo_adapter.repository import RepositoryModel, scan_repository
from tests.repo_adapter.backend_stubs import python_backend_or_stub
from tests.tools.capture_reference_configs import (
    CASES_DIR,
    EXPECTED_CONFIG,
    EXPECTED_ERROR,
    build_case_repository,
    case_names,
)

CASES = case_names()
CONFIG_CASES = [c for c in CASES if (CASES_DIR / c / EXPECTED_CONFIG).is_file()]
ERROR_CASES = [c for c in CASES if (CASES_DIR / c / EXPECTED_ERROR).is_file()]

# Cases where rayton deliberately differs from tritonserver 2.51: case -> (reason, our error).
KNOWN_DEVIATIONS = {
    "duplicate_input_names": (
        "Triton 2.51 loads a config declaring the same input twice; rayton rejects it because "
        "inputs are looked up by name (the second declaration could never be used).",
        "declared more than once",
    ),
}


# Fields of the 2.73 schema (tritonclient's model_config_pb2) that tritonserver 2.51 does not
# know, so its captures lack them: (path to the message, field).
NEWER_THAN_REFERENCE = ((("ensemble_scheduling",), "max_inflight_requests"),)


def _without_newer_fields(rendered: dict, expected: dict) -> dict:
    """``rendered`` minus the fields the reference server's schema predates."""
    rendered = json.loads(json.dumps(rendered))
    for path, field in NEWER_THAN_REFERENCE:
        ours, theirs = rendered, expected
        for key in path:
            ours, theirs = ours.get(key, {}), theirs.get(key, {})
        if field not in theirs:
            ours.pop(field, None)
    return rendered


@pytest.fixture(scope="module")
def scanned(tmp_path_factory: pytest.TempPathFactory) -> dict[str, RepositoryModel]:
    """Every case scanned as one repository (ensembles need their members), CPU-only."""
    repository = build_case_repository(tmp_path_factory.mktemp("config_cases") / "models")
    with python_backend_or_stub():
        return scan_repository(repository, gpu_ids=())


def test_cases_were_captured() -> None:
    missing = [c for c in CASES if c not in CONFIG_CASES and c not in ERROR_CASES]
    assert not missing, f"run tests/tools/capture_reference_configs.py for {missing}"
    assert len(CONFIG_CASES) >= 15


@pytest.mark.parametrize("case", [c for c in CONFIG_CASES if c not in KNOWN_DEVIATIONS])
def test_config_json_matches_triton(case: str, scanned: dict[str, RepositoryModel]) -> None:
    model = scanned[case]
    assert model.available, f"Triton loads '{case}' but we report: {model.error}"
    expected = json.loads((CASES_DIR / case / EXPECTED_CONFIG).read_text())
    assert _without_newer_fields(config_to_json_dict(model.config), expected) == expected


@pytest.mark.parametrize("case", ERROR_CASES)
def test_config_rejected_like_triton(case: str, scanned: dict[str, RepositoryModel]) -> None:
    model = scanned[case]
    triton_error = (CASES_DIR / case / EXPECTED_ERROR).read_text().strip()
    assert not model.available, f"Triton refuses '{case}' ({triton_error}) but we load it"
    assert model.error.strip()


@pytest.mark.parametrize("case", sorted(KNOWN_DEVIATIONS))
def test_known_deviations(case: str, scanned: dict[str, RepositoryModel]) -> None:
    _reason, our_error = KNOWN_DEVIATIONS[case]
    assert (CASES_DIR / case / EXPECTED_CONFIG).is_file(), "Triton loads this case"
    assert our_error in scanned[case].error


def test_json_keys_in_proto_declaration_order(scanned: dict[str, RepositoryModel]) -> None:
    # Key order is not part of JSON equality, but clients diffing raw text appreciate it.
    rendered = config_to_json_dict(scanned["basic_no_policy"].config)
    declared = [f.name for f in mc.ModelConfig.DESCRIPTOR.fields if f.name in rendered]
    assert list(rendered) == declared


# ---------------------------------------------------------------------------------------------
# Parsing


def test_parse_error_names_file_and_field(tmp_path: Path) -> None:
    path = tmp_path / "config.pbtxt"
    path.write_text('backend: "python"\nmax_batch_sise: 4\n')
    with pytest.raises(ModelConfigError) as info:
        load_config_file(path)
    assert str(path) in info.value.message
    assert "max_batch_sise" in info.value.message
    assert "2:" in info.value.message  # the line of the bad field
    assert info.value.code is StatusCode.INVALID_ARG


def test_parse_error_wrong_value_type() -> None:
    with pytest.raises(ModelConfigError) as info:
        parse_config_text('max_batch_size: "eight"', "models/m/config.pbtxt")
    assert "models/m/config.pbtxt" in info.value.message
    assert "max_batch_size" in info.value.message


def test_parse_error_unknown_enum_value() -> None:
    with pytest.raises(ModelConfigError) as info:
        parse_config_text('input [ { name: "X" data_type: TYPE_FLOAT32 dims: [ 1 ] } ]', "cfg")
    assert "TYPE_FLOAT32" in info.value.message


def test_unreadable_config_file(tmp_path: Path) -> None:
    path = tmp_path / "config.pbtxt"
    path.write_bytes(b"\xff\xfe not utf-8 \xff")
    with pytest.raises(ModelConfigError) as info:
        load_config_file(path)
    assert str(path) in info.value.message


def test_missing_config_file(tmp_path: Path) -> None:
    with pytest.raises(ModelConfigError) as info:
        load_config_file(tmp_path / "nope" / "config.pbtxt")
    assert "config.pbtxt" in info.value.message


def test_config_from_json_round_trip() -> None:
    config = parse_config_text(
        'name: "m" backend: "python" max_batch_size: 4 '
        'input [ { name: "IN" data_type: TYPE_FP32 dims: [ 5000000000 ] } ] '
        "dynamic_batching { priority_levels: 2 default_priority_level: 1 "
        "priority_queue_policy { key: 2 value { max_queue_size: 3 } } }",
        "cfg",
    )
    normalize_config(config)
    rendered = config_to_json_dict(config)
    assert config_from_json(json.dumps(rendered)) == config
    assert config_from_json(rendered) == config


def test_config_from_json_errors_name_the_source() -> None:
    with pytest.raises(ModelConfigError) as info:
        config_from_json('{"max_batch_size": "x"}', "load request for 'm'")
    assert "load request for 'm'" in info.value.message
    with pytest.raises(ModelConfigError):
        config_from_json("{not json", "load request")


# ---------------------------------------------------------------------------------------------
# Normalisation


def _config(text: str, name: str = "m") -> mc.ModelConfig:
    config = parse_config_text(text, "test")
    config.name = name
    if not config.backend and config.platform != "ensemble":
        config.backend = "python"
    return config


def test_normalize_is_idempotent() -> None:
    config = _config(
        "max_batch_size: 4 dynamic_batching { } instance_group [ { kind: KIND_AUTO count: 0 } ]"
    )
    normalize_config(config)
    once = mc.ModelConfig()
    once.CopyFrom(config)
    normalize_config(config)
    assert config == once


def test_kind_auto_prefers_gpu_when_available() -> None:
    config = _config("instance_group [ { kind: KIND_AUTO }, { kind: KIND_AUTO gpus: [ 3 ] } ]")
    normalize_config(config, gpu_ids=[0, 1])
    first, second = config.instance_group
    assert first.kind == mc.ModelInstanceGroup.KIND_GPU
    assert list(first.gpus) == [0, 1]  # empty gpus = every GPU
    assert second.kind == mc.ModelInstanceGroup.KIND_CPU  # GPU 3 does not exist
    assert [g.name for g in config.instance_group] == ["m_0", "m_1"]


def test_default_instance_group_with_gpus() -> None:
    config = _config("max_batch_size: 1")
    normalize_config(config, gpu_ids=[1, 0])
    (group,) = config.instance_group
    assert (group.name, group.kind, group.count, list(group.gpus)) == (
        "m",
        mc.ModelInstanceGroup.KIND_GPU,
        1,
        [0, 1],
    )


@pytest.mark.parametrize(
    ("backend", "kind", "count"),
    [("onnxruntime", "KIND_CPU", 2), ("python", "KIND_CPU", 1), ("onnxruntime", "KIND_GPU", 1)],
)
def test_default_instance_count(backend: str, kind: str, count: int) -> None:
    config = _config(f'backend: "{backend}" instance_group [ {{ kind: {kind} count: 0 }} ]')
    normalize_config(config, gpu_ids=[0])
    assert config.instance_group[0].count == count


def test_ensemble_gets_no_instances_or_optimization() -> None:
    config = _config('platform: "ensemble" max_batch_size: 2 ensemble_scheduling { }')
    normalize_config(config)
    assert not config.instance_group
    assert not config.HasField("optimization")
    assert config.version_policy.latest.num_versions == 1


def test_sequence_oldest_preferred_size_filled() -> None:
    config = _config("max_batch_size: 6 sequence_batching { oldest { } }")
    normalize_config(config)
    assert list(config.sequence_batching.oldest.preferred_batch_size) == [6]
    assert config.sequence_batching.max_sequence_idle_microseconds == 1_000_000


# ---------------------------------------------------------------------------------------------
# Validation: every error names the source and the offending field


def _validation_error(text: str, gpu_ids: tuple[int, ...] = ()) -> str:
    config = _config(text)
    normalize_config(config, gpu_ids)
    with pytest.raises(ModelConfigError) as info:
        validate_config(config, "repo/m/config.pbtxt", gpu_ids)
    assert "repo/m/config.pbtxt" in info.value.message
    return info.value.message


IO = 'input [ { name: "IN" data_type: TYPE_FP32 dims: [ 4 ] } ]'


@pytest.mark.parametrize(
    ("text", "field"),
    [
        (f"max_batch_size: -1 {IO}", "max_batch_size"),
        (
            f"max_batch_size: 4 {IO} dynamic_batching {{ preferred_batch_size: [ 8 ] }}",
            "dynamic_batching.preferred_batch_size",
        ),
        (
            f"max_batch_size: 0 {IO} dynamic_batching {{ preferred_batch_size: [ 1 ] }}",
            "dynamic_batching.preferred_batch_size",
        ),
        (
            f"max_batch_size: 4 {IO} dynamic_batching {{ preferred_batch_size: [ 0 ] }}",
            "dynamic_batching.preferred_batch_size",
        ),
        (
            f"max_batch_size: 4 {IO} dynamic_batching {{ priority_levels: 2 }}",
            "dynamic_batching.default_priority_level",
        ),
        (
            f"max_batch_size: 4 {IO} dynamic_batching {{ priority_levels: 2 "
            "default_priority_level: 1 priority_queue_policy { key: 3 value { } } }",
            "dynamic_batching.priority_queue_policy",
        ),
        (
            f"max_batch_size: 4 {IO} dynamic_batching {{ preserve_ordering: true "
            "priority_levels: 2 default_priority_level: 1 }",
            "dynamic_batching.preserve_ordering",
        ),
        ('input [ { name: "IN" dims: [ 4 ] } ]', "input 'IN'.data_type"),
        ('input [ { name: "IN" data_type: TYPE_FP32 } ]', "input 'IN'.dims"),
        ('input [ { name: "IN" data_type: TYPE_FP32 dims: [ -2 ] } ]', "input 'IN'.dims"),
        (
            'output [ { name: "O" data_type: TYPE_FP32 dims: [ 4 ] reshape { shape: [ 3 ] } } ]',
            "output 'O'.reshape",
        ),
        (
            f"{IO} version_policy {{ latest {{ num_versions: 0 }} }}",
            "version_policy.latest.num_versions",
        ),
        (f"{IO} instance_group [ {{ kind: KIND_CPU gpus: [ 0 ] }} ]", "instance_group 'm_0'"),
        (f"{IO} instance_group [ {{ kind: KIND_GPU }} ]", "instance_group 'm_0'"),
        (f"{IO} response_cache {{ enable: true }} sequence_batching {{ }}", "response_cache"),
    ],
)
def test_validation_errors_name_the_field(text: str, field: str) -> None:
    assert f"'{field}'" in _validation_error(text)


def test_kind_gpu_valid_when_gpus_exist() -> None:
    config = _config(f"{IO} instance_group [ {{ kind: KIND_GPU count: 2 gpus: [ 1 ] }} ]")
    normalize_config(config, gpu_ids=[0, 1])
    validate_config(config, "cfg", gpu_ids=[0, 1])
    assert "unavailable GPU 7" in _validation_error(
        f"{IO} instance_group [ {{ kind: KIND_GPU gpus: [ 7 ] }} ]", (0,)
    )


def test_ensemble_rules() -> None:
    assert "'backend'" in _validation_error(
        'platform: "ensemble" backend: "python" ensemble_scheduling { step [ ] }'
    )
    assert "'ensemble_scheduling'" in _validation_error('platform: "ensemble"')


# ---------------------------------------------------------------------------------------------
# /config JSON rendering


def test_int64_fields_render_as_json_numbers() -> None:
    config = _config(
        "max_batch_size: 4 "
        'input [ { name: "IN" data_type: TYPE_FP32 dims: [ -1, 5000000000 ] '
        "reshape { shape: [ -1, 5000000000 ] } } ] "
        "version_policy { specific { versions: [ 1, 9000000000 ] } } "
        "dynamic_batching { max_queue_delay_microseconds: 7000000000 priority_levels: 2 "
        "default_priority_level: 1 "
        "default_queue_policy { default_timeout_microseconds: 8000000000 } "
        "priority_queue_policy { key: 2 value { default_timeout_microseconds: 42 } } }"
    )
    normalize_config(config)
    rendered = config_to_json_dict(config)
    assert rendered["input"][0]["dims"] == [-1, 5_000_000_000]
    assert rendered["input"][0]["reshape"]["shape"] == [-1, 5_000_000_000]
    assert rendered["version_policy"]["specific"]["versions"] == [1, 9_000_000_000]
    batching = rendered["dynamic_batching"]
    assert batching["max_queue_delay_microseconds"] == 7_000_000_000
    assert batching["priority_levels"] == 2
    assert batching["default_queue_policy"]["default_timeout_microseconds"] == 8_000_000_000
    assert batching["priority_queue_policy"] == {
        "2": {
            "timeout_action": "REJECT",
            "default_timeout_microseconds": 42,
            "allow_timeout_override": False,
            "max_queue_size": 0,
        }
    }
    text = config_to_json_text(config)
    assert '"max_queue_delay_microseconds":7000000000' in text
    assert '"2":{' in text  # map keys stay JSON strings


def test_sequence_and_ensemble_int64_fields() -> None:
    config = _config(
        'platform: "ensemble" max_batch_size: 1 '
        "sequence_batching { max_sequence_idle_microseconds: 5000000000 "
        "oldest { max_queue_delay_microseconds: 6000000000 } "
        'state [ { input_name: "I" output_name: "O" data_type: TYPE_FP32 dims: [ 3 ] } ] }'
    )
    rendered = config_to_json_dict(config)
    sequence = rendered["sequence_batching"]
    assert sequence["max_sequence_idle_microseconds"] == 5_000_000_000
    assert sequence["oldest"]["max_queue_delay_microseconds"] == 6_000_000_000
    assert sequence["state"][0]["dims"] == [3]

    steps = _config(
        'platform: "ensemble" ensemble_scheduling { step [ { model_name: "a" model_version: -1 '
        'input_map { key: "x" value: "y" } output_map { key: "o" value: "p" } } ] }'
    )
    assert config_to_json_dict(steps)["ensemble_scheduling"]["step"][0]["model_version"] == -1


def test_warmup_dims_render_as_numbers() -> None:
    config = _config(
        'model_warmup [ { name: "w" batch_size: 1 inputs { key: "IN" value: { '
        "data_type: TYPE_FP32 dims: [ 2, 2 ] random_data: true } } } ]"
    )
    rendered = config_to_json_dict(config)
    assert rendered["model_warmup"][0]["inputs"]["IN"]["dims"] == [2, 2]


def test_cuda_graph_spec_keeps_int64_strings() -> None:
    # Triton only converts a listed set of int64 fields; graph_spec dims stay strings.
    config = _config(
        "optimization { cuda { graph_spec [ { batch_size: 2 "
        'input { key: "IN" value: { dim: [ 4 ] } } } ] } }'
    )
    spec = config_to_json_dict(config)["optimization"]["cuda"]["graph_spec"][0]
    assert spec["input"]["IN"]["dim"] == ["4"]
    assert spec["batch_size"] == 2


def test_unset_messages_omitted_defaults_printed() -> None:
    config = _config(f"max_batch_size: 2 {IO}")
    normalize_config(config)
    rendered = config_to_json_dict(config)
    for absent in (
        "dynamic_batching",
        "sequence_batching",
        "ensemble_scheduling",
        "response_cache",
        "model_transaction_policy",
    ):
        assert absent not in rendered
    assert rendered["input"][0]["optional"] is False
    assert rendered["parameters"] == {} and rendered["batch_input"] == []
    assert rendered["runtime"] == ""


def test_text_format_and_json_agree_on_enum_names() -> None:
    config = _config('input [ { name: "IN" data_type: TYPE_STRING dims: [ 1 ] } ]')
    assert config_to_json_dict(config)["input"][0]["data_type"] == "TYPE_STRING"
    assert "TYPE_STRING" in text_format.MessageToString(config)


# ---------------------------------------------------------------------------------------------
# Live spot check against the reference server (skipped where it cannot run)


@pytest.mark.reference
def test_live_reference_matches_our_rendering(tmp_path: Path) -> None:
    """Start tritonserver 2.51 on two cases, compare ``/config`` live, check clean shutdown."""
    import os

    from tests.reference_triton import ReferenceTriton, require_reference_triton

    require_reference_triton()
    cases = ["dynamic_batching_priority", "sequence_oldest"]
    repository = build_case_repository(tmp_path / "models", cases)
    with python_backend_or_stub():
        ours = scan_repository(repository, gpu_ids=())
    server = ReferenceTriton(repository)
    with server:
        pgid = server.pid
        assert server.http_url.startswith("http://127.0.0.1:")
        for case in cases:
            assert config_to_json_dict(ours[case].config) == server.model_config(case)
        assert "Started HTTPService at 127.0.0.1" in server.log_text()
    with pytest.raises(ProcessLookupError):
        os.killpg(pgid, 0)  # server and python-backend stubs are all gone
    assert server.workspace is None
