"""Normalise what a server answers, so two servers' answers compare leaf by leaf.

Only what legitimately varies between runs or servers is normalised away: durations and
timestamps become markers, the Python traceback Triton appends to model errors is cut, and
outputs are ordered by name (Triton returns them in hash-map order). Everything else is kept
exactly, JSON types included.
"""

from __future__ import annotations

import json
import math
import re
import zlib
from collections.abc import Callable
from typing import Any

import numpy as np

# Triton's Python backend appends the model's traceback ("\n\nAt:\n  file(line): fn") to the
# message of an exception raised in execute(); the frames name server-specific paths.
_TRACEBACK = re.compile(r"\n\s*At:\n.*\Z", re.DOTALL)


def normalise_message(message: str) -> str:
    """An error message without the Python traceback Triton appends, whitespace trimmed."""
    return _TRACEBACK.sub("", message).strip()


def normalise_reply(reply: Any) -> dict[str, Any]:
    """A :class:`~tests.conformance.sessions.Reply` as status, the headers clients act on,
    and the body (decompressed, JSON parsed, errors normalised)."""
    content_type = reply.headers.get("content-type", "").split(";")[0].strip()
    observed: dict[str, Any] = {"status": reply.status, "content_type": content_type or None}
    for header in ("inference-header-content-length", "content-encoding"):
        if header in reply.headers:
            observed[header] = "<present>"
    if not reply.body:
        observed["body"] = None
        return observed
    raw = reply.body
    encoding = reply.headers.get("content-encoding", "")
    if encoding in ("gzip", "deflate"):
        raw = zlib.decompress(raw, 16 + zlib.MAX_WBITS if encoding == "gzip" else zlib.MAX_WBITS)
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        observed["body"] = f"<{len(raw)} non-JSON bytes>"
        return observed
    if isinstance(body, dict) and isinstance(body.get("error"), str):
        body = dict(body, error=normalise_message(body["error"]))
    if isinstance(body, dict) and isinstance(body.get("outputs"), list):
        body = dict(body, outputs=_by_name(body["outputs"]))
    observed["body"] = body
    return observed


def normalise_array(array: np.ndarray | None) -> Any:
    """dtype, shape and values of a decoded tensor (NaN spelled out: NaN != NaN)."""
    if array is None:
        return None
    values = array.tolist()
    if array.dtype.kind == "f":
        values = _map_leaves(values, lambda v: "nan" if math.isnan(v) else v)
    return {"dtype": str(array.dtype), "shape": list(array.shape), "values": values}


def _map_leaves(value: Any, fn: Callable[[Any], Any]) -> Any:
    if isinstance(value, list):
        return [_map_leaves(v, fn) for v in value]
    return fn(value)


def normalise_result(response: dict[str, Any], as_numpy: Callable[[str], Any]) -> dict[str, Any]:
    """An inference result: the response header plus each output decoded by the client."""
    # gRPC's raw_output_contents repeat the outputs' data in their (unspecified) order: the
    # decoded values below carry the same information.
    observed = {k: v for k, v in response.items() if k not in ("outputs", "raw_output_contents")}
    observed["outputs"] = _by_name(
        [
            dict(output, decoded=normalise_array(as_numpy(output["name"])))
            for output in response.get("outputs", [])
        ]
    )
    return observed


def _by_name(outputs: list[Any]) -> list[Any]:
    # Triton returns outputs in an unspecified order (hash-map order in core); clients look
    # them up by name, so compare them sorted by name.
    return sorted(outputs, key=lambda o: str(o.get("name")) if isinstance(o, dict) else "")


def normalise_statistics(stats: dict[str, Any]) -> dict[str, Any]:
    """Statistics JSON with durations and timestamps replaced by markers; counts kept exact.

    ``ns`` becomes ``"<ns>"`` when positive (0 stays 0): cumulative times are never equal
    between two servers, but whether time was recorded at all is comparable.
    ``last_inference`` becomes ``"<ms>"`` when set. ``model_stats`` becomes a dict keyed by
    ``"<name>:<version>"`` so a difference names its model instead of a list position.
    """

    def walk(value: Any, key: str = "") -> Any:
        if isinstance(value, dict):
            return {k: walk(v, k) for k, v in value.items()}
        if isinstance(value, list):
            return [walk(v) for v in value]
        if key == "ns" and isinstance(value, int) and value > 0:
            return "<ns>"
        if key == "ns" and isinstance(value, str) and value not in ("", "0"):
            return "<ns>"  # gRPC JSON writes uint64 as strings
        if key == "last_inference" and value not in (0, "0"):
            return "<ms>"
        return value

    normalised = walk(stats)
    entries = normalised.get("model_stats")
    if isinstance(entries, list):
        normalised["model_stats"] = {f"{e.get('name')}:{e.get('version')}": e for e in entries}
    return normalised
