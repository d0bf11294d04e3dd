from dataclasses import asdict

from cluster.memory_budget import BudgetUsage, ModelResidency
from deployments.observability.status import ReplicaInfo, format_status, status_document

INDEX = [
    {"name": "add_sub", "version": "1", "state": "READY", "reason": ""},
    {"name": "broken", "version": "1", "state": "UNAVAILABLE", "reason": "init exploded"},
    {"name": "later"},  # in the repository, never loaded (explicit mode)
]
REPLICA = ReplicaInfo(
    replica="abc123",
    deployment="models",
    node_id="f" * 40,
    node_ip="127.0.0.1",
    gpu_ids=["0"],
    pid=4242,
)


def holding(*models: str) -> ReplicaInfo:
    return ReplicaInfo(**{**asdict(REPLICA), "models": list(models)})


def test_the_document_groups_versions_and_replicas_by_model():
    document = status_document("/models", "explicit", INDEX, [holding("add_sub", "gone")])
    assert document["model_control_mode"] == "explicit"
    models = document["models"]
    assert list(models) == ["add_sub", "broken", "later"]
    assert models["add_sub"]["versions"] == [{"version": "1", "state": "READY", "reason": ""}]
    where = {key: value for key, value in asdict(REPLICA).items() if key != "models"}
    assert models["add_sub"]["replicas"] == [where]  # a model the index lacks is left out
    assert models["broken"]["versions"][0]["reason"] == "init exploded"
    assert models["later"] == {"versions": [], "replicas": []}


def test_text_has_a_line_per_version_and_per_replica():
    text = format_status(status_document("/models", "none", INDEX, [holding("add_sub")]))
    lines = text.splitlines()
    assert lines[0] == "repository /models (model control mode none)"
    assert lines[3].split() == ["add_sub", "1", "READY", "1"]
    assert "replica abc123  node 127.0.0.1 (ffffffffffff)  gpus 0  pid 4242" in lines[4]
    assert lines[5].split()[:4] == ["broken", "1", "UNAVAILABLE", "0"]
    assert lines[5].endswith("init exploded")
    assert lines[6].split() == ["later", "-", "not", "loaded", "0"]


def test_a_models_traffic_policy_and_recycled_rounds_are_shown_where_set():
    policy = {"weights": {"1": 0.0, "2": 100.0}}
    document = status_document(
        "/models", "none", INDEX, [], {"add_sub": policy, "gone": policy}, {"broken": 3}
    )
    models = document["models"]
    assert models["add_sub"]["traffic"] == policy and "recycled" not in models["add_sub"]
    assert models["broken"]["recycled"] == 3 and "traffic" not in models["broken"]
    lines = format_status(document).splitlines()
    assert lines[4] == '    traffic {"weights": {"1": 0.0, "2": 100.0}}'
    assert lines[6] == "    replicas recycled 3 times"


def test_a_gpu_budget_shows_per_gpu_and_on_each_gpu_model():
    usage = BudgetUsage(
        0,
        2 * 2**20,
        [
            ModelResidency("add_sub", True, 2**20, 1, 0, "n1", "n1/gpu1", 3 * 2**20),
            ModelResidency("broken", False, 2**20, 1, 1, "", "", 0),
        ],
        8 * 2**20,
        3 * 2**20,
    )
    document = status_document("/models", "none", INDEX, [], memory=usage)
    assert document["memory_budget"] == {
        "capacity_bytes": 0,
        "used_bytes": 2 * 2**20,
        "gpu_capacity_bytes": 8 * 2**20,
        "gpu_used_bytes": 3 * 2**20,
    }
    memory = document["models"]["add_sub"]["memory"]
    assert (memory["gpu"], memory["gpu_bytes"]) == ("n1/gpu1", 3 * 2**20)
    assert "gpu" not in document["models"]["broken"]["memory"]
    assert (
        "models load on demand; loaded models take 2.0 MiB; GPU memory budget 8.0 MiB per GPU, "
        "3.0 MiB used" in format_status(document)
    )
