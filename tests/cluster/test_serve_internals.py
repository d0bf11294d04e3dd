"""The Ray and Serve internals rayton uses are still there, in the shape it uses them.

A Ray upgrade that moves or changes one fails here, naming it, instead of in a deploy.
"""

import inspect

import pytest
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


def test_serve_still_says_whether_haproxy_fronts_the_ingress():
    assert serve_internals.haproxy_ingress() in (True, False)


def test_token_auth_is_still_readable():
    from ray._private.authentication import authentication_utils

    assert callable(authentication_utils.is_token_auth_enabled), "token auth helper moved"
    assert isinstance(serve_internals.token_auth_enabled(), bool)


def test_serve_still_starts_a_replica_s_direct_ingress_http_through_a_replaceable_helper():
    from ray.serve._private import replica

    parameters = inspect.signature(replica.start_asgi_http_server).parameters
    assert list(parameters)[:2] == ["app", "http_options"], "start_asgi_http_server changed"
    assert "event_loop" in parameters
    starting = inspect.getsource(replica.Replica._maybe_start_direct_ingress_servers)
    assert "start_asgi_http_server(" in starting and "self._direct_ingress_asgi" in starting
    stopping = inspect.getsource(replica.Replica)
    assert "_direct_ingress_http_server.should_exit = True" in stopping, "drain changed"
    assert "self._direct_ingress_http_server_task" in stopping


def test_a_replica_still_keeps_the_records_rayton_s_server_takes_over():
    from ray.serve._private import replica
    from ray.serve._private.common import RequestMetadata

    constructor = inspect.getsource(replica.Replica.__init__)
    for attribute in ("_semaphore", "_metrics_manager", "_route_prefix", "_deployment_id"):
        assert f"self.{attribute} = " in constructor, f"Replica.{attribute} is gone"
    manager = replica.ReplicaMetricsManager
    for method in ("inc_num_ongoing_requests", "dec_num_ongoing_requests"):
        assert list(inspect.signature(getattr(manager, method)).parameters) == [
            "self",
            "request_metadata",
        ]
    recorded = set(inspect.signature(manager.record_request_metrics).parameters)
    assert {"route", "latency_ms", "is_error"} <= recorded
    ingress = set(inspect.signature(manager.record_ingress_request_metrics).parameters)
    assert {"protocol", "method", "route", "app_name", "deployment_name", "latency_ms"} <= ingress
    assert {"is_error", "status_code"} <= ingress
    fields = set(inspect.signature(RequestMetadata).parameters)
    assert {"_request_protocol", "is_direct_ingress", "route", "app_name"} <= fields


class _Recorder:
    """Stands in for a replica's metrics manager: records what it is told."""

    def __init__(self):
        self.calls = []

    def inc_num_ongoing_requests(self, metadata):
        self.calls.append(("inc", metadata.is_direct_ingress))

    def dec_num_ongoing_requests(self, metadata):
        self.calls.append(("dec", metadata.is_direct_ingress))

    def record_request_metrics(self, **values):
        self.calls.append(("request", values["route"], values["is_error"]))

    def record_ingress_request_metrics(self, **values):
        self.calls.append(("ingress", values["method"], values["status_code"]))


class _Seated:
    should_exit = False

    def __init__(self):
        self.sockets = []

    async def serve(self, sock):
        self.sockets.append(sock.getsockname())
        sock.close()


async def test_take_direct_ingress_http_seats_the_offered_server_and_keeps_serve_s_otherwise():
    import asyncio
    import types

    from ray.serve._private import replica
    from ray.serve.config import HTTPOptions

    class FakeReplica:  # the attributes of Serve's Replica the seat reads
        def __init__(self, user_callable):
            self._user_callable_wrapper = types.SimpleNamespace(user_callable=user_callable)
            self._metrics_manager = _Recorder()
            self._semaphore = asyncio.Semaphore(1)
            self._route_prefix = "/v2/models/m"
            self._deployment_id = types.SimpleNamespace(app_name="app", name="dep")

        async def _direct_ingress_asgi(self, scope, receive, send):
            pass

    original = replica.start_asgi_http_server
    served_by_serve = []

    async def serve_s_own(app, http_options, *, event_loop, **options):
        served_by_serve.append(app)
        return "serve's task", "serve's server"

    seated = _Seated()
    seats = []

    def offer(seat):
        seats.append(seat)
        return seated if seat.user_callable == "ours" else None

    replica.start_asgi_http_server = serve_s_own
    try:
        serve_internals.take_direct_ingress_http(offer)
        serve_internals.take_direct_ingress_http(lambda seat: None)  # installed once only
        loop = asyncio.get_running_loop()
        ours = FakeReplica("ours")
        options = HTTPOptions(host="127.0.0.1", port=0, keep_alive_timeout_s=7)
        task, server = await replica.start_asgi_http_server(
            ours._direct_ingress_asgi, options, event_loop=loop, enable_so_reuseport=False
        )
        await task
        assert server is seated and seated.sockets[0][0] == "127.0.0.1"
        seat = seats[0]
        assert seat.keep_alive_timeout_s == 7 and seat.serve_app == ours._direct_ingress_asgi
        await seat.accounting.start()
        assert ours._semaphore.locked()
        seat.accounting.finish("POST", 503, 1.5)
        assert not ours._semaphore.locked()
        assert ours._metrics_manager.calls == [
            ("inc", True),
            ("dec", True),
            ("request", "/v2/models/m", True),
            ("ingress", "POST", "503"),
        ]
        theirs = FakeReplica("theirs")
        assert await replica.start_asgi_http_server(
            theirs._direct_ingress_asgi, options, event_loop=loop
        ) == ("serve's task", "serve's server")
        assert served_by_serve == [theirs._direct_ingress_asgi]
    finally:
        replica.start_asgi_http_server = original


@pytest.mark.cluster
def test_serve_applications_reads_what_serve_status_shows(serve_cluster):
    # Read without Serve's pydantic models: the same statuses, messages and replica counts.
    echo = _Echo.options(num_replicas=2, ray_actor_options={"num_cpus": 0})
    serve.run(echo.bind(), name="internals_echo", route_prefix="/internals_echo")
    try:
        status = serve.status()
        read = serve_internals.serve_applications()
    finally:
        serve.delete("internals_echo")
    assert status.applications["internals_echo"].deployments["_Echo"].replica_states == {
        "RUNNING": 2
    }
    assert set(read) == set(status.applications)
    for name, app in status.applications.items():
        assert (read[name].status, read[name].message) == (app.status.value, app.message)
        assert set(read[name].deployments) == set(app.deployments)
        for deployment_name, deployment in app.deployments.items():
            seen = read[name].deployments[deployment_name]
            assert seen == serve_internals.DeploymentState(
                deployment.status.value,
                deployment.status_trigger.value,
                deployment.message,
                {str(getattr(k, "value", k)): v for k, v in deployment.replica_states.items()},
            )
