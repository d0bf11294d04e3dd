"""Serve's gRPC servers bound on the serving address instead of every interface.

With Serve's gRPC ingress on, each ingress replica runs a gRPC server for HAProxy (ports
40000-41000) and the head's fallback proxy another (9500). Ray 2.60 binds both on ``[::]``
whatever ``http_options.host`` says (its HTTP servers follow the host), so a server bound to
127.0.0.1 would answer inference from the network. Serve looks its bind helper up at call time
(``ray.serve._private.default_impl.add_grpc_address``); this replaces it in a cluster rayton
starts, from Ray's ``worker_process_setup_hook`` (run in every worker process, Serve's proxy and
replicas included), with one that binds on the host in :data:`SERVE_GRPC_HOST_ENV`.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from cluster.serve_internals import wrap_serve_grpc_bind

SERVE_GRPC_HOST_ENV = "RAYTON_SERVE_GRPC_HOST"
SETUP_HOOK = "cluster.serve_binds.bind_serve_grpc_on_serving_host"
_ANY_INTERFACE = "[::]:"


def bound_address(address: str, host: str) -> str:
    """``address`` with Serve's every-interface host replaced by ``host``."""
    if not address.startswith(_ANY_INTERFACE):
        return address
    literal = f"[{host}]" if ":" in host else host
    return f"{literal}:{address.removeprefix(_ANY_INTERFACE)}"


def bind_serve_grpc_on_serving_host() -> None:
    """Ray's worker setup hook: bind Serve's gRPC servers on :data:`SERVE_GRPC_HOST_ENV`."""
    host = os.environ.get(SERVE_GRPC_HOST_ENV, "")
    if not host or host in ("0.0.0.0", "::"):
        return

    def on_serving_host(original: Callable[..., Any]) -> Callable[..., Any]:
        def add_grpc_address(server: Any, address: str) -> Any:
            return original(server, bound_address(address, host))

        return add_grpc_address

    wrap_serve_grpc_bind(on_serving_host)
