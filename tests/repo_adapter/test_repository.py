"""Repository scanning: broken models stay isolated, version policies, labels, autofill.

Every test builds a small repository under ``tmp_path``; nothing is loaded into a runtime.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest
from tritonclient.grpc import model_config_pb2 as mc

from repo_adapter.config import config_to_json_dict
from repo_adapter.errors import ModelConfigError
from repo_adapter.repository import (
    scan_model,
    scan_repository,
    select_versions,
)
from repo_adapter.version_dirs import available_versions
from tests.repo_adapter.backend_stubs import python_backend_or_stub
from tests.support.requirements import missing

IO = """
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] } ]
"""
PYTHON_CONFIG = f'backend: "python"\nmax_batch_size: 4\n{IO}'
MODEL_PY = "class TritonPythonModel:\n    def execute(self, requests):\n        return []\n"


@pytest.fixture(autouse=True)
def _python_backend() -> Iterator[None]:
    with python_backend_or_stub():
        yield


def make_model(
    root: Path,
    name: str,
    config: str | None = PYTHON_CONFIG,
    versions: Iterable[str | int] = (1,),
    model_file: str | None = "model.py",
    content: str | bytes = MODEL_PY,
) -> Path:
    """``root/name`` with ``config.pbtxt`` (None: none) and version dirs holding ``model_file``."""
    model_dir = root / name
    model_dir.mkdir(parents=True)
    if config is not None:
        (model_dir / "config.pbtxt").write_text(config)
    for version in versions:
        version_dir = model_dir / str(version)
        version_dir.mkdir()
        if model_file:
            path = version_dir / model_file
            if isinstance(content, bytes):
                path.write_bytes(content)
            else:
                path.write_text(content)
    return model_dir


def require_module(name: str) -> None:
    """Skip (fail in CI) unless ``name`` imports: the examples' extra installs it."""
    try:
        importlib.import_module(name)
    except ModuleNotFoundError:
        missing(f"{name} is not installed (pip install -e '.[examples]')")


def require_backend_module(backend: str) -> None:
    """Skip unless ``repo_adapter.backends.<backend>`` exists (some are written concurrently)."""
    name = f"repo_adapter.backends.{backend}"
    try:
        importlib.import_module(name)
    except ModuleNotFoundError as err:
        if err.name != name:
            raise
        missing(f"{name} does not exist yet")


# ---------------------------------------------------------------------------------------------
# Broken models: one clear error each, the rest of the repository still loads


BROKEN = {
    # name: (how to build it, words the error must contain)
    "missing_version_dir": (
        {"versions": ()},
        ["at least one version", "missing_version_dir"],
    ),
    "unparsable": (
        {"config": 'backend: "python"\ninput [ { name: "IN" '},
        ["failed to parse", "unparsable/config.pbtxt"],
    ),
    "name_mismatch": (
        {"config": f'name: "other"\n{PYTHON_CONFIG}'},
        ['"other"', "name_mismatch"],
    ),
    "unknown_backend": (
        {"config": f'backend: "no_such_backend"\n{IO}'},
        ["unable to find backend library 'libtriton_no_such_backend.so'", "none of rayton's"],
    ),
    "missing_model_file": (
        {"model_file": None},
        ["unable to find", "model.py", "missing_model_file"],
    ),
    "policy_selects_nothing": (
        {"config": f"{PYTHON_CONFIG}\nversion_policy {{ specific {{ versions: [ 5 ] }} }}"},
        ["at least one version", "policy_selects_nothing"],
    ),
    "invalid_config": (
        {"config": f"{PYTHON_CONFIG}\ndynamic_batching {{ preferred_batch_size: [ 64 ] }}"},
        ["dynamic_batching.preferred_batch_size", "invalid_config/config.pbtxt"],
    ),
    "no_backend_no_files": (
        {"config": IO, "model_file": "weights.bin"},
        ["Could not determine backend", "no_backend_no_files"],
    ),
    "missing_label_file": (
        {
            "config": 'backend: "python"\n'
            'input [ { name: "IN" data_type: TYPE_FP32 dims: [ 1 ] } ]\n'
            'output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] label_filename: "x.txt" } ]'
        },
        ["label file", "x.txt", "OUT"],
    ),
}


@pytest.fixture
def broken_repository(tmp_path: Path) -> Path:
    make_model(tmp_path, "good_a")
    for name, (kwargs, _words) in BROKEN.items():
        make_model(tmp_path, name, **kwargs)
    make_model(tmp_path, "good_z")
    return tmp_path


def test_broken_models_never_stop_the_others(broken_repository: Path) -> None:
    models = scan_repository(broken_repository)
    assert sorted(models) == sorted(["good_a", "good_z", *BROKEN])
    assert models["good_a"].available and models["good_z"].available
    assert models["good_a"].versions == [1]
    unavailable = sorted(name for name, model in models.items() if not model.available)
    assert unavailable == sorted(BROKEN)


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_each_broken_model_has_one_clear_error(broken_repository: Path, name: str) -> None:
    model = scan_repository(broken_repository)[name]
    assert not model.available
    assert "\n" not in model.error.strip()
    for word in BROKEN[name][1]:
        assert word in model.error


def test_errors_are_logged_per_model(
    broken_repository: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.ERROR, logger="repo_adapter.repository"):
        scan_repository(broken_repository)
    failed = {
        name for name in BROKEN for record in caplog.records if f"'{name}'" in record.getMessage()
    }
    assert failed == set(BROKEN)


def test_scan_single_model_and_subset(broken_repository: Path) -> None:
    model = scan_model(broken_repository / "good_a")
    assert model.available and model.name == "good_a"
    models = scan_repository(broken_repository, names=["good_z", "unparsable"])
    assert sorted(models) == ["good_z", "unparsable"]


def test_repository_must_be_a_directory(tmp_path: Path) -> None:
    with pytest.raises(ModelConfigError, match="not a directory"):
        scan_repository(tmp_path / "missing")


def test_hidden_dirs_and_files_in_repository_ignored(tmp_path: Path) -> None:
    make_model(tmp_path, "m")
    (tmp_path / ".git").mkdir()
    (tmp_path / "README.md").write_text("not a model")
    assert list(scan_repository(tmp_path)) == ["m"]


# ---------------------------------------------------------------------------------------------
# Version directories and policies


def test_non_numeric_and_zero_prefixed_dirs_ignored(tmp_path: Path) -> None:
    model_dir = make_model(tmp_path, "m", versions=(1, 3, "01", "0", "abc", "2x", "-4"))
    (model_dir / "7").write_text("a file, not a directory")
    assert available_versions(model_dir) == [1, 3]
    assert scan_model(model_dir).versions == [3]


def test_versions_sort_numerically(tmp_path: Path) -> None:
    model_dir = make_model(tmp_path, "m", versions=(2, 10, 9))
    assert available_versions(model_dir) == [2, 9, 10]
    assert scan_model(model_dir).versions == [10]


def _policy(text: str) -> mc.ModelConfig:
    config = mc.ModelConfig(name="m")
    if text:
        from google.protobuf import text_format

        text_format.Parse(text, config.version_policy)
    else:
        config.version_policy.latest.num_versions = 1
    return config


@pytest.mark.parametrize(
    ("policy", "on_disk", "selected"),
    [
        ("", [1, 2, 3], [3]),
        ("latest { num_versions: 2 }", [1, 2, 3], [2, 3]),
        ("latest { num_versions: 5 }", [1, 2, 3], [1, 2, 3]),
        ("all { }", [1, 4, 7], [1, 4, 7]),
        ("specific { versions: [ 1, 3 ] }", [1, 2, 3], [1, 3]),
        ("specific { versions: [ 3, 1, 3 ] }", [1, 2, 3], [1, 3]),
        ("specific { versions: [ 2, 9 ] }", [1, 2, 3], [2]),
    ],
)
def test_version_policy_selection(policy: str, on_disk: list[int], selected: list[int]) -> None:
    assert select_versions(_policy(policy), on_disk) == selected


@pytest.mark.parametrize(
    "policy", ["", "all { }", "specific { versions: [ 4 ] }", "latest { num_versions: 3 }"]
)
def test_version_policy_selecting_nothing(policy: str) -> None:
    with pytest.raises(ModelConfigError, match="at least one version"):
        select_versions(_policy(policy), [])
    if policy.startswith("specific"):
        with pytest.raises(ModelConfigError, match="at least one version"):
            select_versions(_policy(policy), [1, 2])


def test_specific_policy_logs_missing_versions(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = f"{PYTHON_CONFIG}\nversion_policy {{ specific {{ versions: [ 1, 3, 8 ] }} }}"
    model_dir = make_model(tmp_path, "m", config=config, versions=(1, 2, 3))
    with caplog.at_level(logging.ERROR, logger="repo_adapter.repository"):
        model = scan_model(model_dir)
    assert model.available and model.versions == [1, 3]
    assert any("version 8" in record.getMessage() for record in caplog.records)


def test_all_policy_scans_every_version(tmp_path: Path) -> None:
    config = f"{PYTHON_CONFIG}\nversion_policy {{ all {{ }} }}"
    model_dir = make_model(tmp_path, "m", config=config, versions=(1, 2, 5))
    model = scan_model(model_dir)
    assert model.versions == [1, 2, 5]
    assert [model.model_version(v).model_path for v in model.versions] == [
        model_dir / str(v) / "model.py" for v in (1, 2, 5)
    ]


def test_model_file_missing_in_one_served_version(tmp_path: Path) -> None:
    config = f"{PYTHON_CONFIG}\nversion_policy {{ all {{ }} }}"
    model_dir = make_model(tmp_path, "m", config=config, versions=(1, 2))
    (model_dir / "2" / "model.py").unlink()
    model = scan_model(model_dir)
    assert not model.available
    assert "version 2" in model.error


def test_unserved_version_without_model_file_is_fine(tmp_path: Path) -> None:
    model_dir = make_model(tmp_path, "m", versions=(1, 2))
    (model_dir / "1" / "model.py").unlink()
    assert scan_model(model_dir).versions == [2]


# ---------------------------------------------------------------------------------------------
# Labels, custom file names, names


def test_label_files_read(tmp_path: Path) -> None:
    config = (
        'backend: "python"\nmax_batch_size: 2\n'
        'input [ { name: "IN" data_type: TYPE_FP32 dims: [ 3 ] } ]\n'
        'output [ { name: "PROBS" data_type: TYPE_FP32 dims: [ 3 ] label_filename: "labels.txt" },'
        ' { name: "RAW" data_type: TYPE_FP32 dims: [ 3 ] } ]'
    )
    model_dir = make_model(tmp_path, "m", config=config)
    (model_dir / "labels.txt").write_text("cat\ndog\nbird\n")
    model = scan_model(model_dir)
    assert model.available, model.error
    assert model.labels == {"PROBS": ["cat", "dog", "bird"]}


def test_custom_default_model_filename(tmp_path: Path) -> None:
    config = f'default_model_filename: "net.py"\n{PYTHON_CONFIG}'
    model = scan_model(make_model(tmp_path, "m", config=config, model_file="net.py"))
    assert model.available, model.error
    assert model.config.default_model_filename == "net.py"
    assert model.model_version(1).model_path.name == "net.py"


def test_name_in_config_may_match_directory(tmp_path: Path) -> None:
    model = scan_model(make_model(tmp_path, "m", config=f'name: "m"\n{PYTHON_CONFIG}'))
    assert model.available and model.config.name == "m"


def test_name_filled_from_directory(tmp_path: Path) -> None:
    model = scan_model(make_model(tmp_path, "from_dir"))
    assert model.config.name == "from_dir"
    assert model.config.instance_group[0].name == "from_dir"


# ---------------------------------------------------------------------------------------------
# Ensembles

ENSEMBLE = """
platform: "ensemble"
max_batch_size: 4
input [ { name: "E_IN" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "E_OUT" data_type: TYPE_FP32 dims: [ 4 ] } ]
ensemble_scheduling {
  step [
    { model_name: "first" model_version: -1
      input_map { key: "IN" value: "E_IN" } output_map { key: "OUT" value: "mid" } },
    { model_name: "second" model_version: 1
      input_map { key: "IN" value: "mid" } output_map { key: "OUT" value: "E_OUT" } }
  ]
}
"""


def _ensemble_repository(root: Path, second_config: str = PYTHON_CONFIG) -> Path:
    make_model(root, "first")
    make_model(root, "second", config=second_config)
    make_model(root, "ens", config=ENSEMBLE, model_file=None)
    return root


def test_ensemble_parsed(tmp_path: Path) -> None:
    models = scan_repository(_ensemble_repository(tmp_path))
    ensemble = models["ens"]
    assert ensemble.available, ensemble.error
    assert ensemble.is_ensemble and not models["first"].is_ensemble
    assert ensemble.versions == [1]
    steps = ensemble.config.ensemble_scheduling.step
    assert [(s.model_name, s.model_version) for s in steps] == [("first", -1), ("second", 1)]
    assert dict(steps[0].input_map) == {"IN": "E_IN"}
    assert dict(steps[1].output_map) == {"OUT": "E_OUT"}
    rendered = config_to_json_dict(ensemble.config)
    assert rendered["backend"] == "" and rendered["default_model_filename"] == ""
    assert rendered["instance_group"] == []
    assert "optimization" not in rendered
    assert rendered["model_transaction_policy"] == {"decoupled": False}


def test_ensemble_with_decoupled_step_is_decoupled(tmp_path: Path) -> None:
    decoupled = f"{PYTHON_CONFIG}\nmodel_transaction_policy {{ decoupled: true }}"
    repository = _ensemble_repository(tmp_path, second_config=decoupled)
    assert scan_repository(repository)["ens"].config.model_transaction_policy.decoupled
    # A partial scan still reads the member's flag from the repository.
    only = scan_repository(repository, names=["ens"])
    assert list(only) == ["ens"]
    assert only["ens"].config.model_transaction_policy.decoupled


def test_nested_ensemble_inherits_decoupled(tmp_path: Path) -> None:
    decoupled = f"{PYTHON_CONFIG}\nmodel_transaction_policy {{ decoupled: true }}"
    _ensemble_repository(tmp_path, second_config=decoupled)
    outer = """
    platform: "ensemble"
    max_batch_size: 4
    input [ { name: "X" data_type: TYPE_FP32 dims: [ 4 ] } ]
    output [ { name: "Y" data_type: TYPE_FP32 dims: [ 4 ] } ]
    ensemble_scheduling { step [ { model_name: "ens" model_version: -1
      input_map { key: "E_IN" value: "X" } output_map { key: "E_OUT" value: "Y" } } ] }
    """
    make_model(tmp_path, "outer", config=outer, model_file=None)
    models = scan_repository(tmp_path)
    assert models["outer"].available, models["outer"].error
    assert models["outer"].config.model_transaction_policy.decoupled
    assert not models["first"].config.model_transaction_policy.decoupled


def test_ensemble_needs_a_version_dir(tmp_path: Path) -> None:
    make_model(tmp_path, "ens", config=ENSEMBLE, versions=(), model_file=None)
    assert "at least one version" in scan_model(tmp_path / "ens").error


def test_ensemble_with_backend_rejected(tmp_path: Path) -> None:
    config = ENSEMBLE + '\nbackend: "python"\n'
    make_model(tmp_path, "ens", config=config, model_file=None)
    assert "'backend'" in scan_model(tmp_path / "ens").error


# ---------------------------------------------------------------------------------------------
# Platform / backend autofill from the version directory


def test_autofill_python_from_model_py(tmp_path: Path) -> None:
    model = scan_model(make_model(tmp_path, "m", config=f"max_batch_size: 2\n{IO}"))
    assert model.available, model.error
    config = model.config
    assert (config.backend, config.platform, config.default_model_filename, config.runtime) == (
        "python",
        "",
        "model.py",
        "",
    )


def test_autofill_inspects_the_first_version_dir(tmp_path: Path) -> None:
    # Only the lowest version directory is inspected (core: the first subdirectory by name).
    model_dir = make_model(tmp_path, "m", config=f"max_batch_size: 2\n{IO}", versions=(1, 2))
    (model_dir / "1" / "model.py").unlink()
    (model_dir / "1" / "model.bin").write_text("")
    assert "Could not determine backend" in scan_model(model_dir).error


def test_backend_and_platform_pair_checked(tmp_path: Path) -> None:
    config = f'backend: "onnxruntime"\nplatform: "pytorch_libtorch"\n{IO}'
    model = scan_model(make_model(tmp_path, "m", config=config, model_file="model.onnx"))
    assert "unexpected 'platform' and 'backend' pair" in model.error


def test_python_backend_accepts_any_platform(tmp_path: Path) -> None:
    config = f'platform: "custom_thing"\n{PYTHON_CONFIG}'
    model = scan_model(make_model(tmp_path, "m", config=config))
    assert model.available, model.error
    assert model.config.platform == "custom_thing"


@pytest.mark.parametrize(
    ("filename", "backend", "platform"),
    [("model.pt", "pytorch", "pytorch_libtorch"), ("model.plan", "tensorrt", "tensorrt_plan")],
)
def test_autofill_platform_from_model_file(
    tmp_path: Path, filename: str, backend: str, platform: str
) -> None:
    require_backend_module(backend)
    model_dir = make_model(tmp_path, "m", config=f"max_batch_size: 2\n{IO}", model_file=filename)
    model = scan_model(model_dir)
    assert model.available, model.error
    assert (model.config.backend, model.config.platform) == (backend, platform)
    assert model.config.default_model_filename == filename


@pytest.mark.parametrize(
    ("config", "backend"),
    [
        ('platform: "pytorch_libtorch"', "pytorch"),
        ('platform: "tensorrt_plan"', "tensorrt"),
        ('platform: "onnxruntime_onnx"', "onnxruntime"),
        ('default_model_filename: "model.plan"', "tensorrt"),
        ('default_model_filename: "model.onnx"', "onnxruntime"),
        ('default_model_filename: "model.pt"', "pytorch"),
    ],
)
def test_backend_from_platform_or_filename(tmp_path: Path, config: str, backend: str) -> None:
    from repo_adapter.repository import _fill_backend_fields

    model_dir = make_model(tmp_path, "m", model_file=None)
    parsed = mc.ModelConfig(name="m")
    from google.protobuf import text_format

    text_format.Parse(config, parsed)
    _fill_backend_fields(parsed, model_dir)
    assert parsed.backend == backend


def test_probe_order_prefers_tensorrt_then_onnx(tmp_path: Path) -> None:
    from repo_adapter.repository import _fill_backend_fields

    model_dir = make_model(tmp_path, "m", model_file="model.py")
    for name in ("model.onnx", "model.pt", "model.plan"):
        (model_dir / "1" / name).write_text("")
    config = mc.ModelConfig(name="m")
    _fill_backend_fields(config, model_dir)
    assert (config.backend, config.platform) == ("tensorrt", "tensorrt_plan")
    (model_dir / "1" / "model.plan").unlink()
    config = mc.ModelConfig(name="m")
    _fill_backend_fields(config, model_dir)
    assert (config.backend, config.platform) == ("onnxruntime", "onnxruntime_onnx")


def test_autofill_onnx_without_config(tmp_path: Path) -> None:
    """A bare ``model.onnx`` (no config.pbtxt) is completed the way Triton's ORT backend does."""
    require_backend_module("onnxruntime")
    require_module("onnx")
    from examples.builders import save_onnx_mlp

    model_dir = tmp_path / "mlp"
    save_onnx_mlp(model_dir / "1" / "model.onnx", layer_sizes=(4, 8, 3))
    model = scan_model(model_dir)
    assert model.available, model.error
    rendered = config_to_json_dict(model.config)
    assert rendered["name"] == "mlp"
    assert (rendered["backend"], rendered["platform"]) == ("onnxruntime", "onnxruntime_onnx")
    assert rendered["default_model_filename"] == "model.onnx"
    assert rendered["max_batch_size"] == 4  # default-max-batch-size for batchable models
    assert [(t["name"], t["data_type"], t["dims"]) for t in rendered["input"]] == [
        ("INPUT0", "TYPE_FP32", [4])
    ]
    assert [(t["name"], t["data_type"], t["dims"]) for t in rendered["output"]] == [
        ("OUTPUT0", "TYPE_FP32", [3])
    ]
    assert rendered["dynamic_batching"]["preferred_batch_size"] == [4]
    assert [(g["name"], g["kind"], g["count"]) for g in rendered["instance_group"]] == [
        ("mlp", "KIND_CPU", 2)
    ]


def test_autofill_onnx_fixed_batch_dim_disables_batching(tmp_path: Path) -> None:
    require_backend_module("onnxruntime")
    require_module("onnx")
    from examples.builders import save_onnx_mlp

    model_dir = tmp_path / "fixed"
    save_onnx_mlp(model_dir / "1" / "model.onnx", layer_sizes=(4, 2), batch_dim=1)
    model = scan_model(model_dir)
    assert model.available, model.error
    assert model.config.max_batch_size == 0
    assert [list(t.dims) for t in model.config.input] == [[1, 4]]
    assert not model.config.HasField("dynamic_batching")
