"""HTTP body compression as Triton's HTTP frontend does it (Content-Encoding, Accept-Encoding).

Requests: ``gzip`` and ``deflate`` bodies are inflated with zlib's header auto-detection, like
Triton's ``DataCompressor`` (``inflateInit2(15 | 32)``), so either header works under either name;
a raw deflate stream (no zlib header, as some clients send) is accepted as a fallback. The
inflated size is capped to defuse decompression bombs.

Responses: the encoding is picked from ``Accept-Encoding`` the way Triton's ``CompressionTypeUsed``
does (highest ``q`` among ``gzip``, ``deflate`` and ``identity``; first wins on ties; identity when
nothing acceptable is offered).
"""

from __future__ import annotations

import zlib

from repo_adapter.errors import InferenceServerError, StatusCode

IDENTITY = "identity"
GZIP = "gzip"
DEFLATE = "deflate"

# Triton's --http-max-input-size default (64 MiB) also bounds inflated request bodies.
DEFAULT_MAX_DECOMPRESSED_SIZE = 64 * 1024 * 1024

# zlib window bits: 15 | 32 auto-detects a zlib or gzip header; 31 writes gzip; -15 is raw deflate.
_AUTO_DETECT_WBITS = 15 | 32
_GZIP_WBITS = 31
_RAW_DEFLATE_WBITS = -15

# Aliases of the codings we support; HTTP content codings are case-insensitive and RFC 9110
# asks recipients to treat x-gzip as gzip.
_REQUEST_CODINGS = {"": IDENTITY, IDENTITY: IDENTITY, GZIP: GZIP, "x-gzip": GZIP, DEFLATE: DEFLATE}
_RESPONSE_CODINGS = (IDENTITY, GZIP, DEFLATE)


class UnsupportedContentEncodingError(InferenceServerError):
    """A request body compressed with a coding the server cannot decode.

    Triton answers UNSUPPORTED (HTTP 501) and advertises what it accepts; ``headers`` carries
    that advertisement for the transport to add to the error response.
    """

    headers = {"Accept-Encoding": "gzip, deflate"}

    def __init__(
        self,
        message: str = "Unsupported compression type",
        code: StatusCode = StatusCode.UNSUPPORTED,
    ) -> None:
        super().__init__(message, code)


def request_coding(content_encoding: str | None) -> str:
    """Normalise a request's ``Content-Encoding`` to ``identity``, ``gzip`` or ``deflate``.

    Raises:
        UnsupportedContentEncodingError: for any other coding.
    """
    if content_encoding is None:
        return IDENTITY
    coding = _REQUEST_CODINGS.get(content_encoding.strip().lower())
    if coding is None:
        raise UnsupportedContentEncodingError()
    return coding


def decompress_body(
    body: bytes,
    content_encoding: str | None,
    max_size: int | None = DEFAULT_MAX_DECOMPRESSED_SIZE,
) -> bytes:
    """Inflate a request body per its ``Content-Encoding``; identity bodies come back unchanged.

    Args:
        body: the body as received.
        content_encoding: the ``Content-Encoding`` header value, or None.
        max_size: largest inflated size accepted; None or 0 for no limit.

    Raises:
        UnsupportedContentEncodingError: unknown coding (UNSUPPORTED).
        InferenceServerError: empty or corrupt compressed body, or inflated size over
            ``max_size`` (INVALID_ARG).
    """
    if request_coding(content_encoding) == IDENTITY:
        return body
    if not body:
        raise InferenceServerError("nothing to be decompressed")
    try:
        return _inflate(body, _AUTO_DETECT_WBITS, max_size)
    except zlib.error as first_error:
        try:
            return _inflate(body, _RAW_DEFLATE_WBITS, max_size)
        except zlib.error:
            raise InferenceServerError(
                f"failed to decompress the request body: {first_error}"
            ) from None


def _inflate(body: bytes, wbits: int, max_size: int | None) -> bytes:
    inflater = zlib.decompressobj(wbits)
    if not max_size:
        data = inflater.decompress(body)
    else:
        # One byte over the limit is enough to know the limit is exceeded, without
        # materialising the whole bomb.
        data = inflater.decompress(body, max_size + 1)
        if len(data) > max_size:
            raise InferenceServerError(
                f"Decompressed data size exceeds the maximum allowed value of {max_size} bytes"
            )
    if not inflater.eof:
        raise zlib.error("incomplete or truncated stream")
    return data


def response_coding(accept_encoding: str | None) -> str:
    """Pick the response coding from ``Accept-Encoding``: ``gzip``, ``deflate`` or ``identity``.

    Mirrors Triton: each comma-separated entry is ``coding[;q=weight]``; malformed weights skip
    the entry; the strictly highest positive weight wins, so ``q=0`` never selects a coding.
    Unlike Triton, codings are matched case-insensitively and whitespace around ``;`` and ``=`` is
    tolerated.
    """
    if not accept_encoding:
        return IDENTITY
    best, best_weight = IDENTITY, 0.0
    for entry in accept_encoding.split(","):
        coding, _, params = entry.partition(";")
        coding = coding.strip().lower()
        if coding not in _RESPONSE_CODINGS:
            continue
        weight = _quality(params)
        if weight is not None and weight > best_weight:
            best, best_weight = coding, weight
    return best


def _quality(params: str) -> float | None:
    """The ``q`` weight of an Accept-Encoding entry's parameters (1.0 if absent, None if bad)."""
    for param in params.split(";"):
        name, sep, value = param.partition("=")
        if sep and name.strip().lower() == "q":
            try:
                return float(value.strip())
            except ValueError:
                return None
    return 1.0


def compress_body(body: bytes, coding: str, level: int = -1) -> bytes:
    """Compress a response body with ``gzip`` (gzip container) or ``deflate`` (zlib stream).

    ``identity`` returns ``body`` unchanged. ``level`` is zlib's (-1 = its default, as Triton).
    """
    if coding == GZIP:
        compressor = zlib.compressobj(level, zlib.DEFLATED, _GZIP_WBITS)
        return compressor.compress(body) + compressor.flush()
    if coding == DEFLATE:
        return zlib.compress(body, level)
    return body
