"""Replies in Triton's HTTP form: JSON documents, body-less answers, errors."""

from __future__ import annotations

from typing import Any

from deployments.http.messages import HttpReply
from deployments.http.response_encoding import encode_error
from deployments.http.wire import JSON_CONTENT_TYPE, json_dumps
from repo_adapter.errors import InferenceServerError

NOT_FOUND = {"error": "Not Found"}
METHOD_NOT_ALLOWED = {"error": "Method Not Allowed"}


def json_response(payload: Any, status: int = 200) -> HttpReply:
    """A compact JSON document, as Triton writes metadata, config, statistics and errors."""
    return HttpReply(status, json_dumps(payload), {"content-type": JSON_CONTENT_TYPE})


def empty_response(status: int = 200) -> HttpReply:
    """A body-less answer (health, readiness); Triton's HTTP server labels it text/plain."""
    return HttpReply(status, b"", {"content-type": "text/plain"})


def empty_json_response(status: int = 200) -> HttpReply:
    """A body-less answer Triton's HTTP server labels application/json (the shared-memory
    extensions' register and unregister)."""
    return HttpReply(status, b"", {"content-type": "application/json"})


def error_response(err: InferenceServerError | BaseException | str) -> HttpReply:
    status, body, headers = encode_error(err)
    return HttpReply(status, body, headers)


def get_only(method: str) -> HttpReply | None:
    """The 405 answer for a GET-only route asked with another method; None for GET."""
    return None if method == "GET" else json_response(METHOD_NOT_ALLOWED, 405)
