"""``rayton serve``: serve a model repository on a Ray cluster it starts (or joins) until
Ctrl-C, then stop cleanly (the requests in flight finish)."""

from __future__ import annotations

import argparse
import signal
import socket
import sys
import threading
import time
from typing import Annotated, Any, Literal

import ray
from pydantic import BaseModel, ConfigDict, Field, model_validator
from ray import serve
from ray.serve.api import RunTarget

from cluster.local import RayEndpoints, start_ray
from cluster.ports import free_port
from cluster.serve_internals import serve_applications
from deployments.apps.builders import (
    GRPC_APP_NAME,
    METRICS_APP_NAME,
    SERVER_APP_NAME,
    SERVER_DEPLOYMENT_NAME,
    front_applications,
)
from deployments.apps.handles import HOST_APP_NAME
from deployments.apps.repository_access import CONTROLLER_DEPLOYMENT_NAME
from deployments.apps.serve_config import ACCESS_LOG_OFF
from deployments.apps.server_args import ServerAppArgs, parse_trace_config
from deployments.cli.flags import add_settings_command
from deployments.cli.settings import ALL_MODELS, CONTROLLER_TIMEOUT_S, Endpoints
from deployments.command_flag import Flag
from repo_adapter.model_state import ModelState

_STARTUP_POLL_S = 0.5
# How long a stopping server lets the replicas finish the requests they hold.
_DRAIN_TIMEOUT_S = 30.0
_DRAIN_POLL_S = 0.2

# A request for a model at zero replicas waits this long for Serve to start one (Triton has no
# scale to zero): a replica's start takes longer than a load into a running replica.
DEFAULT_SCALE_FROM_ZERO_TIMEOUT_S = 120.0
# Serve's gRPC ingress serves Triton's service: its replicas' methods answer its RPCs.
TRITON_SERVICER = "tritonclient.grpc.service_pb2_grpc.add_GRPCInferenceServiceServicer_to_server"


class ServeSettings(BaseModel):
    """What ``rayton serve`` is given: the server application's args, the endpoints, and the
    Ray cluster it runs on. Every flag of ``rayton serve`` is one of these fields (or of the
    nested ones)."""

    model_config = ConfigDict(extra="forbid")
    server: ServerAppArgs
    trace_config: Annotated[list[str], Flag(metavar="[triton,]SETTING=VALUE")] = Field(
        default_factory=list,
        description="request tracing as Triton: level=TIMESTAMPS|TENSORS|OFF (repeatable), "
        "rate=N (every N-th request), count=N (-1: no limit), triton,file=PATH, "
        "triton,log-frequency=N (N traces per PATH.<i>; 0: all in PATH)",
    )
    address: Annotated[str | None, Flag()] = Field(
        None, description="join this Ray cluster (default: start one)"
    )
    proxy_location: Annotated[Literal["EveryNode", "HeadOnly"], Flag()] = Field(
        "EveryNode",
        description="Serve's proxies (HTTP ingress) on every node, or on the head node only "
        "(for nodes that share one address, as `rayton cluster` starts them)",
    )
    grpc_ingress: Annotated[Literal["auto", "haproxy", "frontend"], Flag()] = Field(
        "auto",
        description="how gRPC reaches the models: 'haproxy' routes each ModelInfer by its model "
        "name straight to the model's replicas (Serve's gRPC ingress; needs a cluster rayton "
        "starts and gRPC on the HTTP host), 'frontend' sends every call through rayton's gRPC "
        "replica and a deployment handle; 'auto' (default): haproxy where possible",
    )
    scale_from_zero_timeout_secs: Annotated[float | None, Flag()] = Field(
        None,
        gt=0,
        description="how long a request to a model at zero replicas (AUTOSCALING_CONFIG "
        "min_replicas 0) waits for Serve to start one before it is answered UNAVAILABLE "
        f"(default {DEFAULT_SCALE_FROM_ZERO_TIMEOUT_S:g}; a cluster rayton starts: on your own "
        "cluster, set Serve's http_options.request_timeout_s)",
    )
    dashboard_port: Annotated[int, Flag()] = 8265
    endpoints: Endpoints = Field(default_factory=Endpoints)

    @model_validator(mode="before")
    @classmethod
    def _server_deploys_the_models_and_traces(cls, data: Any) -> Any:
        """The server's controller deploys the models itself, and ``--trace-config`` sets its
        trace fields (a ``server`` given as a dict; an instance is taken as it is)."""
        if isinstance(data, dict) and isinstance(data.get("server"), dict):
            trace_fields = parse_trace_config(data.get("trace_config", []))
            data = {**data, "server": {**data["server"], "deploy_models": True, **trace_fields}}
        return data

    @model_validator(mode="after")
    def _startup_models_as_triton_checks_them(self) -> ServeSettings:
        startup = self.server.load_models
        if startup and self.server.model_control_mode != "explicit":
            raise ValueError(
                "Use of '--load-model' requires setting '--model-control-mode=explicit' as well."
            )
        if startup and ALL_MODELS in startup and len(startup) > 1:
            raise ValueError(
                "Wildcard model name '*' must be the ONLY startup model if specified at all."
            )
        return self

    @model_validator(mode="after")
    def _held_requests_bounded_where_rayton_owns_the_proxy(self) -> ServeSettings:
        if self.address and self.scale_from_zero_timeout_secs is not None:
            raise ValueError(
                "--scale-from-zero-timeout-secs sets the Serve proxy of a cluster rayton "
                "starts; a joined cluster's proxy takes Serve's http_options.request_timeout_s"
            )
        return self

    def held_request_timeout_s(self) -> float | None:
        """How long Serve's proxy holds a request (None: Serve's default, no bound). Only in
        a cluster rayton starts, where the proxy is HAProxy's fallback and sees no other
        requests than those for a model without a running replica."""
        if self.address:
            return None
        return self.scale_from_zero_timeout_secs or DEFAULT_SCALE_FROM_ZERO_TIMEOUT_S

    @model_validator(mode="after")
    def _haproxy_ingress_where_it_can_be(self) -> ServeSettings:
        problem = self.grpc_ingress_problem()
        if self.grpc_ingress == "haproxy" and problem:
            raise ValueError(f"--grpc-ingress haproxy: {problem}")
        return self

    def grpc_ingress_problem(self) -> str:
        """Why HAProxy cannot carry this server's gRPC ("" when it can): it binds gRPC on the
        HTTP host, and only a cluster rayton starts runs rayton's HAProxy wrapper."""
        endpoints = self.endpoints
        if not endpoints.grpc_port:
            return "the gRPC endpoint is off (--grpc-port 0)"
        if self.address:
            return "a joined cluster's HAProxy is not rayton's (--address)"
        if (endpoints.grpc_host or endpoints.http_host) != endpoints.http_host:
            return "Serve's HAProxy binds gRPC on the HTTP host (--grpc-host differs)"
        return ""

    @property
    def grpc_routed(self) -> bool:
        """Whether HAProxy routes gRPC to the models' replicas (else rayton's gRPC frontend
        answers on the public port)."""
        return self.grpc_ingress != "frontend" and not self.grpc_ingress_problem()


def add_parser(commands: argparse._SubParsersAction) -> None:
    add_settings_command(
        commands,
        "serve",
        "serve a model repository on a local or existing cluster",
        ServeSettings,
        run,
    )


def run(settings: ServeSettings) -> int:
    busy = _busy_port(settings)
    if busy:
        print(f"error: {busy}", file=sys.stderr)
        return 1
    http_host = settings.endpoints.http_host
    # Behind HAProxy, rayton's gRPC frontend answers the other RPCs on a port of its own.
    frontend_port = free_port(http_host) if settings.grpc_routed else None
    routing = None
    if frontend_port is not None:
        routing = (f"{http_host}:{frontend_port}", HOST_APP_NAME)
    endpoints = start_ray(
        settings.address, http_host, settings.dashboard_port, grpc_routing=routing
    )
    # After ray.init (which installs its own handlers), before deploying: a signal while
    # deploying must still shut down what was started.
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    code = 0
    try:
        if not stop.is_set():
            _deploy(settings, frontend_port)
        if not stop.is_set() and _wait_for_models(stop):
            _print_endpoints(settings, endpoints)
            stop.wait()
    except StartupError as err:
        print(f"error: {err}", file=sys.stderr, flush=True)
        code = 1
    finally:
        print("shutting down...", flush=True)
        _drain()
        if settings.address:  # a cluster of others: leave it without Serve, as it was
            serve.shutdown()
        # A cluster of our own goes down whole with ray.shutdown; serve.shutdown first would
        # kill the Serve controller under its own pending calls (raylet errors on a clean stop).
        ray.shutdown()
    return code


def _busy_port(settings: ServeSettings) -> str:
    """The first endpoint port already taken on this machine, as one line naming the flag
    ("" when all are free). Only for a cluster rayton starts here: a joined cluster's nodes
    bind their own. Ray's dashboard moves to a free port by itself."""
    if settings.address:
        return ""
    endpoints = settings.endpoints
    wanted = [("--http-port", endpoints.http_host, endpoints.http_port)]
    grpc = endpoints.grpc_endpoint()
    if grpc:
        wanted.append(("--grpc-port", str(grpc["grpc_host"]), int(grpc["grpc_port"])))
    metrics = endpoints.metrics_app_args()
    if metrics is not None:
        wanted.append(("--metrics-port", metrics.metrics_host, metrics.metrics_port))
    for flag, host, port in wanted:
        with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as servers bind
            try:
                probe.bind((host, port))
            except OSError as err:
                return f"{host}:{port} is not free ({err.strerror}): choose another {flag}"
    return ""


def _grpc_frontend(settings: ServeSettings, frontend_port: int | None) -> dict[str, object]:
    """plan_applications keywords for rayton's gRPC frontend: the public endpoint, or behind
    HAProxy (``frontend_port``) its own port on the HTTP host."""
    if frontend_port is None:
        return settings.endpoints.grpc_endpoint()
    return {"grpc_port": frontend_port, "grpc_host": settings.endpoints.http_host}


def _drain() -> None:
    """Delete the model applications first, so their replicas finish the requests they hold
    (Serve's graceful shutdown) while the proxies and the gRPC frontend still carry the
    responses; then the front applications; then Serve can stop."""
    try:
        names = list(serve_applications())
        front = [n for n in names if n in (SERVER_APP_NAME, GRPC_APP_NAME, METRICS_APP_NAME)]
        deadline = time.monotonic() + _DRAIN_TIMEOUT_S
        for group in ([n for n in names if n not in front], front):
            for name in group:
                serve.delete(name, _blocking=False)
            while time.monotonic() < deadline and set(group) & set(serve_applications()):
                time.sleep(_DRAIN_POLL_S)
    except Exception as err:  # never let draining stop the shutdown itself
        print(f"draining failed ({err}); stopping anyway", file=sys.stderr, flush=True)


def _deploy(settings: ServeSettings, frontend_port: int | None) -> None:
    """The server (with the repository controller) and gRPC applications; the controller
    then deploys the models."""
    endpoints = settings.endpoints
    plans = front_applications(
        settings.server,
        **_grpc_frontend(settings, frontend_port),
        metrics=endpoints.metrics_app_args(),
    )
    held = settings.held_request_timeout_s()
    timeout = {} if held is None else {"request_timeout_s": held}
    grpc_options = None
    if frontend_port is not None:  # Serve's gRPC ingress on the public port, behind HAProxy
        grpc_options = {
            "port": endpoints.grpc_port,
            "grpc_servicer_functions": [TRITON_SERVICER],
            **timeout,
        }
    serve.start(
        proxy_location=settings.proxy_location,
        http_options={"host": endpoints.http_host, "port": endpoints.http_port, **timeout},
        grpc_options=grpc_options,
    )
    targets = [
        RunTarget(
            plan.build(),
            name=plan.name,
            route_prefix=plan.route_prefix,
            logging_config=ACCESS_LOG_OFF,
        )
        for plan in plans
    ]
    try:
        serve.run_many(targets, wait_for_applications_running=True)
    except RuntimeError as err:  # Serve's message names the application, not the reason
        raise StartupError(f"{err}\n{_deploy_failures()}") from None


class StartupError(Exception):
    """A front application failed to deploy (a port in use, ...): the reasons Serve gave."""


def _deploy_failures() -> str:
    lines = []
    for app_name, app in serve_applications().items():
        for name, deployment in app.deployments.items():
            if deployment.message and deployment.status != "HEALTHY":
                lines.append(f"  {app_name}/{name}: {deployment.message.strip()}")
    return "\n".join(lines)


def _wait_for_models(stop: threading.Event) -> bool:
    """Wait until the controller's start-up loads finished; False when asked to stop."""
    controller = serve.get_deployment_handle(CONTROLLER_DEPLOYMENT_NAME, app_name=SERVER_APP_NAME)
    print("loading models...", flush=True)
    while not stop.is_set():
        if controller.started.remote().result(timeout_s=CONTROLLER_TIMEOUT_S):
            return True
        stop.wait(_STARTUP_POLL_S)
    return False


def _print_endpoints(settings: ServeSettings, ray_endpoints: RayEndpoints) -> None:
    endpoints = settings.endpoints
    print("\nrayton is serving", settings.server.model_repository)
    for name, state in _served_states().items():
        print(f"  {name:32s} {state}")
    print(f"\n  HTTP (KServe v2 / Triton):  http://{endpoints.http_host}:{endpoints.http_port}")
    grpc = endpoints.grpc_endpoint()
    if grpc:
        path = "HAProxy -> model replicas" if settings.grpc_routed else "rayton's gRPC frontend"
        print(f"  gRPC (Triton):              {grpc['grpc_host']}:{grpc['grpc_port']} ({path})")
    metrics = endpoints.metrics_app_args()
    if metrics is not None:
        print(
            f"  Metrics (Prometheus):       "
            f"http://{metrics.metrics_host}:{metrics.metrics_port}/metrics"
        )
    if ray_endpoints.dashboard:
        print(f"  Ray dashboard:              {ray_endpoints.dashboard}")
        if ray_endpoints.token_auth:
            print(f"  {'':28s}(Ray token auth is on: the dashboard asks for the token,")
            print(f"  {'':28s} which `ray get-auth-token` prints)")
    if ray_endpoints.address:
        print(f"  Ray cluster (--address):    {ray_endpoints.address}")
    print("\nCtrl-C to stop.", flush=True)


def _served_states() -> dict[str, str]:
    """Each model's state from the server's repository index: what clients will see."""
    server = serve.get_deployment_handle(SERVER_DEPLOYMENT_NAME, app_name=SERVER_APP_NAME)
    index = server.repository_index.remote().result(timeout_s=CONTROLLER_TIMEOUT_S)
    problems: dict[str, list[str]] = {}
    for entry in index:
        found = problems.setdefault(entry["name"], [])
        if "state" not in entry:
            found.append("not loaded")  # in the repository (explicit mode)
            continue
        if entry["state"] != ModelState.READY:
            version = f"version {entry['version']}: " if "version" in entry else ""
            found.append(f"{entry['state']}: {version}{entry.get('reason', '')}")
    return {name: "; ".join(found) or ModelState.READY.value for name, found in problems.items()}
