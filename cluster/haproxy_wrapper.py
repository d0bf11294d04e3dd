"""Serve's HAProxy, run through a wrapper that fixes two things Ray 2.60's config gets wrong
for rayton.

* **Listeners**: the config binds HAProxy's stats page and Prometheus exporter on every
  interface (``bind *:8404``, ``bind :9101``) whatever ``http_options.host`` says; the wrapper
  binds them on the serving address, where the frontends already are.
* **Error pages**: when no replica answers (one crashed or was killed, 502; none is up, 503; a
  timeout, 504) HAProxy sends Ray's plain-text ``Internal Server Error``, and so does Serve's
  Python proxy (HAProxy's backup server) when its call to a replica fails; the wrapper points
  those ``errorfile`` lines at a page with Triton's JSON error body and gives any other
  non-JSON 5xx of the HTTP frontend that body, so every error a client sees is
  ``{"error": ...}``.
* **A held request's timeout**: Serve's Python proxy holds a request for a model at zero
  replicas while Serve starts one, up to its ``request_timeout_s`` (``rayton serve
  --scale-from-zero-timeout-secs``), then answers a plain-text 408; the wrapper turns that
  into Triton's UNAVAILABLE (503) with a JSON body that says so.
* **gRPC routing** (when rayton's gRPC frontend is behind Serve's HAProxy): Triton's
  ``ModelInfer`` goes straight to the model's replicas (:mod:`cluster.grpc_routing`).

For a cluster rayton starts itself, Serve runs the wrapper (``RAY_SERVE_HAPROXY_BINARY_PATH``):
it edits the config file Serve passes with ``-f`` in place, then runs the real binary with the
same arguments.
"""

from __future__ import annotations

import atexit
import ipaddress
import json
import os
import shlex
import shutil
import stat
import sys
import tempfile

from cluster.grpc_routing import NO_REPLICA_ANSWERED
from cluster.serve_internals import haproxy_binary

_ERROR_PAGE = "triton-error.http"
_ERROR_BODY = "triton-error.json"
_TIMEOUT_BODY = "triton-held-timeout.json"
NO_REPLICA_STARTED = (
    "no replica of the model started within the time a request waits for one "
    "(--scale-from-zero-timeout-secs): the model is at zero replicas and Serve is starting one; "
    "retry shortly"
)
# Serve's Python proxy (HAProxy's backup server while a model has no replica) answers a failed
# replica call with a plain-text 500: give any non-JSON 5xx of the HTTP frontend Triton's body.
_JSON_RULE = (
    "http-response return status 500 content-type application/json file {body} "
    "if {{ status ge 500 }} !{{ res.hdr(content-type) -m beg application/json }}"
)
# Serve's Python proxy answers a request it held past its request_timeout_s with a plain-text
# 408 (a model at zero replicas whose replica did not start in time).
_TIMEOUT_RULE = (
    "http-response return status 503 content-type application/json file {body} "
    "if {{ status eq 408 }} !{{ res.hdr(content-type) -m beg application/json }}"
)
_WRAPPER = """#!/bin/sh
# rayton: Serve's HAProxy with its listeners on the serving address and Triton's error body
previous=""
for argument in "$@"; do
  if [ "$previous" = "-f" ]; then
    sed -i {binds}-e 's|^\\([[:space:]]*errorfile [0-9][0-9]*\\) .*$|\\1 {error_page}|' \\
      -e '/^frontend http_frontend/a\\    {json_rule}' \\
      -e '/^frontend http_frontend/a\\    {timeout_rule}' "$argument"
    {grpc_routing}
  fi
  previous="$argument"
done
exec {binary} "$@"
"""
_BIND_EDITS = (
    "-e 's/^\\([[:space:]]*bind \\)\\*:/\\1{host}:/' -e 's/^\\([[:space:]]*bind \\):/\\1{host}:/' "
)


def bindable_host(host: str) -> bool:
    """Whether HAProxy's ``bind HOST:PORT`` takes ``host`` as written (IPv4 or a name)."""
    try:
        return ipaddress.ip_address(host).version == 4
    except ValueError:
        return bool(host) and ":" not in host


def error_page() -> bytes:
    """A whole HTTP response, as HAProxy's ``errorfile`` wants it, with Triton's error body."""
    body = json.dumps({"error": NO_REPLICA_ANSWERED}).encode()
    head = (
        "HTTP/1.1 500 Internal Server Error\r\n"
        "Content-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    )
    return head.encode() + body


def _grpc_routing_step(grpc_routing: tuple[str, str] | None) -> str:
    """The wrapper's line that edits the config for Triton's gRPC routing (none without)."""
    if grpc_routing is None:
        return ""
    frontend, host_app = grpc_routing
    command = shlex.join([sys.executable, "-m", "cluster.grpc_routing", frontend, host_app])
    # A failed edit leaves gRPC unrouted but HTTP serving: say so instead of stopping HAProxy.
    return f'{command} "$argument" || echo "rayton: gRPC routing not applied" >&2'


def haproxy_state_paths() -> dict[str, str]:
    """Serve's settings for HAProxy's config file, admin and metrics sockets and server state,
    in a directory of this server's own: by default they are fixed paths under
    /tmp/haproxy-serve, where a second server on the machine would take over the first one's
    HAProxy. Short, under /tmp: Serve adds a 57-character node directory and HAProxy takes
    socket paths of at most 97."""
    directory = tempfile.mkdtemp(prefix="rayton-", dir="/tmp")
    atexit.register(shutil.rmtree, directory, True)
    return {
        "RAY_SERVE_HAPROXY_CONFIG_FILE_LOC": os.path.join(directory, "haproxy.cfg"),
        "RAY_SERVE_HAPROXY_SOCKET_PATH": os.path.join(directory, "admin.sock"),
        "RAY_SERVE_HAPROXY_METRICS_SOCKET_PATH": os.path.join(directory, "metrics.sock"),
        "RAY_SERVE_HAPROXY_SERVER_STATE_BASE": directory,
        "RAY_SERVE_HAPROXY_SERVER_STATE_FILE": os.path.join(directory, "server-state"),
    }


def haproxy_wrapper(host: str, grpc_routing: tuple[str, str] | None = None) -> str | None:
    """Path of an executable that runs Serve's HAProxy with its listeners on ``host`` (left
    alone where ``host`` is every interface or cannot be written into a bind) and Triton's
    error page; None where no HAProxy binary is installed.

    ``grpc_routing``: ``(frontend, host_app)``, the address of rayton's gRPC frontend and the
    shared host's application, when Serve's gRPC ingress is on (:mod:`cluster.grpc_routing`).
    """
    try:
        binary = haproxy_binary()
    except Exception:  # no HAProxy here: Serve reports that itself
        return None
    directory = tempfile.mkdtemp(prefix="rayton-haproxy-")
    atexit.register(shutil.rmtree, directory, True)
    page = os.path.join(directory, _ERROR_PAGE)
    with open(page, "wb") as out:
        out.write(error_page())
    body = os.path.join(directory, _ERROR_BODY)
    with open(body, "w", encoding="utf-8") as out:
        json.dump({"error": NO_REPLICA_ANSWERED}, out)
    timeout_body = os.path.join(directory, _TIMEOUT_BODY)
    with open(timeout_body, "w", encoding="utf-8") as out:
        json.dump({"error": NO_REPLICA_STARTED}, out)
    binds = _BIND_EDITS.format(host=host) if host != "0.0.0.0" and bindable_host(host) else ""
    path = os.path.join(directory, "haproxy")
    with open(path, "w", encoding="utf-8") as out:
        out.write(
            _WRAPPER.format(
                binds=binds,
                error_page=page,
                json_rule=_JSON_RULE.format(body=body),
                timeout_rule=_TIMEOUT_RULE.format(body=timeout_body),
                binary=shlex.quote(binary),
                grpc_routing=_grpc_routing_step(grpc_routing),
            )
        )
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR)
    return path
