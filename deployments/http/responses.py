"""Starlette responses in Triton's HTTP form: JSON documents, body-less answers, errors."""

from __future__ import annotations

from typing import Any

from starlette.responses import Response

from deployments.http.response_encoding import encode_error
from deployments.http.wire import JSON_CONTENT_TYPE, json_dumps
from repo_adapter.errors import InferenceServerError

NOT_FOUND = {"error": "Not Found"}
METHOD_NOT_ALLOWED = {"error": "Method Not Allowed"}


def json_response(payload: Any, status: int = 200) -> Response:
    """A compact JSON document, as Triton writes metadata, config, statistics and errors."""
    return Response(json_dumps(payload), status, media_type=JSON_CONTENT_TYPE)


def empty_response(status: int = 200) -> Response:
    """A body-less answer (health, readiness); Triton's HTTP server labels it text/plain."""
    return Response(b"", status, headers={"content-type": "text/plain"})


def error_response(err: InferenceServerError) -> Response:
    status, body, headers = encode_error(err)
    return Response(body, status, headers=headers)


def get_only(method: str) -> Response | None:
    """The 405 answer for a GET-only route asked with another method; None for GET."""
    return None if method == "GET" else json_response(METHOD_NOT_ALLOWED, 405)
