"""How the suite talks to a server: raw HTTP (urllib) and Triton's own Python clients.

:class:`ClientSession` is the small API a Triton client offers, answered as normalised
observations. :class:`HttpSession` wraps ``tritonclient.http`` and :class:`GrpcSession`
``tritonclient.grpc``; the client cases run unchanged over either protocol.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from tests.conformance.normalise import normalise_message, normalise_result, normalise_statistics


@dataclass(frozen=True)
class Server:
    """A server under test. URLs are ``host:port``, the form tritonclient takes."""

    name: str
    http_url: str
    grpc_url: str | None = None
    metrics_url: str | None = None  # http://host:port/metrics


@dataclass
class Reply:
    """One raw HTTP exchange."""

    status: int
    headers: dict[str, str]
    body: bytes


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
    """What a Triton client does, answered as plain data.

    A client exception becomes ``{"exception": {"status": ..., "message": ...}}``, so error
    cases compare like any other. Subclasses provide the client and encode tensors.
    """

    protocol = ""
    # Keyword arguments that make the client answer JSON (gRPC answers protobuf otherwise).
    json_kwargs: dict[str, Any] = {}

    def __init__(self, module: Any, client: Any) -> None:
        self.module = module
        self.client = client

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

    def server_live(self) -> Any:
        return self.call(self.client.is_server_live)

    def server_ready(self) -> Any:
        return self.call(self.client.is_server_ready)

    def model_ready(self, model: str, version: str = "") -> Any:
        return self.call(lambda: self.client.is_model_ready(model, version))

    def server_metadata(self) -> Any:
        return self.call(lambda: self.client.get_server_metadata(**self.json_kwargs))

    def model_metadata(self, model: str, version: str = "") -> Any:
        return self.call(lambda: self.client.get_model_metadata(model, version, **self.json_kwargs))

    def model_config(self, model: str, version: str = "") -> Any:
        return self.call(lambda: self.client.get_model_config(model, version, **self.json_kwargs))

    def statistics(self, model: str = "", version: str = "") -> Any:
        return self.call(
            lambda: normalise_statistics(
                self.client.get_inference_statistics(model, version, **self.json_kwargs)
            )
        )

    def counted_statistics(self, model: str, inferences: int, settle_s: float = 10.0) -> Any:
        """``model``'s statistics once they count ``inferences`` inferences: Triton counts a
        python model's request when its stub releases it, a moment after the response."""

        def counted() -> int:
            raw = self.client.get_inference_statistics(model, **self.json_kwargs)
            stats = raw.get("model_stats", []) if isinstance(raw, dict) else []
            return sum(int(entry.get("inference_count", 0)) for entry in stats)

        deadline = time.monotonic() + settle_s
        while self.call(counted) != inferences and time.monotonic() < deadline:
            time.sleep(0.05)
        return self.statistics(model)

    def load_model(self, model: str, config: str | None = None) -> Any:
        """The repository API's load (explicit model control): ``"done"`` or the error."""
        return self.call(lambda: self.client.load_model(model, config=config) or "done")

    def unload_model(self, model: str) -> Any:
        """The repository API's unload: ``"done"`` or the error."""
        return self.call(lambda: self.client.unload_model(model) or "done")

    def repository_index(self, settle_s: float = 30.0) -> Any:
        """The repository index, entries sorted by name and version, once no entry is
        ``UNLOADING`` or ``LOADING``: Triton's unload returns before its model is gone, and
        those passing states last as long as the server takes (bounded by ``settle_s``)."""

        def entries() -> list[dict[str, Any]]:
            index = self.client.get_model_repository_index(**self.json_kwargs)
            listed = index.get("models", []) if isinstance(index, dict) else index
            return sorted(listed, key=lambda e: (e.get("name", ""), e.get("version", "")))

        def run() -> Any:
            deadline = time.monotonic() + settle_s
            while True:
                listed = entries()
                passing = [e for e in listed if e.get("state") in ("UNLOADING", "LOADING")]
                if not passing or time.monotonic() > deadline:
                    return listed
                time.sleep(0.1)

        return self.call(run)

    def infer(
        self,
        model: str,
        inputs: list[TensorSpec],
        outputs: list[OutputSpec] | None = None,
        version: str = "",
        request_id: str = "",
        parameters: dict[str, Any] | None = None,
        sequence: dict[str, Any] | None = None,
    ) -> Any:
        """One inference; the result's header plus each output as the client decodes it.
        ``sequence``: the client's ``sequence_id`` / ``sequence_start`` / ``sequence_end``."""

        def run() -> Any:
            result = self.client.infer(
                model,
                [self.make_input(spec) for spec in inputs],
                model_version=version,
                outputs=None if outputs is None else [self.make_output(o) for o in outputs],
                request_id=request_id,
                parameters=parameters,
                **(sequence or {}),
            )
            return normalise_result(result.get_response(**self.json_kwargs), result.as_numpy)

        return self.call(run)

    def make_input(self, spec: TensorSpec) -> Any:
        raise NotImplementedError

    def make_output(self, spec: OutputSpec) -> Any:
        raise NotImplementedError


class HttpSession(ClientSession):
    """``tritonclient.http``."""

    protocol = "http"

    def __init__(self, server: Server) -> None:
        import tritonclient.http as module

        super().__init__(module, module.InferenceServerClient(server.http_url))

    def make_input(self, spec: TensorSpec) -> Any:
        tensor = self.module.InferInput(spec.name, list(spec.data.shape), spec.datatype)
        tensor.set_data_from_numpy(spec.data, binary_data=spec.binary)
        return tensor

    def make_output(self, spec: OutputSpec) -> Any:
        return self.module.InferRequestedOutput(
            spec.name, binary_data=spec.binary, class_count=spec.class_count
        )


class GrpcSession(ClientSession):
    """``tritonclient.grpc`` (always binary tensors); JSON views of its protobuf answers."""

    protocol = "grpc"
    json_kwargs = {"as_json": True}

    def __init__(self, server: Server) -> None:
        import tritonclient.grpc as module

        if server.grpc_url is None:
            raise ValueError(f"server '{server.name}' has no gRPC endpoint")
        super().__init__(module, module.InferenceServerClient(server.grpc_url))

    def make_input(self, spec: TensorSpec) -> Any:
        tensor = self.module.InferInput(spec.name, list(spec.data.shape), spec.datatype)
        tensor.set_data_from_numpy(spec.data)
        return tensor

    def make_output(self, spec: OutputSpec) -> Any:
        return self.module.InferRequestedOutput(spec.name, class_count=spec.class_count)

    def stream(
        self, model: str, requests: list[StreamRequest], replies: int, settle_s: float = 0.5
    ) -> Any:
        """``requests`` sent on one ``ModelStreamInfer`` stream: the replies grouped by request
        id (in the order each request's came), ``replies`` of them and whatever else arrives
        within ``settle_s``; an error reply is ``{"error": message}``."""
        import queue

        received: queue.Queue = queue.Queue()
        self.client.start_stream(callback=lambda result, error: received.put((result, error)))
        try:
            for request in requests:
                self.client.async_stream_infer(
                    model,
                    [self.make_input(spec) for spec in request.inputs],
                    request_id=request.request_id,
                    enable_empty_final_response=request.empty_final,
                )
            got: dict[str, list[Any]] = {}
            count = 0
            while True:
                try:
                    timeout = 30.0 if count < replies else settle_s
                    result, error = received.get(timeout=timeout)
                except queue.Empty:
                    break
                count += 1
                if error is not None:
                    got.setdefault("<error>", []).append({"error": normalise_message(str(error))})
                    continue
                response = result.get_response(as_json=True)
                observed = normalise_result(response, result.as_numpy)
                got.setdefault(str(response.get("id", "")), []).append(observed)
            return got
        finally:
            self.client.stop_stream()


@dataclass(frozen=True)
class StreamRequest:
    """One request of a stream: its inputs, id and whether it asks for an empty final
    response (``enable_empty_final_response``)."""

    inputs: list[TensorSpec]
    request_id: str
    empty_final: bool = False


SESSIONS: dict[str, type[ClientSession]] = {"http": HttpSession, "grpc": GrpcSession}
