"""LiveRepository: scans with fingerprints, Triton's load / unload semantics, the index."""

from __future__ import annotations

import json
import os

import pytest

from repo_adapter.errors import InferenceServerError, StatusCode
from repo_adapter.live_repository import LiveRepository, load_failed_error
from repo_adapter.model_state import ModelState, VersionState
from tests.support.live_models import write_adder, write_chain

# A config override for the adders: max_batch_size 2 instead of config.pbtxt's 8.
BATCH_OF_TWO = json.dumps(
    {
        "backend": "python",
        "max_batch_size": 2,
        "input": [{"name": "IN", "data_type": "TYPE_FP32", "dims": [1]}],
        "output": [{"name": "OUT", "data_type": "TYPE_FP32", "dims": [1]}],
    }
)


@pytest.fixture
def root(tmp_path):
    write_adder(tmp_path, "first")
    write_adder(tmp_path, "second")
    write_chain(tmp_path, "chain", "first", "second")
    return tmp_path


def load(repository: LiveRepository, name: str, config: str | None = None) -> None:
    """Load as the controller does, every model of the plan succeeding."""
    for model in repository.plan_load(name, config).models:
        generation = repository.begin_load(model)
        repository.load_succeeded(
            model.name,
            generation,
            {str(v): VersionState(ModelState.READY) for v in model.versions},
        )


def test_never_loaded_models_are_listed_by_name_only(root):
    repository = LiveRepository(root)
    assert repository.index() == [{"name": "chain"}, {"name": "first"}, {"name": "second"}]
    assert repository.index(ready_only=True) == []


def test_an_ensemble_plan_loads_its_members_first(root):
    repository = LiveRepository(root)
    plan = repository.plan_load("chain")
    assert [m.name for m in plan.models] == ["first", "second", "chain"]
    load(repository, "first")
    assert [m.name for m in repository.plan_load("chain").models] == ["second", "chain"]


def test_unload_states_and_dependents(root):
    repository = LiveRepository(root)
    load(repository, "chain")
    assert repository.dependents_of("first") == ["chain"]
    assert sorted(repository.uses_of("chain")) == ["first", "second"]
    repository.begin_unload("chain")
    assert repository.index()[0] == {"name": "chain", "version": "1", "state": "UNLOADING"}
    repository.unload_finished("chain")
    assert repository.index()[0] == {
        "name": "chain",
        "version": "1",
        "state": "UNAVAILABLE",
        "reason": "unloaded",
    }
    assert repository.unavailable_reason("chain") == "unloaded"
    assert repository.dependents_of("first") == []


def test_loading_shows_the_versions_being_loaded(root):
    repository = LiveRepository(root)
    (model,) = repository.plan_load("first").models
    repository.begin_load(model)
    assert repository.index()[1] == {"name": "first", "version": "1", "state": "LOADING"}
    repository.load_failed("first", "init exploded")
    assert repository.index()[1]["reason"] == "init exploded"


def test_a_failed_reload_keeps_the_served_model(root):
    repository = LiveRepository(root)
    load(repository, "first")
    write_adder(root, "first", version=2, offset=2.0)
    (model,) = repository.plan_load("first").models
    repository.begin_load(model)
    index = repository.index()
    assert {"name": "first", "version": "1", "state": "READY"} in index
    assert {"name": "first", "version": "2", "state": "LOADING"} in index
    repository.load_failed("first", "version 2 failed")
    assert repository.served_names() == ["first"]
    assert repository.unavailable_reason("first") is None


def test_a_stopped_replica_shows_in_the_index_until_the_next_load(root):
    repository = LiveRepository(root)
    repository.replica_stopped("first", "not served: nothing to note")
    load(repository, "first")
    repository.replica_stopped("first", "a replica stopped unexpectedly at noon")
    ready = {"name": "first", "version": "1", "state": "READY"}
    assert {**ready, "reason": "a replica stopped unexpectedly at noon"} in repository.index()
    load(repository, "first")
    assert ready in repository.index()
    (model,) = repository.plan_load("first").models
    repository.begin_load(model)  # its own deploy replaces replicas: nothing to note
    repository.replica_stopped("first", "a replica stopped unexpectedly at one")
    assert all("reason" not in entry for entry in repository.index())


def test_unknown_models_and_bad_overrides_are_not_polled(root):
    repository = LiveRepository(root)
    with pytest.raises(InferenceServerError) as unknown:
        repository.plan_load("nope")
    assert unknown.value.code is StatusCode.INTERNAL
    assert unknown.value.message == "failed to load 'nope', failed to poll from model repository"
    with pytest.raises(InferenceServerError, match="failed to poll"):
        repository.plan_load("first", "{not json")
    with pytest.raises(InferenceServerError, match="names model 'other'"):
        repository.plan_load("first", json.dumps({"name": "other", "backend": "python"}))


def test_a_config_override_replaces_the_config_and_is_kept(root):
    repository = LiveRepository(root)
    override = BATCH_OF_TWO
    (model,) = repository.plan_load("first", override).models
    assert model.config.max_batch_size == 2
    repository.begin_load(model)
    (again,) = repository.plan_load("first").models  # None: keep the earlier override
    assert again.config.max_batch_size == 2
    (dropped,) = repository.plan_load("first", "").models
    assert dropped.config.max_batch_size == 8


def test_an_unload_forgets_the_override_as_triton_does(root):
    repository = LiveRepository(root)
    override = BATCH_OF_TWO
    load(repository, "first", override)
    repository.begin_unload("first")
    repository.unload_finished("first")
    (model,) = repository.plan_load("first").models  # config.pbtxt again
    assert model.config.max_batch_size == 8


def test_an_ensemble_unloaded_with_its_member_returns_with_it(root):
    repository = LiveRepository(root)
    load(repository, "chain")
    assert repository.returning_ensembles() == []
    for name, with_member in (("chain", True), ("first", False)):
        repository.begin_unload(name)
        repository.unload_finished(name, with_member)
    assert repository.returning_ensembles() == []  # its member serves nothing yet
    load(repository, "first")
    assert repository.returning_ensembles() == ["chain"]
    load(repository, "chain")
    assert repository.returning_ensembles() == []


def test_an_ensemble_unloaded_by_itself_stays_unloaded(root):
    repository = LiveRepository(root)
    load(repository, "chain")
    for name in ("chain", "first"):
        repository.begin_unload(name)
        repository.unload_finished(name)
    load(repository, "first")
    assert repository.returning_ensembles() == []


def test_poll_sees_new_versions_config_changes_and_removals(root):
    repository = LiveRepository(root)
    for name in ("first", "second"):
        load(repository, name)
    assert repository.changed_since_served(["first", "second"]) == {}
    write_adder(root, "first", version=2, offset=2.0)
    config = root / "second" / "config.pbtxt"
    config.write_text(config.read_text().replace("1000", "2000"))
    os.utime(config, ns=(1, 1))  # a different mtime even on coarse clocks
    assert repository.changed_since_served(["first", "second"]) == {
        "first": "load",
        "second": "load",
    }
    (model,) = repository.plan_load("first").models
    assert model.versions == [2]  # latest policy: version 2 replaces version 1
    for path in sorted((root / "second").rglob("*"), reverse=True):
        path.unlink() if path.is_file() else path.rmdir()
    (root / "second").rmdir()
    assert repository.changed_since_served(["second"]) == {"second": "unload"}


def test_a_failed_load_is_retried_only_when_its_files_change(root):
    repository = LiveRepository(root)
    write_adder(root, "broken")
    (root / "broken" / "config.pbtxt").write_text("max_batch_size: x")
    (model,) = repository.plan_load("broken").models
    repository.begin_load(model)
    repository.load_failed("broken", model.error)
    assert "broken" not in repository.changed_since_served()
    (root / "broken" / "config.pbtxt").write_text('backend: "python"\n')
    assert repository.changed_since_served()["broken"] == "load"


def test_load_failed_error_reads_like_triton():
    versions = {
        "1": VersionState(ModelState.UNAVAILABLE, "one"),
        "2": VersionState(ModelState.UNAVAILABLE, "two"),
    }
    error = load_failed_error("m", versions, "")
    assert error.code is StatusCode.INVALID_ARG
    assert error.message == (
        "load failed for model 'm': version 2 is at UNAVAILABLE state: two;\n"
        "version 1 is at UNAVAILABLE state: one;\n"
    )
    assert load_failed_error("m", {}, "no GPU").message == "load failed for model 'm': no GPU\n"


def test_model_files_sent_with_a_load(root, tmp_path_factory):
    model_py = (root / "first" / "1" / "model.py").read_bytes()
    config = json.dumps(
        {
            "backend": "python",
            "max_batch_size": 8,
            "input": [{"name": "IN", "data_type": "TYPE_FP32", "dims": [1]}],
            "output": [{"name": "OUT", "data_type": "TYPE_FP32", "dims": [1]}],
        }
    )
    refusing = LiveRepository(root)
    with pytest.raises(InferenceServerError, match="--model-file-override-dir") as refused:
        refusing.plan_load("uploaded", config, {"file:1/model.py": model_py})
    assert refused.value.code is StatusCode.UNSUPPORTED

    uploads = tmp_path_factory.mktemp("uploads")
    repository = LiveRepository(root, file_override_dir=uploads)
    with pytest.raises(InferenceServerError, match="'config' must be specified"):
        repository.plan_load("uploaded", None, {"file:1/model.py": model_py})
    with pytest.raises(InferenceServerError, match="invalid file path"):
        repository.plan_load("uploaded", config, {"file:../../escape.py": model_py})
    (model,) = repository.plan_load("uploaded", config, {"file:1/model.py": model_py}).models
    assert model.available and model.versions == [1]
    assert model.path.is_relative_to(uploads) and (model.path / "1" / "model.py").exists()
    (again,) = repository.plan_load("first").models  # no files: the repository's own
    assert again.path == root / "first"
