"""The Ray and Serve internals rayton uses are still there, in the shape it uses them.

A Ray upgrade that moves or changes one fails here, naming it, instead of in a deploy.
"""

import inspect

from ray import serve
from ray.serve.api import RunTarget

from cluster import serve_internals


@serve.deployment
class _Echo:
    def __call__(self, value):
        return value


def test_a_deployment_still_has_a_private_code_version_to_fix():
    assert hasattr(_Echo, "_version"), "Serve's Deployment._version is gone"
    versioned = serve_internals.set_code_version(_Echo.options(name="echo"), "rayton-test")
    assert versioned._version == "rayton-test"


def test_serve_still_deploys_many_applications_without_waiting():
    parameters = inspect.signature(serve._run_many).parameters
    assert "wait_for_applications_running" in parameters, "serve._run_many changed"
    fields = inspect.signature(RunTarget).parameters
    assert {"name", "route_prefix", "logging_config"} <= set(fields), "RunTarget changed"


def test_serve_delete_still_takes_blocking():
    assert "_blocking" in inspect.signature(serve.delete).parameters, "serve.delete changed"


def test_the_haproxy_binary_is_still_found_where_serve_keeps_it():
    from ray.serve._private import haproxy

    assert callable(haproxy.get_haproxy_binary), "ray.serve._private.haproxy changed"


def test_serve_grpc_bind_helper_is_still_looked_up_and_wrappable():
    from ray.serve._private import default_impl

    original = default_impl.add_grpc_address
    assert len(inspect.signature(original).parameters) == 2, "add_grpc_address changed"
    seen = []
    try:
        serve_internals.wrap_serve_grpc_bind(lambda inner: lambda s, a: seen.append(a) or inner)
        default_impl.add_grpc_address(None, "[::]:1")
        serve_internals.wrap_serve_grpc_bind(lambda inner: None)  # wrapped once only
        assert callable(default_impl.add_grpc_address)
    finally:
        default_impl.add_grpc_address = original
    assert seen == ["[::]:1"]


def test_ray_still_resolves_localhost_through_a_replaceable_helper():
    from ray._private import services

    original = services.resolve_ip_for_localhost
    with serve_internals.localhost_resolved_as(lambda name: "resolved"):
        assert services.resolve_ip_for_localhost("localhost") == "resolved"
    assert services.resolve_ip_for_localhost is original


def test_token_auth_is_still_readable():
    from ray._private.authentication import authentication_utils

    assert callable(authentication_utils.is_token_auth_enabled), "token auth helper moved"
    assert isinstance(serve_internals.token_auth_enabled(), bool)
