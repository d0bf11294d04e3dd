"""Run one request sequence against a server and normalise what comes back.

The conformance suite sends the *same* sequence (:mod:`tests.conformance.cases`) to the
reference tritonserver and to rayton, then diffs the two observation sets leaf by leaf. An
observation is plain data (dicts, lists, str, int, float, bool, None) with everything that
legitimately varies between runs already normalised away: durations and timestamps become
markers, Python tracebacks are cut from error messages, JSON key order is irrelevant.

Transports: a case either talks raw HTTP (:meth:`Target.raw`, urllib, exact status codes,
headers and bodies) or goes through a :class:`ClientSession`, the small API a Triton client
offers. :class:`HttpSession` wraps ``tritonclient.http``; :class:`GrpcSession` wraps
``tritonclient.grpc`` with the same methods, so the client cases run unchanged over gRPC once
rayton serves it.
"""

from __future__ import annotations

import fnmatch
import json
import math
import re
import urllib.error
import urllib.request
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

MISSING = "<missing>"  # a key or list element one side lacks

# Triton's Python backend appends the model's traceback ("\n\nAt:\n  file(line): fn") to the
# message of an exception raised in execute(); the frames name server-specific paths.
_TRACEBACK = re.compile(r"\n\s*At:\n.*\Z", re.DOTALL)


# ---------------------------------------------------------------------------------------------
# Servers and transports


@dataclass(frozen=True)
class Server:
    """A server under test. URLs are ``host:port``, the form tritonclient takes."""

    name: str
    http_url: str
    grpc_url: str | None = None


@dataclass
class Reply:
    """One raw HTTP exchange."""

    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


def http_request(
    server: Server,
    method: str,
    path: str,
    body: bytes | dict | None = None,
    headers: dict[str, str] | None = None,
    timeout: float = 30.0,
) -> Reply:
    """A raw HTTP request; a dict body is sent as JSON. Never raises for an HTTP status."""
    if isinstance(body, dict):
        body = json.dumps(body).encode()
    request = urllib.request.Request(
        f"http://{server.http_url}{path}", data=body, method=method, headers=headers or {}
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return Reply(response.status, _lower(response.headers), response.read())
    except urllib.error.HTTPError as err:
        return Reply(err.code, _lower(err.headers), err.read())


def _lower(headers: Any) -> dict[str, str]:
    return {key.lower(): value for key, value in headers.items()}


@dataclass(frozen=True)
class TensorSpec:
    """An input to send: name, data, protocol datatype; ``binary`` picks the HTTP encoding."""

    name: str
    data: np.ndarray
    datatype: str
    binary: bool = True


@dataclass(frozen=True)
class OutputSpec:
    """An output to request; ``binary`` (HTTP only) and ``class_count`` as in tritonclient."""

    name: str
    binary: bool = True
    class_count: int = 0


class ClientSession:
    """What a Triton client does, answered as normalised observations.

    Every method returns plain data; a client exception becomes
    ``{"exception": {"status": ..., "message": ...}}`` so error cases compare like others.
    """

    protocol = ""

    def close(self) -> None:
        self.client.close()

    def call(self, fn: Callable[[], Any]) -> Any:
        from tritonclient.utils import InferenceServerException

        try:
            return fn()
        except InferenceServerException as err:
            return {
                "exception": {
                    "status": err.status(),
                    "message": normalise_message(err.message() or ""),
                }
            }

    # Subclasses implement these on their client.
    def server_live(self) -> Any: ...
    def server_ready(self) -> Any: ...
    def model_ready(self, model: str, version: str = "") -> Any: ...
    def server_metadata(self) -> Any: ...
    def model_metadata(self, model: str, version: str = "") -> Any: ...
    def model_config(self, model: str, version: str = "") -> Any: ...
    def statistics(self, model: str = "", version: str = "") -> Any: ...

    def infer(
        self,
        model: str,
        inputs: list[TensorSpec],
        outputs: list[OutputSpec] | None = None,
        version: str = "",
        request_id: str = "",
        parameters: dict[str, Any] | None = None,
    ) -> Any: ...


class HttpSession(ClientSession):
    """``tritonclient.http``."""

    protocol = "http"

    def __init__(self, server: Server) -> None:
        import tritonclient.http as module

        self.module = module
        self.client = module.InferenceServerClient(server.http_url, network_timeout=60.0)

    def server_live(self) -> Any:
        return self.call(self.client.is_server_live)

    def server_ready(self) -> Any:
        return self.call(self.client.is_server_ready)

    def model_ready(self, model: str, version: str = "") -> Any:
        return self.call(lambda: self.client.is_model_ready(model, version))

    def server_metadata(self) -> Any:
        return self.call(self.client.get_server_metadata)

    def model_metadata(self, model: str, version: str = "") -> Any:
        return self.call(lambda: self.client.get_model_metadata(model, version))

    def model_config(self, model: str, version: str = "") -> Any:
        return self.call(lambda: self.client.get_model_config(model, version))

    def statistics(self, model: str = "", version: str = "") -> Any:
        return self.call(
            lambda: normalise_statistics(self.client.get_inference_statistics(model, version))
        )

    def infer(self, model, inputs, outputs=None, version="", request_id="", parameters=None):
        def run() -> Any:
            result = self.client.infer(
                model,
                [self._input(spec) for spec in inputs],
                model_version=version,
                outputs=None if outputs is None else [self._output(o) for o in outputs],
                request_id=request_id,
                parameters=parameters,
            )
            return normalise_result(result.get_response(), result.as_numpy)

        return self.call(run)

    def _input(self, spec: TensorSpec) -> Any:
        tensor = self.module.InferInput(spec.name, list(spec.data.shape), spec.datatype)
        tensor.set_data_from_numpy(spec.data, binary_data=spec.binary)
        return tensor

    def _output(self, spec: OutputSpec) -> Any:
        return self.module.InferRequestedOutput(
            spec.name, binary_data=spec.binary, class_count=spec.class_count
        )


class GrpcSession(ClientSession):
    """``tritonclient.grpc``; JSON views of the protobuf answers (``as_json=True``)."""

    protocol = "grpc"

    def __init__(self, server: Server) -> None:
        import tritonclient.grpc as module

        if server.grpc_url is None:
            raise ValueError(f"server '{server.name}' has no gRPC endpoint")
        self.module = module
        self.client = module.InferenceServerClient(server.grpc_url)

    def server_live(self) -> Any:
        return self.call(self.client.is_server_live)

    def server_ready(self) -> Any:
        return self.call(self.client.is_server_ready)

    def model_ready(self, model: str, version: str = "") -> Any:
        return self.call(lambda: self.client.is_model_ready(model, version))

    def server_metadata(self) -> Any:
        return self.call(lambda: self.client.get_server_metadata(as_json=True))

    def model_metadata(self, model: str, version: str = "") -> Any:
        return self.call(lambda: self.client.get_model_metadata(model, version, as_json=True))

    def model_config(self, model: str, version: str = "") -> Any:
        return self.call(lambda: self.client.get_model_config(model, version, as_json=True))

    def statistics(self, model: str = "", version: str = "") -> Any:
        return self.call(
            lambda: normalise_statistics(
                self.client.get_inference_statistics(model, version, as_json=True)
            )
        )

    def infer(self, model, inputs, outputs=None, version="", request_id="", parameters=None):
        def run() -> Any:
            tensors = []
            for spec in inputs:
                tensor = self.module.InferInput(spec.name, list(spec.data.shape), spec.datatype)
                tensor.set_data_from_numpy(spec.data)
                tensors.append(tensor)
            requested = None
            if outputs is not None:
                requested = [
                    self.module.InferRequestedOutput(o.name, class_count=o.class_count)
                    for o in outputs
                ]
            result = self.client.infer(
                model,
                tensors,
                model_version=version,
                outputs=requested,
                request_id=request_id,
                parameters=parameters,
            )
            return normalise_result(result.get_response(as_json=True), result.as_numpy)

        return self.call(run)


SESSIONS: dict[str, type[ClientSession]] = {"http": HttpSession, "grpc": GrpcSession}


@dataclass
class Target:
    """What a case runs against: one server, over one client protocol (plus raw HTTP)."""

    server: Server
    session: ClientSession

    @property
    def client(self) -> ClientSession:
        return self.session

    def raw(self, method: str, path: str, body: bytes | dict | None = None, headers=None) -> Any:
        """A raw HTTP request, normalised with :func:`normalise_reply`."""
        return normalise_reply(http_request(self.server, method, path, body, headers))


# ---------------------------------------------------------------------------------------------
# Cases and running them


@dataclass(frozen=True)
class Case:
    """One step of the sequence.

    ``raw`` cases speak HTTP directly and run only in the HTTP pass; the others use
    :attr:`Target.client` and run over every client protocol.
    """

    name: str
    group: str
    description: str
    run: Callable[[Target], Any]
    raw: bool = False


@dataclass
class CaseRegistry:
    """The ordered case list; order matters (statistics count everything sent before)."""

    cases: list[Case] = field(default_factory=list)

    def add(self, name: str, group: str, description: str, run, raw: bool = False) -> None:
        if any(c.name == name for c in self.cases):
            raise ValueError(f"duplicate case name {name!r}")
        self.cases.append(Case(name, group, description, run, raw))

    def case(self, name: str, group: str, description: str, raw: bool = False):
        """Decorator form of :meth:`add`."""

        def register(fn: Callable[[Target], Any]) -> Callable[[Target], Any]:
            self.add(name, group, description, fn, raw)
            return fn

        return register

    def for_protocol(self, protocol: str) -> list[Case]:
        return [c for c in self.cases if protocol == "http" or not c.raw]


def run_sequence(server: Server, cases: Iterable[Case], protocol: str = "http") -> dict[str, Any]:
    """Run ``cases`` in order against ``server``; case name -> observation.

    A case that raises (a driver bug or a connection failure) is recorded as
    ``{"driver_error": ...}`` so one broken case cannot hide the others.
    """
    session = SESSIONS[protocol](server)
    target = Target(server, session)
    observations: dict[str, Any] = {}
    try:
        for case in cases:
            try:
                observations[case.name] = case.run(target)
            except Exception as err:
                observations[case.name] = {"driver_error": f"{type(err).__name__}: {err}"}
    finally:
        session.close()
    return observations


# ---------------------------------------------------------------------------------------------
# Normalisation


def normalise_message(message: str) -> str:
    """An error message without the Python traceback Triton appends, whitespace trimmed."""
    return _TRACEBACK.sub("", message).strip()


def normalise_reply(reply: Reply) -> dict[str, Any]:
    """Status, the headers clients act on, and the body (JSON parsed, errors normalised)."""
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
    observed = {k: v for k, v in response.items() if k != "outputs"}
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


_DURATION_KEYS = ("count", "ns")


def normalise_statistics(stats: dict[str, Any]) -> dict[str, Any]:
    """Statistics JSON with durations and timestamps replaced by markers; counts kept exact.

    ``ns`` becomes ``"<ns>"`` when positive (0 stays 0): cumulative times are never equal
    between two servers, but whether time was recorded at all is comparable.
    ``last_inference`` becomes ``"<ms>"`` when set. Entries are sorted by (name, version).
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
        entries.sort(key=lambda e: (str(e.get("name")), str(e.get("version"))))
    return normalised


# ---------------------------------------------------------------------------------------------
# Comparison


@dataclass(frozen=True)
class Mismatch:
    """One leaf that differs: ``path`` like ``/body/outputs/0/shape``."""

    case: str
    path: str
    reference: Any
    rayton: Any

    def __str__(self) -> str:
        return f"{self.case}{self.path or '/'}: reference={self.reference!r} rayton={self.rayton!r}"


def diff(reference: Any, rayton: Any, path: str = "") -> Iterator[tuple[str, Any, Any]]:
    """Differing leaves of two observations as ``(path, reference, rayton)``.

    Dict keys are matched by name (a key one side lacks reports :data:`MISSING`); lists by
    position. Leaves must have the same JSON type: ``1`` and ``1.0`` and ``True`` differ.
    """
    if isinstance(reference, dict) and isinstance(rayton, dict):
        for key in sorted(set(reference) | set(rayton), key=str):
            yield from diff(
                reference.get(key, MISSING), rayton.get(key, MISSING), f"{path}/{key}"
            )
        return
    if isinstance(reference, list) and isinstance(rayton, list) and len(reference) == len(rayton):
        for index, (left, right) in enumerate(zip(reference, rayton, strict=True)):
            yield from diff(left, right, f"{path}/{index}")
        return
    if type(reference) is not type(rayton) or reference != rayton:
        yield path, reference, rayton


def compare(
    case: str, reference: Any, rayton: Any, allowed: Iterable[Any] = ()
) -> tuple[list[Mismatch], set[Any]]:
    """Mismatches of one case not covered by ``allowed`` entries, and the entries that matched.

    An allow-list entry (:class:`tests.conformance.allowlist.Difference`) covers a mismatch
    when its ``case`` and ``path`` patterns match and its pinned values (if any) agree.
    """
    unexplained: list[Mismatch] = []
    used: set[Any] = set()
    for path, left, right in diff(reference, rayton):
        mismatch = Mismatch(case, path, left, right)
        entry = next((e for e in allowed if covers(e, mismatch)), None)
        if entry is None:
            unexplained.append(mismatch)
        else:
            used.add(entry)
    return unexplained, used


def covers(entry: Any, mismatch: Mismatch) -> bool:
    """Whether an allow-list entry explains ``mismatch``."""
    if not fnmatch.fnmatchcase(mismatch.case, entry.case):
        return False
    if not fnmatch.fnmatchcase(mismatch.path, entry.path):
        return False
    return entry.accepts(mismatch.reference, mismatch.rayton)
