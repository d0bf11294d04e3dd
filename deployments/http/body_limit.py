"""Reading an inference request's body within Triton's ``--http-max-input-size``.

A body whose ``Content-Length`` is over the limit is refused before any of it is read; a body
without one (chunked) is read until it passes the limit. Either way the replica never holds
more than the limit of a request that will be refused. Triton's default limit is 64 MiB.
"""

from __future__ import annotations

from starlette.requests import Request

from repo_adapter.errors import InferenceServerError

DEFAULT_MAX_INPUT_SIZE = 64 * 1024 * 1024


def too_large(size: int | str, limit: int) -> InferenceServerError:
    return InferenceServerError(
        f"request size {size} exceeds the maximum input size of {limit} bytes "
        "(--http-max-input-size)"
    )


async def read_body(request: Request, limit: int = DEFAULT_MAX_INPUT_SIZE) -> bytes:
    """The whole body, or INVALID_ARG once it is known to be over ``limit`` bytes."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise too_large(declared, limit)
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise too_large(f"over {limit}", limit)
        chunks.append(chunk)
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)
