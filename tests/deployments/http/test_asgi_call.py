"""An HttpRequest through an ASGI app (Serve's own entry in a replica), its answer collected."""

from __future__ import annotations

from deployments.http.asgi_call import asgi_call
from deployments.http.messages import HttpRequest


async def test_the_app_sees_the_request_and_its_answer_comes_back_whole():
    seen = {}

    async def app(scope, receive, send):
        seen["scope"] = scope
        seen["message"] = await receive()
        await send({"type": "http.response.start", "status": 503, "headers": [(b"x-a", b"b")]})
        await send({"type": "http.response.body", "body": b"part1 ", "more_body": True})
        await send({"type": "http.response.body", "body": b"part2"})

    request = HttpRequest("POST", "/-/healthz", {"X-Id": "7"}, b"body", "q=1")
    reply = await asgi_call(app, request)
    assert (reply.status, reply.body, dict(reply.headers)) == (503, b"part1 part2", {"x-a": "b"})
    scope = seen["scope"]
    assert (scope["method"], scope["path"], scope["query_string"]) == ("POST", "/-/healthz", b"q=1")
    assert scope["headers"] == [(b"x-id", b"7")]
    assert seen["message"] == {"type": "http.request", "body": b"body", "more_body": False}
