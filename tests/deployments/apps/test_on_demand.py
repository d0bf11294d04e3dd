"""OnDemandLoads without Ray: the real repository state, and replicas that are plain records
(what each would report in its SlotStatus). Requests that arrive together load together, a
failed model is not loaded again until its files change, the budget evicts the least recently
used idle model, waits for a busy one and gives up with the reason after the timeout."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from cluster.memory_budget import HEAD_NODE_RESOURCE
from cluster.placement import placement_for
from deployments.apps.on_demand import OnDemandLoads
from deployments.core.model_slot import SlotStatus
from repo_adapter.errors import InferenceServerError, StatusCode
from repo_adapter.live_repository import LiveRepository
from repo_adapter.model_state import ModelState, VersionState
from tests.support.numbered_models import write_numbered_model


class Replicas:
    """The one home of every loaded model (the shared host, one replica), each model's status
    set by the test."""

    replicas = 1

    def __init__(self, hosted: bool = True) -> None:
        self.statuses: dict[str, SlotStatus] = {}
        self.placements = {}
        self.host = self if hosted else None  # not hosted: each model has replicas of its own

    def home_of(self, name: str):
        return self if name in self.statuses else None

    def home_for(self, placement):
        return self

    def placement_of(self, name: str):
        return self.placements.get(name)

    async def replica_statuses(self, name: str) -> list[SlotStatus | None]:
        return [self.statuses.get(name)]


class Server:
    """What the controller gives OnDemandLoads: loads and unloads on the repository state."""

    def __init__(
        self,
        root: Path,
        budget: str | None,
        timeout_s: float = 5.0,
        hosted: bool = True,
        workers: int = 0,
        gpus_per_worker: int = 0,
        gpu_budget: str | None = None,
    ) -> None:
        self.repository = LiveRepository(root, list(range(gpus_per_worker)))
        self.replicas = Replicas(hosted)
        gpus = {"GPU": float(gpus_per_worker)}
        gpus.update({f"rayton_gpu_{i}": 1.0 for i in range(gpus_per_worker)})
        nodes = [("head", {"memory": 8e9, HEAD_NODE_RESOURCE: 1.0})]
        nodes += [(f"worker{i}", {"memory": 8e9, **gpus}) for i in range(1, workers + 1)]
        self.batches: list[list[str]] = []
        self.unloaded: list[str] = []
        self.unload_s = 0.0
        self.loads = OnDemandLoads(
            self.repository,
            self.replicas,  # type: ignore[arg-type]
            asyncio.Lock(),
            self.load,
            self.unload,
            budget,
            timeout_s,
            "head",
            lambda: nodes,
            gpu_budget,
        )

    async def load(self, names: list[str]) -> None:
        self.batches.append(sorted(names))
        await asyncio.sleep(0.05)  # the loads run concurrently with new requests
        for name in names:
            model = self.repository.plan_load(name).models[-1]
            generation = self.repository.begin_load(model)
            if not model.available:
                self.repository.load_failed(name, model.error)
                continue
            self.replicas.placements[name] = placement_for(model.config)
            self.replicas.statuses[name] = SlotStatus(generation, generation, "", {})
            self.repository.load_succeeded(name, generation, {"1": VersionState(ModelState.READY)})

    async def unload(self, name: str) -> None:
        await asyncio.sleep(self.unload_s)
        self.repository.begin_unload(name)
        self.unloaded.append(name)
        del self.replicas.statuses[name]
        self.repository.unload_finished(name)

    def use(self, name: str, in_flight: int = 0) -> None:
        status = self.replicas.statuses[name]
        status.last_used, status.in_flight = time.time(), in_flight


@pytest.fixture
def repository(tmp_path):
    for number in range(4):
        write_numbered_model(tmp_path, f"m{number}", number, "onnx", footprint="10MB")
    (tmp_path / "broken" / "1").mkdir(parents=True)
    (tmp_path / "broken" / "config.pbtxt").write_text("bad_field: 1\n")
    return tmp_path


async def test_requests_that_arrive_together_load_together(repository):
    server = Server(repository, budget=None)
    first = asyncio.ensure_future(server.loads.ensure_loaded("m0"))
    await asyncio.sleep(0.01)  # m0's load is running: the next ones wait for the next batch
    rest = [server.loads.ensure_loaded(name) for name in ("m1", "m2", "m1")]
    assert all(await asyncio.gather(first, *rest))
    assert server.batches == [["m0"], ["m1", "m2"]]
    assert await server.loads.ensure_loaded("m0")  # served: nothing to load
    assert len(server.batches) == 2


async def test_unknown_models_are_not_found_and_a_failed_load_is_not_tried_again(repository):
    server = Server(repository, budget=None)
    with pytest.raises(InferenceServerError) as unknown:
        await server.loads.ensure_loaded("nope")
    assert unknown.value.code == StatusCode.NOT_FOUND
    assert not await server.loads.ensure_loaded("broken")
    assert not await server.loads.ensure_loaded("broken")
    assert server.batches == [["broken"]]
    (repository / "broken" / "config.pbtxt").write_text("still_bad: 1\n")  # files changed
    assert not await server.loads.ensure_loaded("broken")
    assert server.batches == [["broken"], ["broken"]]


async def test_the_least_recently_used_idle_model_makes_room(repository):
    server = Server(repository, budget="25MB")  # two models fit
    for name in ("m0", "m1"):
        assert await server.loads.ensure_loaded(name)
    server.use("m1")
    server.use("m0")  # m1 is now the least recently used
    assert await server.loads.ensure_loaded("m2")
    assert server.unloaded == ["m1"]
    usage = await server.loads.usage()
    assert (usage.capacity_bytes, usage.used_bytes) == (25_000_000, 20_000_000)
    m1 = next(m for m in usage.models if m.model == "m1")
    assert (m1.resident, m1.loads, m1.evictions) == (False, 1, 1)


async def test_a_busy_model_is_waited_for_then_evicted(repository):
    server = Server(repository, budget="15MB")  # one model fits
    assert await server.loads.ensure_loaded("m0")
    server.use("m0", in_flight=1)
    waiting = asyncio.ensure_future(server.loads.ensure_loaded("m1"))
    await asyncio.sleep(0.3)
    assert not waiting.done() and server.unloaded == []  # never while a request runs
    server.use("m0", in_flight=0)
    assert await waiting
    assert server.unloaded == ["m0"]


async def test_a_model_that_stays_busy_gives_up_with_the_reason(repository):
    server = Server(repository, budget="15MB", timeout_s=0.5)
    assert await server.loads.ensure_loaded("m0")
    server.use("m0", in_flight=1)
    with pytest.raises(InferenceServerError) as busy:
        await server.loads.ensure_loaded("m1")
    assert busy.value.code == StatusCode.UNAVAILABLE
    assert "m0" in busy.value.message and server.unloaded == []


async def test_models_with_replicas_of_their_own_spread_over_the_workers_by_room(repository):
    write_numbered_model(repository, "m4", 4, "onnx", footprint="10MB")
    server = Server(repository, budget="25MB", hosted=False, workers=2)  # two fit per node
    nodes = {}
    for name in ("m0", "m1", "m2", "m3"):
        assert await server.loads.ensure_loaded(name)
        nodes[name] = server.loads.node_of(name)
        server.use(name)
    assert nodes == {"m0": "worker1", "m1": "worker2", "m2": "worker1", "m3": "worker2"}
    assert await server.loads.ensure_loaded("m4")  # no room left: the LRU on its node goes
    assert server.unloaded == ["m0"] and server.loads.node_of("m4") == "worker1"
    usage = await server.loads.usage()
    assert {m.model: m.node for m in usage.models if m.resident} == {
        "m1": "worker2",
        "m2": "worker1",
        "m3": "worker2",
        "m4": "worker1",
    }


async def test_gpu_models_go_one_per_gpu_then_the_least_recently_used_makes_room(tmp_path):
    for number in range(5):
        write_numbered_model(tmp_path, f"g{number}", number, footprint="1MB", gpu_footprint="1GB")
    server = Server(
        tmp_path, budget=None, hosted=False, workers=2, gpus_per_worker=2, gpu_budget="1.5GB"
    )
    places = {}
    for name in ("g0", "g1", "g2", "g3"):
        assert await server.loads.ensure_loaded(name)
        places[name] = server.loads.gpu_of(name).slot.key
    assert sorted(places.values()) == [f"worker{w}/gpu{g}" for w in (1, 2) for g in (0, 1)]
    assert {server.loads.node_of(n) for n in places} == {"worker1", "worker2"}
    assert server.loads.gpu_of("g0").share == pytest.approx(1 / 1.5, abs=1e-3)
    server.use("g0")  # g1 is now the least recently used
    assert await server.loads.ensure_loaded("g4")
    assert server.unloaded == ["g1"]
    assert server.loads.gpu_of("g4").slot.key == places["g1"]
    usage = await server.loads.usage()
    assert (usage.gpu_capacity_bytes, usage.gpu_used_bytes) == (1_500_000_000, 4_000_000_000)
    assert usage.capacity_bytes == 0  # no node budget
    resident = {m.model: (m.gpu, m.gpu_bytes) for m in usage.models if m.resident}
    assert resident["g4"] == (places["g1"], 1_000_000_000) and "g1" not in resident


async def test_a_gpu_budget_with_no_declared_gpu_answers_why(tmp_path):
    write_numbered_model(tmp_path, "g0", 0, gpu_footprint="1GB")
    write_numbered_model(tmp_path, "c0", 1, footprint="1MB")
    repository = LiveRepository(tmp_path, [0])
    assert repository.scan("g0").available  # this machine would run it; the cluster has no GPU
    server = Server(tmp_path, budget=None, hosted=False, workers=1, gpu_budget="1GB")
    server.repository = repository
    server.loads.repository = repository
    with pytest.raises(InferenceServerError) as refused:
        await server.loads.ensure_loaded("g0")
    assert refused.value.code == StatusCode.UNAVAILABLE
    assert "rayton_gpu_<i>" in refused.value.message and "'g0' needs a GPU" in refused.value.message
    assert await server.loads.ensure_loaded("c0")  # a CPU model is not the GPU budget's


async def test_models_preloaded_at_start_up_are_placed_by_the_budgets_not_counted(tmp_path):
    for number in range(3):
        write_numbered_model(tmp_path, f"g{number}", number, footprint="1MB", gpu_footprint="1GB")
    server = Server(
        tmp_path, budget="2MB", hosted=False, workers=2, gpus_per_worker=1, gpu_budget="1GB"
    )
    await server.loads.preload(["g0", "g1"])
    assert server.batches == [["g0", "g1"]]
    places = {server.loads.gpu_of(n).slot.key for n in ("g0", "g1")}
    assert places == {"worker1/gpu0", "worker2/gpu0"}  # one per GPU, as on demand
    usage = await server.loads.usage()
    assert {m.model: m.loads for m in usage.models} == {"g0": 0, "g1": 0}
    assert await server.loads.ensure_loaded("g2")  # the GPUs are full: the oldest goes
    assert server.unloaded == ["g0"]


async def test_a_repository_api_load_makes_room_as_a_load_on_demand_does(repository):
    server = Server(repository, budget="25MB")  # two models fit
    for name in ("m0", "m1"):
        assert await server.loads.ensure_loaded(name)
    server.use("m0")
    server.use("m1")  # m0 is now the least recently used
    await server.loads.load_requested("m2", lambda: server.load(["m2"]))
    assert server.unloaded == ["m0"]
    usage = await server.loads.usage()
    assert usage.used_bytes <= usage.capacity_bytes
    assert {m.model: m.loads for m in usage.models}["m2"] == 0  # not counted as on demand
    await server.loads.load_requested("m2", lambda: server.load(["m2"]))  # a reload
    assert server.unloaded == ["m0"]  # a served model keeps its place: nothing more goes


async def test_a_repository_api_load_that_fails_raises_after_the_evictions_finished(repository):
    server = Server(repository, budget="15MB")  # one model fits
    assert await server.loads.ensure_loaded("m0")
    server.unload_s = 0.2  # the load fails at once, the eviction later

    async def refused() -> None:
        raise InferenceServerError("refused", StatusCode.INVALID_ARG)

    with pytest.raises(InferenceServerError, match="refused"):
        await server.loads.load_requested("m1", refused)
    assert server.unloaded == ["m0"]  # the unload ran to its end before the error
