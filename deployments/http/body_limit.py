"""Triton's ``--http-max-input-size``: the largest request body a replica reads.

A body whose ``Content-Length`` is over the limit is refused before any of it is read; a body
without one (chunked) is read until it passes the limit. Either way the replica never holds
more than the limit of a request that will be refused. Triton's default limit is 64 MiB.
"""

from __future__ import annotations

from repo_adapter.errors import InferenceServerError

DEFAULT_MAX_INPUT_SIZE = 64 * 1024 * 1024


def too_large(size: int | str, limit: int) -> InferenceServerError:
    return InferenceServerError(
        f"request size {size} exceeds the maximum input size of {limit} bytes "
        "(--http-max-input-size)"
    )
