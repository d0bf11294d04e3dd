"""Every use rayton makes of a Ray or Serve internal, in one place.

Each function here reaches into something Ray does not promise to keep (a private module, a
private attribute or argument). They live together so that a Ray upgrade is checked in one
file: ``tests/cluster/test_serve_internals.py`` fails, naming the internal, when one is gone
or changed shape. Ray's private modules are imported inside the functions that use them, so a
missing one fails only its own feature.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from ray import serve
from ray.serve.api import RunTarget  # Serve's target type for deploying many applications


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
