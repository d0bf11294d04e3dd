"""Starting (or joining) the Ray cluster that serves a repository."""

from __future__ import annotations

import os

from cluster.haproxy_wrapper import haproxy_wrapper

# Serve's fast ingress: HAProxy in front, requests straight to replicas, user code on the
# replica's main loop. Set before Ray starts so the controller and proxies inherit them.
FAST_INGRESS_ENV = {
    "RAY_SERVE_ENABLE_HA_PROXY": "1",
    "RAY_SERVE_THROUGHPUT_OPTIMIZED": "1",
}
# Serve's calls between replicas (gRPC frontend -> model, ensemble steps, BLS) travel over gRPC
# in throughput mode, with a 4 MiB message limit by default; Triton clients send up to 2 GiB.
# Read when a Serve process imports Serve: it must be in every replica's environment.
REPLICA_MESSAGE_ENV = {"RAY_SERVE_REPLICA_GRPC_MAX_MESSAGE_LENGTH": str(2**31 - 1)}
# Ray starts worker processes at niceness 15 (batch-job friendly); serving replicas and the
# HAProxy they spawn must not lose the CPU to every other process on the node.
SERVING_ENV = {"RAY_worker_niceness": "0", **REPLICA_MESSAGE_ENV}


# A cluster this process starts has no load balancer in front that needs time to notice
# draining replicas: stop in seconds instead of Serve's 30 s drain period.
LOCAL_CLUSTER_ENV = {"RAY_SERVE_DIRECT_INGRESS_MIN_DRAINING_PERIOD_S": "2"}


def start_ray(
    address: str | None = None,
    host: str = "127.0.0.1",
    dashboard_port: int = 8265,
    num_cpus: int | None = None,
    fast_ingress: bool = True,
) -> dict[str, str]:
    """Join ``address`` or start a local cluster bound to ``host``; returns its endpoints."""
    import ray

    settings = {**SERVING_ENV, **(FAST_INGRESS_ENV if fast_ingress else {})}
    if fast_ingress:
        # Serve's default of 4 HAProxy threads measured ~8% slower than 1 on 2 cores, where
        # they compete with the replicas they feed.
        settings["RAY_SERVE_HAPROXY_NBTHREAD"] = str(max(1, min(4, (os.cpu_count() or 2) // 2)))
    for key, value in settings.items():
        os.environ.setdefault(key, value)
    if address:
        # A joined cluster's workers do not inherit this environment; the job's runtime_env
        # reaches the replicas this job deploys.
        context = ray.init(
            address=address,
            logging_level="WARNING",
            runtime_env={"env_vars": dict(REPLICA_MESSAGE_ENV)},
        )
    else:
        for key, value in LOCAL_CLUSTER_ENV.items():
            os.environ.setdefault(key, value)
        # HAProxy's stats and exporter on the serving address, Triton's JSON error page
        wrapper = haproxy_wrapper(host) if fast_ingress else None
        if wrapper:
            os.environ.setdefault("RAY_SERVE_HAPROXY_BINARY_PATH", wrapper)
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
        )
    dashboard = context.dashboard_url or ""
    if dashboard and not dashboard.startswith("http"):
        dashboard = f"http://{dashboard}"
    return {
        "dashboard": dashboard,
        "address": context.address_info.get("address", ""),
        "token_auth": "on" if token_auth_enabled() else "",
    }


def token_auth_enabled() -> bool:
    """Whether this cluster requires Ray's token (Ray 2.60's default for a new local cluster,
    ``RAY_AUTH_MODE=disabled`` turns it off): the dashboard and ``ray`` clients need it."""
    try:
        from ray._private.authentication.authentication_utils import is_token_auth_enabled
    except ImportError:  # a Ray without token authentication
        return False
    return is_token_auth_enabled()
