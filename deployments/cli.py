"""The ``rayton`` command: build a Serve config from a repository, or serve it directly."""

from __future__ import annotations

import argparse
import logging
import signal
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from deployments.apps.builders import (
    DEFAULT_GRPC_PORT,
    GRPC_APP_NAME,
    METRICS_APP_NAME,
    SERVER_APP_NAME,
    SERVER_DEPLOYMENT_NAME,
    front_applications,
    plan_applications,
)
from deployments.apps.repository_access import CONTROLLER_DEPLOYMENT_NAME
from deployments.apps.serve_config import ACCESS_LOG_OFF, serve_config, write_serve_config
from deployments.apps.server_args import (
    DEFAULT_LOAD_TIMEOUT_S,
    DEFAULT_POLL_SECS,
    ServerAppArgs,
    parse_trace_config,
)
from deployments.core.status import format_status
from deployments.http.body_limit import DEFAULT_MAX_INPUT_SIZE
from deployments.http.server_routes import STATUS_PATH
from deployments.metrics.options import DEFAULT_INTERVAL_MS, DEFAULT_METRICS_PORT, MetricsAppArgs

_INDEX_TIMEOUT_S = 60.0
_STARTUP_POLL_S = 0.5
# How long a stopping server lets the replicas finish the requests they hold.
_DRAIN_TIMEOUT_S = 30.0
_DRAIN_POLL_S = 0.2


GRPC_AUTO, GRPC_HAPROXY, GRPC_FRONTEND = "auto", "haproxy", "frontend"
# Serve's gRPC ingress serves Triton's service: its replicas' methods answer its RPCs.
TRITON_SERVICER = "tritonclient.grpc.service_pb2_grpc.add_GRPCInferenceServiceServicer_to_server"


def _add_common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--http-host", default="127.0.0.1", help="HTTP bind address")
    parser.add_argument("--http-port", type=int, default=8000)
    parser.add_argument(
        "--grpc-port",
        type=int,
        default=DEFAULT_GRPC_PORT,
        help=f"Triton gRPC port (default {DEFAULT_GRPC_PORT}; 0 turns the gRPC endpoint off)",
    )
    parser.add_argument(
        "--grpc-host", default=None, help="gRPC bind address (default: the HTTP host)"
    )
    parser.add_argument(
        "--http-max-input-size",
        type=int,
        default=DEFAULT_MAX_INPUT_SIZE,
        metavar="BYTES",
        help="largest inference request body accepted (default 64 MiB, as Triton)",
    )
    parser.add_argument(
        "--metrics-port",
        type=int,
        default=DEFAULT_METRICS_PORT,
        help=f"Prometheus /metrics port (default {DEFAULT_METRICS_PORT})",
    )
    parser.add_argument(
        "--metrics-address", default=None, help="metrics bind address (default: the HTTP host)"
    )
    for what in ("", "gpu-", "cpu-"):
        parser.add_argument(
            f"--allow-{what}metrics",
            choices=("true", "false"),
            default="true",
            help=f"false turns off the {what.rstrip('-').upper() or 'metrics'} "
            + ("endpoint" if not what else "metrics"),
        )
    parser.add_argument(
        "--metrics-interval-ms",
        type=int,
        default=DEFAULT_INTERVAL_MS,
        help=f"how often CPU and GPU gauges are sampled (default {DEFAULT_INTERVAL_MS})",
    )
    parser.add_argument(
        "--metrics-config",
        action="append",
        default=[],
        metavar="SETTING=VALUE",
        help="Triton's metrics settings (counter_latencies=false; repeatable)",
    )
    parser.add_argument(
        "--load-model",
        action="append",
        default=None,
        metavar="NAME",
        help="serve: load these models at start-up (explicit mode); build: only these models "
        "(repeatable; '*' for all)",
    )


def _selected_models(args: argparse.Namespace) -> list[str] | None:
    if not args.load_model or "*" in args.load_model:
        return None
    return args.load_model


def _check_startup_models(args: argparse.Namespace) -> str:
    """Triton's start-up checks of ``--load-model`` ("" when fine)."""
    if not args.load_model:
        return ""
    if args.model_control_mode != "explicit":
        return "Use of '--load-model' requires setting '--model-control-mode=explicit' as well."
    if "*" in args.load_model and len(args.load_model) > 1:
        return "Wildcard model name '*' must be the ONLY startup model if specified at all."
    return ""


def _busy_port(args: argparse.Namespace, metrics: MetricsAppArgs | None) -> str:
    """The first endpoint port already taken on this machine, as one line naming the flag
    ("" when all are free). Only for a cluster rayton starts here: a joined cluster's nodes
    bind their own. Ray's dashboard moves to a free port by itself."""
    if args.address:
        return ""
    wanted = [("--http-port", args.http_host, args.http_port)]
    grpc = _grpc(args)
    if grpc:
        wanted.append(("--grpc-port", str(grpc["grpc_host"]), int(grpc["grpc_port"])))
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


def _grpc(args: argparse.Namespace) -> dict[str, object]:
    """plan_applications keywords for the gRPC endpoint (none when --grpc-port 0)."""
    if not args.grpc_port:
        return {}
    return {"grpc_port": args.grpc_port, "grpc_host": args.grpc_host or args.http_host}


def _grpc_ingress_problem(args: argparse.Namespace) -> str:
    """Why HAProxy cannot carry this server's gRPC ("" when it can): it binds gRPC on the
    HTTP host, and only a cluster rayton starts runs rayton's HAProxy wrapper."""
    if not args.grpc_port:
        return "the gRPC endpoint is off (--grpc-port 0)"
    if args.address:
        return "a joined cluster's HAProxy is not rayton's (--address)"
    if (args.grpc_host or args.http_host) != args.http_host:
        return "Serve's HAProxy binds gRPC on the HTTP host (--grpc-host differs)"
    return ""


def _choose_grpc_ingress(args: argparse.Namespace) -> str:
    """Set ``args.grpc_routed`` and, when routed, ``args.grpc_frontend_port`` (the gRPC
    frontend's own port behind HAProxy); returns a usage error or ""."""
    problem = _grpc_ingress_problem(args)
    args.grpc_routed = args.grpc_ingress != GRPC_FRONTEND and not problem
    if args.grpc_ingress == GRPC_HAPROXY and problem:
        return f"--grpc-ingress haproxy: {problem}"
    if args.grpc_routed:
        from cluster.local import free_port

        args.grpc_frontend_port = free_port(args.http_host)
    return ""


def _grpc_frontend(args: argparse.Namespace) -> dict[str, object]:
    """plan_applications keywords for rayton's gRPC frontend: the public endpoint, or behind
    HAProxy its own port on the same host."""
    if not getattr(args, "grpc_routed", False):
        return _grpc(args)
    return {"grpc_port": args.grpc_frontend_port, "grpc_host": args.http_host}


def _metrics(args: argparse.Namespace) -> MetricsAppArgs | None:
    """The metrics application's settings (None with --allow-metrics false).

    Raises:
        ValueError: a setting Triton would refuse (the message says which).
    """
    if args.allow_metrics == "false":
        return None
    try:
        return MetricsAppArgs(
            metrics_host=args.metrics_address or args.http_host,
            metrics_port=args.metrics_port,
            allow_gpu_metrics=args.allow_gpu_metrics == "true",
            allow_cpu_metrics=args.allow_cpu_metrics == "true",
            metrics_interval_ms=args.metrics_interval_ms,
            metrics_config=args.metrics_config,
        )
    except ValidationError as err:
        raise ValueError("; ".join(e["msg"] for e in err.errors())) from None


def _trace_fields(args: argparse.Namespace) -> dict[str, Any]:
    """The server's start-up trace settings from ``--trace-config`` (checked before Ray starts).

    Raises:
        ValueError: a setting Triton would refuse, or tracing without a trace file.
    """
    fields = parse_trace_config(args.trace_config)
    try:
        ServerAppArgs(model_repository=args.model_repository, deploy_models=True, **fields)
    except ValidationError as err:
        raise ValueError("; ".join(e["msg"] for e in err.errors())) from None
    return fields


def cmd_build(args: argparse.Namespace) -> int:
    try:
        metrics = _metrics(args)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    plans, scanned = plan_applications(
        args.model_repository,
        _selected_models(args),
        **_grpc(args),
        metrics=metrics,
        http_max_input_size=args.http_max_input_size,
    )

    config = serve_config(plans, http_host=args.http_host, http_port=args.http_port)
    header = (
        f"# Generated by `rayton build {args.model_repository}`: serves it with\n"
        f"#   serve run {args.output}\n"
        "# Override any model's deployment options (num_replicas, autoscaling_config,\n"
        "# ray_actor_options, max_ongoing_requests) under its application's `deployments`.\n"
    )
    write_serve_config(Path(args.output), config, header)
    _print_scan(scanned, args.output)
    return 0


def _print_scan(scanned: dict, output: str) -> None:
    """Each model's state as the written config will serve it, then where it went."""
    for name, model in scanned.items():
        state = "READY" if model.available else f"UNAVAILABLE: {model.error}"
        print(f"{name:32s} {state}")
    print(f"wrote {output}")


def cmd_serve(args: argparse.Namespace) -> int:
    problem = _check_startup_models(args)
    metrics = None
    try:
        metrics = _metrics(args)
        args.trace_fields = _trace_fields(args)
    except ValueError as err:
        problem = problem or str(err)
    problem = problem or _choose_grpc_ingress(args)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    busy = _busy_port(args, metrics)
    if busy:
        print(f"error: {busy}", file=sys.stderr)
        return 1
    from ray import serve
    from ray.serve.api import RunTarget

    from cluster.local import start_ray
    from deployments.apps.handles import HOST_APP_NAME

    routing = None
    if args.grpc_routed:
        routing = (f"{args.http_host}:{args.grpc_frontend_port}", HOST_APP_NAME)
    endpoints = start_ray(args.address, args.http_host, args.dashboard_port, grpc_routing=routing)
    # After ray.init (which installs its own handlers), before deploying: a signal while
    # deploying must still shut down what was started.
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    code = 0
    try:
        if not stop.is_set():
            _deploy(args, metrics, serve, RunTarget)
        if not stop.is_set() and _wait_for_models(stop):
            _print_endpoints(args, metrics, endpoints)
            stop.wait()
    except StartupError as err:
        print(f"error: {err}", file=sys.stderr, flush=True)
        code = 1
    finally:
        print("shutting down...", flush=True)
        _drain(serve)
        if args.address:  # a cluster of others: leave it without Serve, as it was
            serve.shutdown()
        # A cluster of our own goes down whole with ray.shutdown; serve.shutdown first would
        # kill the Serve controller under its own pending calls (raylet errors on a clean stop).
        import ray

        ray.shutdown()
    return code


def _drain(serve) -> None:
    """Delete the model applications first, so their replicas finish the requests they hold
    (Serve's graceful shutdown) while the proxies and the gRPC frontend still carry the
    responses; then the front applications; then Serve can stop."""
    try:
        names = list(serve.status().applications)
        front = [n for n in names if n in (SERVER_APP_NAME, GRPC_APP_NAME, METRICS_APP_NAME)]
        deadline = time.monotonic() + _DRAIN_TIMEOUT_S
        for group in ([n for n in names if n not in front], front):
            for name in group:
                serve.delete(name, _blocking=False)
            while time.monotonic() < deadline and set(group) & set(serve.status().applications):
                time.sleep(_DRAIN_POLL_S)
    except Exception as err:  # never let draining stop the shutdown itself
        print(f"draining failed ({err}); stopping anyway", file=sys.stderr, flush=True)


def _deploy(args: argparse.Namespace, metrics: MetricsAppArgs | None, serve, run_target) -> None:
    """The server (with the repository controller) and gRPC applications; the controller
    then deploys the models."""
    server_args = ServerAppArgs(
        model_repository=args.model_repository,
        model_control_mode=args.model_control_mode,
        load_models=args.load_model,
        repository_poll_secs=args.repository_poll_secs,
        model_load_timeout_secs=args.model_load_timeout_secs,
        strict_readiness=args.strict_readiness == "true",
        deploy_models=True,
        cpu_models=args.cpu_models,
        model_file_override_dir=args.model_file_override_dir,
        http_max_input_size=args.http_max_input_size,
        log_file=args.log_file,
        log_info=args.log_info == "true",
        log_warning=args.log_warning == "true",
        log_error=args.log_error == "true",
        log_verbose_level=args.log_verbose,
        log_format=args.log_format,
        **args.trace_fields,
    )
    plans = front_applications(server_args, **_grpc_frontend(args), metrics=metrics)
    grpc_options = None
    if args.grpc_routed:  # Serve's gRPC ingress on the public port, behind HAProxy
        grpc_options = {"port": args.grpc_port, "grpc_servicer_functions": [TRITON_SERVICER]}
    serve.start(
        proxy_location=args.proxy_location,
        http_options={"host": args.http_host, "port": args.http_port},
        grpc_options=grpc_options,
    )
    targets = [
        run_target(
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
        raise StartupError(f"{err}\n{_deploy_failures(serve)}") from None


class StartupError(Exception):
    """A front application failed to deploy (a port in use, ...): the reasons Serve gave."""


def _deploy_failures(serve) -> str:
    lines = []
    for app_name, app in serve.status().applications.items():
        for name, deployment in app.deployments.items():
            if deployment.message and str(getattr(deployment.status, "value", "")) != "HEALTHY":
                lines.append(f"  {app_name}/{name}: {deployment.message.strip()}")
    return "\n".join(lines)


def _wait_for_models(stop: threading.Event) -> bool:
    """Wait until the controller's start-up loads finished; False when asked to stop."""
    from ray import serve

    controller = serve.get_deployment_handle(CONTROLLER_DEPLOYMENT_NAME, app_name=SERVER_APP_NAME)
    print("loading models...", flush=True)
    while not stop.is_set():
        if controller.started.remote().result(timeout_s=_INDEX_TIMEOUT_S):
            return True
        stop.wait(_STARTUP_POLL_S)
    return False


def _print_endpoints(
    args: argparse.Namespace, metrics: MetricsAppArgs | None, endpoints: dict[str, str]
) -> None:
    print("\nrayton is serving", args.model_repository)
    for name, state in _served_states().items():
        print(f"  {name:32s} {state}")
    print(f"\n  HTTP (KServe v2 / Triton):  http://{args.http_host}:{args.http_port}")
    grpc = _grpc(args)
    if grpc:
        path = "HAProxy -> model replicas" if args.grpc_routed else "rayton's gRPC frontend"
        print(f"  gRPC (Triton):              {grpc['grpc_host']}:{grpc['grpc_port']} ({path})")
    if metrics is not None:
        print(
            f"  Metrics (Prometheus):       "
            f"http://{metrics.metrics_host}:{metrics.metrics_port}/metrics"
        )
    if endpoints["dashboard"]:
        print(f"  Ray dashboard:              {endpoints['dashboard']}")
        if endpoints.get("token_auth"):
            print(f"  {'':28s}(Ray token auth is on: the dashboard asks for the token,")
            print(f"  {'':28s} which `ray get-auth-token` prints)")
    if endpoints["address"]:
        print(f"  Ray cluster (--address):    {endpoints['address']}")
    print("\nCtrl-C to stop.", flush=True)


def _served_states() -> dict[str, str]:
    """Each model's state from the server's repository index: what clients will see."""
    from ray import serve

    server = serve.get_deployment_handle(SERVER_DEPLOYMENT_NAME, app_name=SERVER_APP_NAME)
    index = server.repository_index.remote().result(timeout_s=_INDEX_TIMEOUT_S)
    problems: dict[str, list[str]] = {}
    for entry in index:
        found = problems.setdefault(entry["name"], [])
        if "state" not in entry:
            found.append("not loaded")  # in the repository (explicit mode)
            continue
        if entry["state"] != "READY":
            version = f"version {entry['version']}: " if "version" in entry else ""
            found.append(f"{entry['state']}: {version}{entry.get('reason', '')}")
    return {name: "; ".join(found) or "READY" for name, found in problems.items()}


def cmd_status(args: argparse.Namespace) -> int:
    """Models, versions, states and replicas of a running server, from its controller."""
    import json

    try:
        document = _fetch_status(args)
    except (OSError, RuntimeError, ValueError) as err:
        where = f"the Ray cluster at {args.address}" if args.address else f"http://{args.url}"
        print(f"error: no rayton server answered at {where}: {err}", file=sys.stderr)
        return 1
    print(json.dumps(document, indent=2) if args.json else format_status(document), end="")
    return 0


def _fetch_status(args: argparse.Namespace) -> dict:
    import json
    import urllib.error
    import urllib.request

    if args.address:
        import ray
        from ray import serve

        from cluster.local import loopback_kept

        with loopback_kept(args.address) as node_ip:
            ray.init(
                address=args.address,
                _node_ip_address=node_ip,
                logging_level="ERROR",
                log_to_driver=False,
            )
        try:
            controller = serve.get_deployment_handle(
                CONTROLLER_DEPLOYMENT_NAME, app_name=SERVER_APP_NAME
            )
            return controller.status.remote().result(timeout_s=_INDEX_TIMEOUT_S)
        except KeyError:
            raise RuntimeError("it runs no rayton server application") from None
        finally:
            ray.shutdown()
    url = f"http://{args.url}{STATUS_PATH}"
    try:
        with urllib.request.urlopen(url, timeout=_INDEX_TIMEOUT_S) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as err:
        raise RuntimeError(f"{err.code} {err.read().decode(errors='replace')}") from None


def cmd_kuberay(args: argparse.Namespace) -> int:
    from cluster.kuberay import (
        GRPC_PORT,
        HTTP_PORT,
        METRICS_PORT,
        POD_HOST,
        KubeRaySpec,
        in_cluster_config,
        rayservice,
        worker_node_resources,
        write_manifest,
    )

    spec = KubeRaySpec(
        name=args.name,
        image=args.image,
        mount_path=args.mount_path,
        claim_name=args.pvc or None,
        workers=args.workers,
        max_workers=args.max_workers,
        gpus_per_worker=args.gpus_per_worker,
    )
    repository = str(Path(args.model_repository))
    if not Path(repository).is_dir():
        print(f"error: model repository '{repository}' is not a directory", file=sys.stderr)
        return 2
    mounted = f"{spec.mount_path.rstrip('/')}/{Path(repository).resolve().name}"
    plans, scanned = plan_applications(
        repository,
        _selected_models(args),
        grpc_port=GRPC_PORT,
        grpc_host=POD_HOST,
        metrics=MetricsAppArgs(metrics_host=POD_HOST, metrics_port=METRICS_PORT),
        nodes=[worker_node_resources(spec)],
    )
    # One ingress pod: the gRPC frontend and the metrics endpoint run on the head, so the
    # serve Service must send every port there.
    routed = serve_config(plans, http_port=HTTP_PORT, proxy_location="HeadOnly")
    config = in_cluster_config(routed, repository, mounted)
    volume = f"claim '{spec.claim_name}'" if spec.claim_name else "an emptyDir to replace"
    header = (
        f"# Generated by `rayton kuberay {args.model_repository}`: apply with\n"
        f"#   kubectl apply -f {args.output}\n"
        f"# Every pod reads the repository at {mounted} (volume 'model-repository': {volume}).\n"
        f"# Image {spec.image}: build it with `docker build -f cluster/Dockerfile -t "
        f"{spec.image} .`\n"
    )
    write_manifest(Path(args.output), rayservice(config, spec), header)
    _print_scan(scanned, args.output)
    return 0


def cmd_cluster(args: argparse.Namespace) -> int:
    from cluster.dev_cluster import DevClusterSpec, run

    for flag in ("workers", "gpus_per_worker", "cpus_per_worker", "head_cpus"):
        if getattr(args, flag) < 0:
            print(f"error: --{flag.replace('_', '-')} must be >= 0", file=sys.stderr)
            return 2
    return run(
        DevClusterSpec(args.workers, args.gpus_per_worker, args.cpus_per_worker, args.head_cpus)
    )


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    parser = argparse.ArgumentParser(prog="rayton", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    build = sub.add_parser("build", help="write a serve_config.yaml for a model repository")
    build.add_argument("model_repository")
    build.add_argument("-o", "--output", default="serve_config.yaml")
    _add_common(build)
    build.set_defaults(func=cmd_build)

    run = sub.add_parser("serve", help="serve a model repository on a local or existing cluster")
    run.add_argument("--model-repository", required=True)
    run.add_argument(
        "--model-control-mode",
        choices=("none", "poll", "explicit"),
        default="none",
        help="none: serve the repository as it is; poll: reload what changes on disk; "
        "explicit: serve --load-model models, then what the repository API loads",
    )
    run.add_argument(
        "--repository-poll-secs",
        type=float,
        default=DEFAULT_POLL_SECS,
        help=f"poll mode: seconds between repository scans (default {DEFAULT_POLL_SECS:g})",
    )
    run.add_argument(
        "--model-load-timeout-secs",
        type=float,
        default=DEFAULT_LOAD_TIMEOUT_S,
        help="a model whose replicas are not all up by then is UNAVAILABLE "
        f"(default {DEFAULT_LOAD_TIMEOUT_S:g})",
    )
    run.add_argument(
        "--cpu-models",
        choices=("shared", "dedicated"),
        default="shared",
        help="shared: CPU models run together in one host application (one process holds "
        "many models, as in Triton); dedicated: each model gets its own application and one "
        "replica per instance (per-model scaling, ~150 MB per replica)",
    )
    run.add_argument(
        "--model-file-override-dir",
        default=None,
        metavar="DIR",
        help="allow repository loads with file: parameters (model files sent by the client, "
        "code included) and write them under DIR (shared storage on several nodes); refused "
        "without it",
    )
    run.add_argument(
        "--strict-readiness",
        choices=("true", "false"),
        default="true",
        help="true: /v2/health/ready fails while a model failed to load (as Triton)",
    )
    run.add_argument(
        "--log-file",
        default="",
        metavar="PATH",
        help="also write rayton's and the python models' log lines to PATH on each node",
    )
    for level in ("info", "warning", "error"):
        run.add_argument(
            f"--log-{level}", choices=("true", "false"), default="true", help=f"{level} lines"
        )
    run.add_argument(
        "--log-verbose", type=int, default=0, metavar="LEVEL", help="verbose lines when > 0"
    )
    run.add_argument("--log-format", choices=("default", "ISO8601"), default="default")
    run.add_argument(
        "--trace-config",
        action="append",
        default=[],
        metavar="[triton,]SETTING=VALUE",
        help="request tracing as Triton: level=TIMESTAMPS|TENSORS|OFF (repeatable), rate=N "
        "(every N-th request), count=N (-1: no limit), triton,file=PATH, "
        "triton,log-frequency=N (N traces per PATH.<i>; 0: all in PATH)",
    )
    run.add_argument("--address", default=None, help="join this Ray cluster (default: start one)")
    run.add_argument(
        "--proxy-location",
        choices=("EveryNode", "HeadOnly"),
        default="EveryNode",
        help="Serve's proxies (HTTP ingress) on every node, or on the head node only (for "
        "nodes that share one address, as `rayton cluster` starts them)",
    )
    run.add_argument(
        "--grpc-ingress",
        choices=(GRPC_AUTO, GRPC_HAPROXY, GRPC_FRONTEND),
        default=GRPC_AUTO,
        help="how gRPC reaches the models: 'haproxy' routes each ModelInfer by its model name "
        "straight to the model's replicas (Serve's gRPC ingress; needs a cluster rayton starts "
        "and gRPC on the HTTP host), 'frontend' sends every call through rayton's gRPC "
        "replica and a deployment handle; 'auto' (default): haproxy where possible",
    )
    run.add_argument("--dashboard-port", type=int, default=8265)
    _add_common(run)
    run.set_defaults(func=cmd_serve)

    status = sub.add_parser("status", help="models, versions, states and replicas of a server")
    status.add_argument(
        "--url", default="127.0.0.1:8000", help="HOST:PORT of the server's HTTP endpoint"
    )
    status.add_argument(
        "--address", default=None, help="ask the controller through this Ray cluster instead"
    )
    status.add_argument("--json", action="store_true", help="the status document as JSON")
    status.set_defaults(func=cmd_status)

    kuberay = sub.add_parser(
        "kuberay", help="write a KubeRay RayService manifest serving a model repository"
    )
    kuberay.add_argument("model_repository", help="the repository (scanned here)")
    kuberay.add_argument("-o", "--output", default="rayservice.yaml")
    kuberay.add_argument("--name", default="rayton", help="the RayService's name")
    kuberay.add_argument("--image", default="rayton:latest", help="an image holding rayton")
    kuberay.add_argument(
        "--mount-path", default="/models", help="where the repository's volume is mounted"
    )
    kuberay.add_argument(
        "--pvc",
        default="rayton-models",
        help="PersistentVolumeClaim holding the repository ('' to fill the volume yourself)",
    )
    kuberay.add_argument("--workers", type=int, default=1, help="worker pods at start")
    kuberay.add_argument("--max-workers", type=int, default=4, help="most worker pods")
    kuberay.add_argument("--gpus-per-worker", type=int, default=0, help="nvidia.com/gpu per pod")
    kuberay.add_argument(
        "--load-model", action="append", default=None, metavar="NAME", help="only these models"
    )
    kuberay.set_defaults(func=cmd_kuberay)

    cluster = sub.add_parser(
        "cluster",
        help="start a multi-node Ray cluster on this machine (head + workers with logical "
        "GPUs and per-GPU resources) for development; Ctrl-C stops every node",
    )
    cluster.add_argument("--workers", type=int, default=2, help="worker nodes")
    cluster.add_argument("--gpus-per-worker", type=int, default=2, help="logical GPUs per worker")
    cluster.add_argument("--cpus-per-worker", type=int, default=1, help="logical CPUs per worker")
    cluster.add_argument("--head-cpus", type=int, default=1, help="logical CPUs of the head node")
    cluster.set_defaults(func=cmd_cluster)

    from rayton_perf.cli import add_arguments as add_perf_arguments
    from rayton_perf.cli import run as run_perf

    perf = sub.add_parser("perf", help="measure a model like perf_analyzer (tritonclient aio)")
    add_perf_arguments(perf)
    perf.set_defaults(func=run_perf)

    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
