"""Every use rayton makes of a Ray or Serve internal, in one place.

Each function here reaches into something Ray does not promise to keep (a private module, a
private attribute or argument). They live together so that a Ray upgrade is checked in one
file: ``tests/cluster/test_serve_internals.py`` fails, naming the internal, when one is gone
or changed shape. Ray's private modules are imported inside the functions that use them, so a
missing one fails only its own feature.
"""

from __future__ import annotations

import contextlib
import dataclasses
import socket
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, Protocol

from ray import serve
from ray.serve.api import RunTarget  # Serve's target type for deploying many applications


@dataclasses.dataclass(frozen=True)
class DeploymentState:
    """One deployment as ``serve.status()`` shows it: Serve's status, what triggered it, its
    message, and how many of its replicas are in each state (``{"RUNNING": 2}``)."""

    status: str
    status_trigger: str
    message: str
    replica_states: dict[str, int]


@dataclasses.dataclass(frozen=True)
class ApplicationState:
    """One application as ``serve.status()`` shows it."""

    status: str
    message: str
    deployments: dict[str, DeploymentState]


def serve_applications() -> dict[str, ApplicationState]:
    """Every Serve application's state, as ``serve.status()`` reports it, read from the Serve
    controller's details dictionary (the client's ``get_serve_details``, reached through
    Serve's private ``_get_global_client``) without validating it into Serve's pydantic
    models first, which costs ``serve.status()`` most of its CPU (BENCHMARKS.md). Empty when
    Serve is not running."""
    from ray.serve.context import _get_global_client

    client = _get_global_client(raise_if_no_controller_running=False)
    if client is None:
        return {}
    details = client.get_serve_details()
    applications = {}
    for name, app in (details.get("applications") or {}).items():
        deployments = {}
        for deployment_name, deployment in (app.get("deployments") or {}).items():
            states: dict[str, int] = {}
            for replica in deployment.get("replicas") or ():
                state = _enum_value(replica["state"])
                states[state] = states.get(state, 0) + 1
            deployments[deployment_name] = DeploymentState(
                _enum_value(deployment["status"]),
                _enum_value(deployment.get("status_trigger", "")),
                deployment.get("message") or "",
                states,
            )
        applications[name] = ApplicationState(
            _enum_value(app["status"]), app.get("message") or "", deployments
        )
    return applications


def _enum_value(member: Any) -> str:
    return str(getattr(member, "value", member))


def set_code_version(deployment: Any, version: str) -> Any:
    """Give an imperatively deployed ``deployment`` a fixed code version (Serve's private
    ``_version``; the public option was removed), so a changed ``user_config`` reconfigures
    its replicas in place instead of restarting them."""
    if hasattr(deployment, "_version"):
        deployment._version = version
    return deployment


def run_many_without_waiting(applications: list[tuple[str, Any, str | None]], **options) -> None:
    """Deploy ``(name, application, route prefix)`` in one request to the Serve controller and
    return without waiting for them to run (Serve's private ``_run_many``). ``options`` are
    :class:`RunTarget`'s (``logging_config``)."""
    targets = [
        RunTarget(app, name=name, route_prefix=route, **options)
        for name, app, route in applications
    ]
    serve._run_many(targets, wait_for_applications_running=False)


def delete_without_waiting(name: str) -> None:
    """Delete application ``name`` and return at once (``serve.delete``'s private
    ``_blocking``)."""
    serve.delete(name, _blocking=False)


def haproxy_binary() -> str:
    """The HAProxy binary Serve runs (raises where none is installed)."""
    from ray.serve._private.haproxy import get_haproxy_binary

    return get_haproxy_binary()


def wrap_serve_grpc_bind(wrap: Callable[[Callable[..., Any]], Callable[..., Any]]) -> None:
    """Replace the helper Serve's gRPC servers bind with (looked up at call time) by
    ``wrap(original)``; a helper already wrapped (``rayton_wrapped``) is left as it is."""
    from ray.serve._private import default_impl

    original = default_impl.add_grpc_address
    if getattr(original, "rayton_wrapped", False):
        return
    wrapped = wrap(original)
    wrapped.rayton_wrapped = True  # type: ignore[attr-defined]
    default_impl.add_grpc_address = wrapped


@contextlib.contextmanager
def localhost_resolved_as(resolve: Callable[[str], str]) -> Iterator[None]:
    """Within the block, Ray resolves a host it connects to with ``resolve`` instead of its
    ``resolve_ip_for_localhost`` (which rewrites loopback to the machine's own address)."""
    from ray._private import services

    rewrite = services.resolve_ip_for_localhost
    services.resolve_ip_for_localhost = resolve
    try:
        yield
    finally:
        services.resolve_ip_for_localhost = rewrite


def token_auth_enabled() -> bool:
    """Whether this cluster requires Ray's token (Ray 2.60's default for a new local cluster,
    ``RAY_AUTH_MODE=disabled`` turns it off): the dashboard and ``ray`` clients need it."""
    try:
        from ray._private.authentication.authentication_utils import is_token_auth_enabled
    except ImportError:  # a Ray without token authentication
        return False
    return is_token_auth_enabled()


def haproxy_ingress() -> bool:
    """Whether Serve runs HAProxy in front of ingress replicas in this cluster
    (``RAY_SERVE_ENABLE_HA_PROXY``, read as Serve reads it): an ingress deployment may then not
    have a request router of its own."""
    from ray.serve._private.constants import RAY_SERVE_ENABLE_HA_PROXY

    return bool(RAY_SERVE_ENABLE_HA_PROXY)


class ReplicaRequestAccounting:
    """What Serve's direct-ingress path records per HTTP request in a replica, for a server
    that takes its place: the replica's ``max_ongoing_requests`` slots, its ongoing-request
    count (Serve's autoscaling signal and its drain), and its request metrics (the
    dashboard's request rate, errors and latency). Built from Serve's private ``Replica``."""

    def __init__(self, replica: Any) -> None:
        from ray.serve._private.common import RequestMetadata, RequestProtocol

        self._metrics = replica._metrics_manager
        self._slots = replica._semaphore
        self._route = replica._route_prefix or ""
        self._app = replica._deployment_id.app_name
        self._deployment = replica._deployment_id.name
        self._http = RequestProtocol.HTTP
        # Serve's counters read only the protocol and the direct-ingress mark of a request.
        self._metadata = RequestMetadata(
            request_id="",
            internal_request_id="",
            route=self._route,
            app_name=self._app,
            _request_protocol=RequestProtocol.HTTP,
            is_direct_ingress=True,
        )

    async def start(self) -> None:
        """Take a slot (waits while ``max_ongoing_requests`` are in flight); count it."""
        await self._slots.acquire()
        self._metrics.inc_num_ongoing_requests(self._metadata)

    def finish(self, method: str, status: int, latency_ms: float) -> None:
        """Release the slot and record the request's metrics."""
        self._metrics.dec_num_ongoing_requests(self._metadata)
        self._slots.release()
        is_error = status >= 500
        self._metrics.record_request_metrics(
            route=self._route, latency_ms=latency_ms, is_error=is_error
        )
        self._metrics.record_ingress_request_metrics(
            protocol=self._http,
            method=method,
            route=self._route,
            app_name=self._app,
            deployment_name=self._deployment,
            latency_ms=latency_ms,
            is_error=is_error,
            status_code=str(status),
        )


@dataclasses.dataclass
class DirectIngressSeat:
    """The HTTP port Serve gave an ingress replica, offered to another server.

    Attributes:
        user_callable: the deployment's instance in this replica.
        serve_app: Serve's own ASGI entry of the replica (its health check and routes).
        keep_alive_timeout_s: Serve's keep-alive setting for the port.
        accounting: Serve's per-request records, for the server to keep.
        address: ``host:port`` where the other replicas of the cluster reach the port.
    """

    user_callable: Any
    serve_app: Callable[..., Any]
    keep_alive_timeout_s: float
    accounting: ReplicaRequestAccounting
    address: str = ""


class SeatedServer(Protocol):
    """A server in Serve's seat: Serve sets ``should_exit`` to drain it and awaits its
    ``serve`` task (uvicorn's interface)."""

    should_exit: bool

    def serve(self, sock: socket.socket) -> Awaitable[None]: ...


def take_direct_ingress_http(offer: Callable[[DirectIngressSeat], SeatedServer | None]) -> None:
    """From now on in this process, a replica's direct-ingress HTTP port is served by the
    server ``offer`` returns for it (None: Serve's own uvicorn, as without this call).

    Wraps Serve's private ``start_asgi_http_server`` as the replica module looks it up. Ports
    Serve's way (TLS, a root path) are left to Serve. Idempotent per process.
    """
    from ray.serve._private import replica as replica_module

    original = replica_module.start_asgi_http_server
    if getattr(original, "rayton_wrapped", False):
        return

    async def start(app: Any, http_options: Any, *, event_loop: Any, **options: Any) -> Any:
        replica = getattr(app, "__self__", None)
        wrapper = getattr(replica, "_user_callable_wrapper", None)
        server = None
        plain = not (http_options.ssl_certfile or http_options.root_path)
        if wrapper is not None and plain:
            server = offer(
                DirectIngressSeat(
                    wrapper.user_callable,
                    app,
                    http_options.keep_alive_timeout_s,
                    ReplicaRequestAccounting(replica),
                    _reachable_address(http_options.host, http_options.port),
                )
            )
        if server is None:
            return await original(app, http_options, event_loop=event_loop, **options)
        family = socket.AF_INET6 if ":" in http_options.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((http_options.host, http_options.port))
        except OSError as err:  # Serve retries another port on this error
            sock.close()
            raise RuntimeError(
                f"Failed to bind to address '{http_options.host}:{http_options.port}'."
            ) from err
        return event_loop.create_task(server.serve(sock)), server

    start.rayton_wrapped = True  # type: ignore[attr-defined]
    replica_module.start_asgi_http_server = start


def _reachable_address(host: str, port: int) -> str:
    """``host:port`` of a port bound on ``host``, as another node reaches it (a wildcard
    host is this node's IP)."""
    if host in ("", "0.0.0.0", "::"):
        import ray

        host = ray.util.get_node_ip_address()
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def session_dir() -> str:
    """The Ray session's directory on this node (``/tmp/ray/session_...``), where Ray's
    dashboard writes its Grafana configuration; "" outside a connected Ray process."""
    from ray._private import worker

    node = getattr(worker.global_worker, "node", None)
    return node.get_session_dir_path() if node is not None else ""


def ray_metrics_report_interval_s() -> float:
    """How often this process's Ray metrics reach its node's metrics agent (Ray's
    ``metrics_report_interval_ms``, 10 s by default): values set more often are overwritten
    before anyone reads them."""
    import ray

    return ray._config.metrics_report_interval_ms() / 1000
