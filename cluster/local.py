"""Starting (or joining) the Ray cluster that serves a repository."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass

from cluster.haproxy_wrapper import haproxy_state_paths, haproxy_wrapper
from cluster.ports import free_port
from cluster.serve_binds import SERVE_GRPC_HOST_ENV, SETUP_HOOK
from cluster.serve_internals import localhost_resolved_as, token_auth_enabled

# Serve's fast ingress: HAProxy in front, requests straight to replicas, user code on the
# replica's main loop. Set before Ray starts so the controller and proxies inherit them.
# Serve's HTTP request metrics (the dashboard's QPS, errors and latency per application) are
# recorded by the replicas that answer, as rayton's HTTP server keeps Serve's records, instead
# of by Serve's HAProxy manager parsing a log line per request: the same families for every
# request a replica answers, at a fraction of the CPU (BENCHMARKS.md, the HAProxy metrics).
FAST_INGRESS_ENV = {
    "RAY_SERVE_ENABLE_HA_PROXY": "1",
    "RAY_SERVE_THROUGHPUT_OPTIMIZED": "1",
    "RAY_SERVE_HAPROXY_METRICS_ENABLED": "0",
}
# Serve's calls between replicas (gRPC frontend -> model, ensemble steps, BLS) travel over gRPC
# in throughput mode, with a 4 MiB message limit by default; Triton clients send up to 2 GiB.
# Read when a Serve process imports Serve: it must be in every replica's environment.
REPLICA_MESSAGE_ENV = {"RAY_SERVE_REPLICA_GRPC_MAX_MESSAGE_LENGTH": str(2**31 - 1)}
# Ray starts worker processes at niceness 15 (batch-job friendly); serving replicas and the
# HAProxy they spawn must not lose the CPU to every other process on the node.
# Serve's replicas and routers flush their cached request metrics to Ray every 100 ms by
# default, which every idle replica pays for; Ray's metrics agent exports them on its own,
# slower schedule, so a 1 s flush shows the same (BENCHMARKS.md, the fixed cost).
# Serve's controller reconciles every deployment each 0.1 s by default: at rest that loop was
# most of the server's idle CPU; each step of a deployment change waits for it up to 0.5 s
# instead (BENCHMARKS.md, the fixed cost).
SERVING_ENV = {
    "RAY_worker_niceness": "0",
    "RAY_SERVE_METRICS_EXPORT_INTERVAL_MS": "1000",
    "RAY_SERVE_CONTROL_LOOP_INTERVAL_S": "0.5",
    **REPLICA_MESSAGE_ENV,
}


# A cluster this process starts has no load balancer in front that needs time to notice
# draining replicas: stop in seconds instead of Serve's 30 s drain period.
LOCAL_CLUSTER_ENV = {"RAY_SERVE_DIRECT_INGRESS_MIN_DRAINING_PERIOD_S": "2"}
# Serve's fast ingress takes fixed ports by default, where a second server on this machine
# (or anything else there) would clash: HAProxy's stats page and Prometheus exporter (8404,
# 9101) and its backup server, Serve's fallback proxy (8500, 9500). Free ports are picked instead
# (:mod:`cluster.ports`); a user's setting is kept.
SERVE_FIXED_PORT_SETTINGS = (
    "RAY_SERVE_HAPROXY_STATS_PORT",
    "RAY_SERVE_HAPROXY_METRICS_PORT",
    "RAY_SERVE_FALLBACK_PROXY_HTTP_PORT",
    "RAY_SERVE_FALLBACK_PROXY_GRPC_PORT",
)


def apply_serving_environment(
    fast_ingress: bool = True,
    own_cluster: bool = True,
    host: str = "127.0.0.1",
    grpc_routing: tuple[str, str] | None = None,
) -> None:
    """Set (without overriding the user's) the environment Ray's processes must start with:
    before Ray starts, so the controller, proxies and replicas inherit it.

    ``own_cluster``: a cluster this process starts (also its short draining period and
    HAProxy's listeners on ``host`` with Triton's JSON error page). ``grpc_routing``: Serve's
    gRPC ingress is on, with rayton's frontend and host there (:mod:`cluster.grpc_routing`).
    """
    settings = {**SERVING_ENV, **(FAST_INGRESS_ENV if fast_ingress else {})}
    if fast_ingress:
        # Serve's default of 4 HAProxy threads measured ~8% slower than 1 on 2 cores, where
        # they compete with the replicas they feed.
        settings["RAY_SERVE_HAPROXY_NBTHREAD"] = str(max(1, min(4, (os.cpu_count() or 2) // 2)))
    if own_cluster:
        settings.update(LOCAL_CLUSTER_ENV)
    for key, value in settings.items():
        os.environ.setdefault(key, value)
    if own_cluster and fast_ingress:
        if grpc_routing is not None:
            os.environ.setdefault(SERVE_GRPC_HOST_ENV, host)
        for port_setting in SERVE_FIXED_PORT_SETTINGS:
            os.environ.setdefault(port_setting, str(free_port(host)))
        wrapper = haproxy_wrapper(host, grpc_routing)
        if wrapper:
            os.environ.setdefault("RAY_SERVE_HAPROXY_BINARY_PATH", wrapper)
            for setting, path in haproxy_state_paths().items():
                os.environ.setdefault(setting, path)


@dataclass(frozen=True)
class RayEndpoints:
    """Where the Ray cluster a server joined or started answers ("": not known)."""

    dashboard: str  # its URL
    address: str  # the GCS, what ``--address`` and ``ray`` clients take
    token_auth: bool  # whether Ray's token authentication is on


def start_ray(
    address: str | None = None,
    host: str = "127.0.0.1",
    dashboard_port: int = 8265,
    num_cpus: int | None = None,
    fast_ingress: bool = True,
    grpc_routing: tuple[str, str] | None = None,
) -> RayEndpoints:
    """Join ``address`` or start a local cluster bound to ``host``; returns its endpoints.

    ``grpc_routing`` (a cluster of its own only): ``(frontend address, host application)``
    when Serve's gRPC ingress carries Triton's gRPC (:mod:`cluster.grpc_routing`).
    """
    import ray

    apply_serving_environment(fast_ingress, not address, host, grpc_routing)
    if address:
        # A joined cluster's workers do not inherit this environment; the job's runtime_env
        # reaches the replicas this job deploys.
        with loopback_kept(address) as node_ip:
            context = ray.init(
                address=address,
                _node_ip_address=node_ip,
                logging_level="WARNING",
                runtime_env={"env_vars": dict(REPLICA_MESSAGE_ENV)},
            )
    else:
        # "local": always a new cluster, never one that Ray's ray_current_cluster file (left by
        # `ray start`, even a dead one) or RAY_ADDRESS points at.
        context = ray.init(
            address="local",
            num_cpus=num_cpus or os.cpu_count(),
            include_dashboard=True,
            dashboard_host=host,
            dashboard_port=dashboard_port,
            _node_ip_address=host,
            logging_level="WARNING",
            # Serve's gRPC servers on ``host`` too, not every interface (cluster/serve_binds.py)
            runtime_env={"worker_process_setup_hook": SETUP_HOOK} if grpc_routing else None,
        )
    dashboard = context.dashboard_url or ""
    if dashboard and not dashboard.startswith("http"):
        dashboard = f"http://{dashboard}"
    return RayEndpoints(dashboard, context.address_info.get("address", ""), token_auth_enabled())


_LOOPBACK = ("127.0.0.1", "localhost", "::1")


@contextlib.contextmanager
def loopback_kept(address: str) -> Iterator[str | None]:
    """Join a cluster bound to loopback (``rayton cluster``) at the address given.

    Ray 2.60 rewrites a loopback address to the machine's own before connecting
    (``resolve_ip_for_localhost``), where a cluster bound to 127.0.0.1 does not listen. For a
    loopback ``address`` the rewrite is left out while joining, and the driver's node address is
    loopback too (the value yielded; None for any other address: Ray's defaults).
    """
    host = address.removeprefix("ray://").rsplit(":", 1)[0].strip("[]")
    if host not in _LOOPBACK:
        yield None
        return
    with localhost_resolved_as(lambda name: "127.0.0.1" if name in _LOOPBACK else name):
        yield "127.0.0.1"
