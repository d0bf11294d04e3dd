"""A sequence model's replicas find each other's sequences: the directory of which replica
holds each running sequence, the forwarding call between replicas, and the request router
that sends a forwarded request to the replica it names (behind Serve's proxy; behind HAProxy,
where Serve refuses an ingress deployment a router of its own, a request is forwarded to the
holder's own port instead: :mod:`deployments.apps.sequence_ports`).

* :class:`SequenceDirectoryActor` is a deployment-scoped actor of the model's deployment
  (Serve starts it with the deployment, restarts it if it dies and stops it with the
  deployment): one owner for the model's sequence-to-replica map.
* :class:`ActorSequenceDirectory` and :class:`ReplicaForwarder` are the replica's
  :class:`~deployments.core.sequence_routing.SequenceDirectory` and
  :class:`~deployments.core.sequence_routing.SequenceForwarder` on top of it and of a handle to
  the replica's own deployment.
* :class:`SequenceRequestRouter` is the deployment's Serve request router, in every process
  that calls the deployment: a call that names a replica (``sequence_replica``) goes to that
  replica, or, once that replica is gone, to any other, which answers that the sequence was
  lost; a sequence's requests go where this caller sent its START; every other call goes to
  the less loaded of two replicas picked at random, as Serve's default router does.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import ray
from ray import serve
from ray.exceptions import RayActorError
from ray.serve.config import DeploymentActorConfig, RequestRouterConfig
from ray.serve.handle import DeploymentHandle
from ray.serve.request_router import PendingRequest, RequestRouter, RunningReplica
from tritonclient.grpc import model_config_pb2 as mc

from cluster.serve_internals import haproxy_ingress
from deployments.apps.sequence_ports import PortForwarder
from deployments.core.sequence_routing import (
    SequenceForwarder,
    SequenceRouting,
    route_sequence_name,
    sequence_lost,
    sequence_name,
)
from deployments.grpc.routing import read_infer_route
from repo_adapter.errors import InferenceServerError, StatusCode
from repo_adapter.inference_types import InferRequest, InferResponse
from repo_adapter.response_stream import StreamedResponse

DIRECTORY_ACTOR = "sequences"
# The keyword a forwarded call names its target replica with (read by the router).
TARGET_KEYWORD = "sequence_replica"
# A named replica this router has never listed may be one that started a moment ago: wait for
# Serve's update this long before taking it for gone.
_NEW_REPLICA_WAIT_S = 3.0
_WAIT_POLL_S = 0.05
# How many sequences' replicas one router remembers (the oldest are forgotten first: their
# requests then take the hop through the replica they reach).
_REMEMBERED_SEQUENCES = 100_000
# Per process, what Serve's routers here know of each sequence deployment's replicas: the ones
# running now (by deployment) and the ones they saw go. A forward to a replica gone is refused
# before it is sent: sent, Serve's router would give it to any replica, the caller itself too,
# whose slot the waiting caller holds.
_running: dict[str, set[str]] = {}
_gone: set[str] = set()


@ray.remote(num_cpus=0)
class SequenceDirectoryActor:
    """Which replica of one sequence model holds each of its running sequences, and where
    each replica's own port is (behind HAProxy)."""

    def __init__(self) -> None:
        self._owners: dict[str, str] = {}
        self._addresses: dict[str, str] = {}

    def claim(self, sequence: str, replica: str, address: str = "") -> str | None:
        if address:
            self._addresses[replica] = address
        previous, self._owners[sequence] = self._owners.get(sequence), replica
        return previous

    def owner(self, sequence: str) -> str | None:
        return self._owners.get(sequence)

    def address(self, replica: str) -> str | None:
        return self._addresses.get(replica)

    def release(self, sequence: str, replica: str) -> None:
        if self._owners.get(sequence) == replica:  # not a START that moved it since
            del self._owners[sequence]

    def size(self) -> int:
        return len(self._owners)


def routes_sequences(config: mc.ModelConfig) -> bool:
    """Whether a model's replicas route its sequences to each other: a sequence model's do."""
    return config.HasField("sequence_batching")


def sequence_deployment_options() -> dict[str, Any]:
    """The deployment options a sequence model's deployment adds: its directory, and its
    router where Serve allows it one (not behind HAProxy)."""
    options: dict[str, Any] = {
        "deployment_actors": [
            DeploymentActorConfig(
                name=DIRECTORY_ACTOR,
                actor_class=SequenceDirectoryActor,
                actor_options={"num_cpus": 0},
            )
        ]
    }
    if not haproxy_ingress():
        options["request_router_config"] = RequestRouterConfig(
            request_router_class=f"{__name__}:{SequenceRequestRouter.__name__}"
        )
    return options


class ActorSequenceDirectory:
    """The model's :class:`SequenceDirectoryActor`, looked up again after Serve restarts it
    (its sequences are then forgotten: their next requests get Triton's START error).

    ``own_address`` gives this replica's port (behind HAProxy), recorded with its claims.
    """

    def __init__(self, own_address: Callable[[], str] = str) -> None:
        self._actor: Any = None
        self._own_address = own_address

    async def claim(self, sequence: str, replica: str) -> str | None:
        return await self._call("claim", sequence, replica, self._own_address())

    async def owner(self, sequence: str) -> str | None:
        return await self._call("owner", sequence)

    async def address(self, replica: str) -> str | None:
        return await self._call("address", replica)

    def release(self, sequence: str, replica: str) -> None:
        _in_background(self._call("release", sequence, replica))

    async def _call(self, method: str, *args: str) -> Any:
        for attempt in range(2):
            try:
                actor = self._actor or serve.get_deployment_actor(DIRECTORY_ACTOR)
                self._actor = actor
                return await getattr(actor, method).remote(*args)
            except (RayActorError, ValueError) as err:  # restarted, or being restarted
                self._actor = None
                if attempt:
                    raise InferenceServerError(
                        f"the model's sequence directory is unavailable ({type(err).__name__}); "
                        "Serve is restarting it",
                        StatusCode.UNAVAILABLE,
                    ) from None
                await asyncio.sleep(0.5)
        raise AssertionError("unreachable")


class ReplicaForwarder:
    """Sends a sequence's request to a named replica of this replica's own deployment."""

    def __init__(self, model: str) -> None:
        self._model = model
        self._handle: DeploymentHandle | None = None
        context = serve.get_replica_context()
        self._deployment = _deployment_key(context.app_name, context.deployment)

    async def _check_running(self, replica: str, request: InferRequest) -> None:
        """Refuse a forward to a replica this process's routers saw go, or do not list within
        :data:`_NEW_REPLICA_WAIT_S` (one that started a moment ago is listed by then).

        Raises:
            InferenceServerError: UNAVAILABLE: the sequence was lost with its replica.
        """
        deadline = time.monotonic() + _NEW_REPLICA_WAIT_S
        while replica not in _gone:
            running = _running.get(self._deployment)
            if running is None or replica in running:
                return  # no router here yet (the call makes one), or it runs
            if time.monotonic() > deadline:
                _gone.add(replica)
                break
            await asyncio.sleep(_WAIT_POLL_S)
        raise sequence_lost(self._model, request)

    def _own(self) -> DeploymentHandle:
        if self._handle is None:
            context = serve.get_replica_context()
            self._handle = serve.get_deployment_handle(
                context.deployment, app_name=context.app_name
            )
        return self._handle

    async def forward(self, replica: str, request: InferRequest) -> InferResponse:
        await self._check_running(replica, request)
        call = self._own().infer_sequence.remote(self._model, request, **{TARGET_KEYWORD: replica})
        try:
            return await call
        except RayActorError:  # the holder stopped while running it
            raise sequence_lost(self._model, request) from None

    async def forward_stream(
        self, replica: str, request: InferRequest
    ) -> AsyncIterator[StreamedResponse]:
        await self._check_running(replica, request)
        handle = self._own().options(stream=True)
        replies = handle.infer_sequence_stream.remote(
            self._model, request, **{TARGET_KEYWORD: replica}
        )
        try:
            async for item in replies:
                yield item
        except RayActorError:
            raise sequence_lost(self._model, request) from None

    def drop(self, replica: str, sequence: str) -> None:
        if replica in _gone:
            return
        call = self._own().drop_sequence.remote(self._model, sequence, **{TARGET_KEYWORD: replica})
        _in_background(call)


_background: set[asyncio.Future] = set()


def _in_background(call: Awaitable[Any]) -> None:
    """Run ``call`` without waiting for it (kept referenced until it is done)."""
    task = asyncio.ensure_future(call)
    _background.add(task)
    task.add_done_callback(_background.discard)


def replica_sequence_routing(
    model: str, idle_s: float, own_address: Callable[[], str]
) -> SequenceRouting:
    """This replica's :class:`SequenceRouting` for sequence model ``model``: forwarding
    through the deployment's router, or behind HAProxy to the holder's port (this replica's
    is ``own_address()``)."""
    replica = serve.get_replica_context().replica_id.unique_id
    directory = ActorSequenceDirectory(own_address)
    forwarder: SequenceForwarder
    if haproxy_ingress():
        forwarder = PortForwarder(model, directory)
    else:
        forwarder = ReplicaForwarder(model)
    return SequenceRouting(model, replica, directory, forwarder, idle_s)


class SequenceRequestRouter(RequestRouter):
    """A sequence model's Serve request router (see the module's text).

    A caller that sends a sequence's requests itself (the gRPC frontend, an ensemble step, a
    BLS call) sends its START to one replica and remembers it: the sequence's next requests
    from this caller go straight there, without the hop a request reaching another replica
    takes to the holder.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._holders: OrderedDict[str, str] = OrderedDict()  # sequence -> replica started on

    def update_replicas(self, replicas: list[RunningReplica]) -> None:
        key = _deployment_key(self._deployment_id.app_name, self._deployment_id.name)
        running = {r.replica_id.unique_id for r in replicas}
        _gone.update(_running.get(key, set()) - running)  # stopped, or died
        _running[key] = running
        super().update_replicas(replicas)

    def on_replica_actor_died(self, replica_id: Any) -> None:
        _gone.add(replica_id.unique_id)
        super().on_replica_actor_died(replica_id)

    async def choose_replicas(
        self,
        candidate_replicas: list[RunningReplica],
        pending_request: PendingRequest | None = None,
    ) -> list[list[RunningReplica]]:
        if pending_request is None:
            return [_two_of(candidate_replicas)]
        target = pending_request.kwargs.get(TARGET_KEYWORD)
        if target is None:
            return self._by_sequence(candidate_replicas, pending_request)
        named = [r for r in candidate_replicas if r.replica_id.unique_id == target]
        if named:
            return [named]
        waited = time.time() - pending_request.created_at
        if target in _gone or waited > _NEW_REPLICA_WAIT_S:  # (gone: removed by update_replicas)
            _gone.add(target)  # later calls naming it are refused before they are sent
            return [candidate_replicas]  # gone: the replica it reaches answers so
        await asyncio.sleep(_WAIT_POLL_S)  # Serve's routing loop calls again at once
        return []

    def _by_sequence(
        self, candidates: list[RunningReplica], pending_request: PendingRequest
    ) -> list[list[RunningReplica]]:
        sequence, start, end = _sequence_of(pending_request.args)
        if sequence is None:
            return [_two_of(candidates)]
        if start:
            chosen = random.choice(candidates)
            self._holders[sequence] = chosen.replica_id.unique_id
            self._holders.move_to_end(sequence)
            while len(self._holders) > _REMEMBERED_SEQUENCES:
                self._holders.popitem(last=False)
            return [[chosen]]
        holder = self._holders.pop(sequence, None) if end else self._holders.get(sequence)
        named = [r for r in candidates if r.replica_id.unique_id == holder and holder not in _gone]
        return [named] if named else [_two_of(candidates)]


def _deployment_key(app: str, deployment: str) -> str:
    return f"{app}#{deployment}"


def _two_of(candidates: list[RunningReplica]) -> list[RunningReplica]:
    """Two replicas at random; Serve's router takes the less loaded (power of two choices)."""
    return random.sample(candidates, min(2, len(candidates)))


def _sequence_of(args: list[Any]) -> tuple[str | None, bool, bool]:
    """The sequence, START and END flags of a call's request: ``(model, InferRequest)`` or
    ``(model, serialized ModelInferRequest)``; (None, ...) for any other call."""
    if len(args) < 2:
        return None, False, False
    payload = args[1]
    if isinstance(payload, InferRequest):
        parameters = payload.parameters
        start, end = parameters.get("sequence_start"), parameters.get("sequence_end")
        return sequence_name(payload), start is True, end is True
    if isinstance(payload, bytes):
        try:
            route = read_infer_route(payload)
        except InferenceServerError:  # the replica answers the parse error
            return None, False, False
        return route_sequence_name(route.sequence_id), route.sequence_start, route.sequence_end
    return None, False, False
