"""One interface over tritonclient's HTTP and gRPC asyncio clients.

Everything the profiler asks the server goes through :class:`TritonConnection`, which
returns plain JSON-like dicts for both protocols (gRPC answers are converted from protobuf,
with int64 strings turned back into ints) so the rest of the package is protocol-blind.
:class:`ClientPool` holds the clients the load generators send inferences with, and with
``--streaming`` the gRPC streams (:class:`InferStream`) they send them on.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import math
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any

import numpy as np

from rayton_perf.config import GRPC, HTTP

# gRPC: workers that share one channel (HTTP/2 multiplexes them); beyond this we open another
# channel so a single connection's flow control is not what limits the load.
_GRPC_WORKERS_PER_CHANNEL = 32
_MAX_GRPC_CHANNELS = 8  # request-rate mode may allow 1024 in flight; that needs no 32 channels
# Samples timed when estimating the client's (de)serialisation cost.
_CODEC_SAMPLES = 30


def wire_headers(protocol: str, headers: dict[str, str] | None) -> dict[str, str]:
    """``-H`` headers as the protocol sends them: gRPC metadata keys must be lower case
    (grpc refuses others), HTTP names are case-insensitive so they travel as given."""
    headers = headers or {}
    if protocol == GRPC:
        return {name.lower(): value for name, value in headers.items()}
    return dict(headers)


def http_infer_headers(headers: dict[str, str]) -> dict[str, str]:
    """Headers of one HTTP inference: the user's, plus no response compression.

    aiohttp asks for gzip on every response unless told otherwise; perf_analyzer (libcurl)
    asks for none. A user's own ``Accept-Encoding`` wins. A fresh dict every call, since
    tritonclient adds per-request headers to it.
    """
    result = dict(headers)
    if not any(name.lower() == "accept-encoding" for name in result):
        result["Accept-Encoding"] = "identity"
    return result


def _ints_in_shapes(tensors: list[dict[str, Any]]) -> list[dict[str, Any]]:
    # Protobuf JSON writes int64 dims as strings.
    for tensor in tensors:
        tensor["shape"] = [int(d) for d in tensor.get("shape", [])]
    return tensors


class TritonConnection:
    """Control-plane calls (metadata, config, statistics) and client factories.

    Args:
        protocol: ``http`` or ``grpc``.
        url: ``host:port`` without a scheme.
        request_timeout_s: client-side bound on any one call; None keeps tritonclient's.
        verbose: pass tritonclient's verbose flag through (prints every request).
        headers: ``-H`` headers, sent with every call (perf_analyzer sends them on the
            control-plane calls too, as gRPC metadata on gRPC).
    """

    def __init__(
        self,
        protocol: str,
        url: str,
        request_timeout_s: float | None = None,
        verbose=False,
        headers: dict[str, str] | None = None,
    ):
        self.protocol = protocol
        self.url = url
        self.request_timeout_s = request_timeout_s
        self.verbose = verbose
        self.headers = wire_headers(protocol, headers)
        self._control = self.new_client(conn_limit=4)

    # -- clients ------------------------------------------------------------------------------

    def new_client(self, conn_limit: int = 100, private_channel: bool = False) -> Any:
        """A fresh tritonclient aio client for this server.

        Args:
            conn_limit: HTTP connection-pool size (aiohttp queues requests beyond it).
            private_channel: gRPC only; give the channel its own subchannel pool so it really
                opens a separate TCP connection instead of sharing the process-wide one.
        """
        if self.protocol == HTTP:
            import tritonclient.http.aio as httpclient

            return httpclient.InferenceServerClient(
                self.url,
                verbose=self.verbose,
                conn_limit=conn_limit,
                # aiohttp's total timeout is per request; tritonclient's default is 60 s.
                conn_timeout=self.request_timeout_s or 60.0,
            )
        import tritonclient.grpc as grpcclient
        import tritonclient.grpc.aio as grpcaio

        channel_args = None
        if private_channel:
            size = grpcclient.MAX_GRPC_MESSAGE_SIZE
            channel_args = [
                ("grpc.max_send_message_length", size),
                ("grpc.max_receive_message_length", size),
                ("grpc.use_local_subchannel_pool", 1),
            ]
        return grpcaio.InferenceServerClient(
            self.url, verbose=self.verbose, channel_args=channel_args
        )

    def make_input(self, name: str, datatype: str, array: np.ndarray, binary: bool) -> Any:
        """A ready-to-send InferInput; built once and reused for every request."""
        if self.protocol == HTTP:
            import tritonclient.http as httpclient

            tensor = httpclient.InferInput(name, list(array.shape), datatype)
            tensor.set_data_from_numpy(array, binary_data=binary)
            return tensor
        import tritonclient.grpc as grpcclient

        tensor = grpcclient.InferInput(name, list(array.shape), datatype)
        tensor.set_data_from_numpy(array)
        return tensor

    def make_shm_input(self, name: str, datatype: str, shape: Sequence[int]) -> Any:
        """An InferInput without data (its data named in a shared-memory region)."""
        if self.protocol == HTTP:
            import tritonclient.http as httpclient

            return httpclient.InferInput(name, list(shape), datatype)
        import tritonclient.grpc as grpcclient

        return grpcclient.InferInput(name, list(shape), datatype)

    def make_output(self, name: str, binary: bool = True) -> Any:
        """A requested output; HTTP asks for binary data (perf_analyzer's default) unless
        ``binary`` is False (``--output-tensor-format json``)."""
        if self.protocol == HTTP:
            import tritonclient.http as httpclient

            return httpclient.InferRequestedOutput(name, binary_data=binary)
        import tritonclient.grpc as grpcclient

        return grpcclient.InferRequestedOutput(name)

    # -- control plane ------------------------------------------------------------------------

    async def server_metadata(self) -> dict[str, Any]:
        """``GET /v2``: name, version, extensions."""
        headers = self.headers or None
        if self.protocol == HTTP:
            return await self._control.get_server_metadata(headers=headers)
        return await self._control.get_server_metadata(
            headers=headers, as_json=True, client_timeout=self.request_timeout_s
        )

    async def model_metadata(self, model: str, version: str = "") -> dict[str, Any]:
        """``GET /v2/models/{m}[/versions/{v}]`` with integer shapes."""
        headers = self.headers or None
        if self.protocol == HTTP:
            meta = await self._control.get_model_metadata(model, version, headers=headers)
        else:
            meta = await self._control.get_model_metadata(
                model,
                version,
                headers=headers,
                as_json=True,
                client_timeout=self.request_timeout_s,
            )
        meta["inputs"] = _ints_in_shapes(meta.get("inputs", []))
        meta["outputs"] = _ints_in_shapes(meta.get("outputs", []))
        return meta

    async def model_config(self, model: str, version: str = "") -> dict[str, Any]:
        """``GET /v2/models/{m}[/versions/{v}]/config`` as Triton's config JSON."""
        headers = self.headers or None
        if self.protocol == HTTP:
            return await self._control.get_model_config(model, version, headers=headers)
        answer = await self._control.get_model_config(
            model, version, headers=headers, as_json=True, client_timeout=self.request_timeout_s
        )
        config = answer.get("config", {})
        # Protobuf JSON drops zero-valued fields; Triton's HTTP JSON always has this one.
        config["max_batch_size"] = int(config.get("max_batch_size", 0))
        return config

    async def model_statistics(self, model: str, version: str = "") -> dict[str, Any]:
        """``GET /v2/models/{m}[/versions/{v}]/stats`` as ``{"model_stats": [...]}``.

        gRPC answers keep protobuf JSON's quirks (int64 as strings, zero fields absent);
        :mod:`rayton_perf.server_stats` reads every counter with ``int(x.get(k, 0))``.
        """
        headers = self.headers or None
        if self.protocol == HTTP:
            return await self._control.get_inference_statistics(model, version, headers=headers)
        return await self._control.get_inference_statistics(
            model, version, headers=headers, as_json=True, client_timeout=self.request_timeout_s
        )

    async def register_system_region(self, name: str, key: str, byte_size: int) -> None:
        """Register a system shared-memory region."""
        headers = self.headers or None
        await self._control.register_system_shared_memory(name, key, byte_size, headers=headers)

    async def unregister_system_regions(self) -> None:
        """Unregister every system shared-memory region of the server."""
        await self._control.unregister_system_shared_memory(headers=self.headers or None)

    async def register_cuda_region(
        self, name: str, raw_handle: bytes, device_id: int, byte_size: int
    ) -> None:
        """Register a CUDA shared-memory region (``raw_handle``: its IPC handle in base64)."""
        await self._control.register_cuda_shared_memory(
            name, raw_handle.decode(), device_id, byte_size, headers=self.headers or None
        )

    async def unregister_cuda_regions(self) -> None:
        """Unregister every CUDA shared-memory region of the server."""
        await self._control.unregister_cuda_shared_memory(headers=self.headers or None)

    async def close(self) -> None:
        """Close the control-plane client."""
        await self._control.close()


class InferStream:
    """One gRPC ``ModelStreamInfer`` stream that requests are sent on (``--streaming``).

    Each request gets an id of its own and is answered by the response carrying it (one
    response per request: decoupled models are refused). tritonclient drops the id of an error
    response, so an error answers the oldest request still waiting. A stream that ends or
    breaks fails every request still waiting on it.

    Args:
        client: a tritonclient aio gRPC client.
        headers: gRPC metadata sent when the stream opens.
    """

    def __init__(self, client: Any, headers: dict[str, str] | None = None) -> None:
        self._outgoing: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
        self._waiting: dict[str, asyncio.Future] = {}  # in send order
        self._ids = itertools.count()
        self._closed: BaseException | None = None
        responses = client.stream_infer(self._requests(), headers=headers or None)
        self._reader = asyncio.ensure_future(self._read(responses))

    async def infer(self, model: str, inputs: Any, version: str = "", outputs: Any = None) -> Any:
        """Send one request on the stream and wait for its response (an ``InferResult``)."""
        if self._closed is not None:
            raise self._closed
        request_id = str(next(self._ids))
        answered = asyncio.get_running_loop().create_future()
        self._waiting[request_id] = answered
        request = {"model_name": model, "inputs": inputs, "model_version": version}
        self._outgoing.put_nowait({**request, "outputs": outputs, "request_id": request_id})
        try:
            return await answered
        finally:
            self._waiting.pop(request_id, None)

    async def _requests(self) -> AsyncIterator[dict[str, Any]]:
        while (request := await self._outgoing.get()) is not None:
            yield request

    async def _read(self, responses: Any) -> None:
        from tritonclient.utils import InferenceServerException

        try:
            async for result, error in responses:
                key = (
                    result.get_response().id
                    if result is not None
                    else next(iter(self._waiting), None)
                )
                answered = self._waiting.pop(key, None) if key is not None else None
                if answered is None or answered.done():
                    continue
                if error is not None:
                    answered.set_exception(error)
                else:
                    answered.set_result(result)
            ended: BaseException = InferenceServerException("the server ended the stream")
        except Exception as err:  # the RPC failed: the server went away or refused the stream
            ended = err
        self._closed = ended
        for answered in self._waiting.values():
            if not answered.done():
                answered.set_exception(ended)

    async def close(self) -> None:
        """End the stream (the server answers what it has) and stop reading."""
        self._outgoing.put_nowait(None)
        try:
            await asyncio.wait_for(asyncio.shield(self._reader), timeout=5.0)
        except (asyncio.TimeoutError, Exception):
            self._reader.cancel()


class ClientPool:
    """The clients one load level sends inferences through.

    HTTP uses a single aiohttp-backed client whose connection pool is as large as the
    number of requests that may be in flight, so no request ever waits for a connection.
    gRPC opens one channel per ``_GRPC_WORKERS_PER_CHANNEL`` workers (at most
    ``_MAX_GRPC_CHANNELS``), each on its own TCP connection. With ``streams`` (gRPC's
    ``--streaming``) requests go on that many ``ModelStreamInfer`` streams instead, opened on
    first use: one per worker in concurrency mode, as perf_analyzer opens one per context.

    Args:
        connection: where to connect.
        max_in_flight: most requests this level can have outstanding at once.
        streams: how many streams to spread requests over (0: unary calls).
    """

    def __init__(self, connection: TritonConnection, max_in_flight: int, streams: int = 0):
        self.protocol = connection.protocol
        if connection.protocol == GRPC:
            wanted = math.ceil(max_in_flight / _GRPC_WORKERS_PER_CHANNEL)
            channels = min(max(1, wanted), _MAX_GRPC_CHANNELS)
            self.clients = [
                connection.new_client(private_channel=channels > 1) for _ in range(channels)
            ]
        else:
            self.clients = [connection.new_client(conn_limit=max(1, max_in_flight))]
        self._stream_count = streams
        self._streams: dict[int, InferStream] = {}
        self._headers = connection.headers

    def client_for(self, worker: int) -> Any:
        """The client worker number ``worker`` should use."""
        return self.clients[worker % len(self.clients)]

    def stream_for(self, worker: int) -> InferStream:
        """The stream worker number ``worker`` sends on (``streams`` > 0 only)."""
        index = worker % self._stream_count
        stream = self._streams.get(index)
        if stream is None:
            stream = self._streams[index] = InferStream(self.client_for(index), self._headers)
        return stream

    async def close(self) -> None:
        """Close every stream and client of the pool."""
        for stream in self._streams.values():
            await stream.close()
        for client in self.clients:
            await client.close()


def estimate_send_ns(
    protocol: str, model: str, version: str, inputs: Sequence[Any], outputs: Sequence[Any]
) -> int:
    """Mean time tritonclient takes to serialise one request of this payload, in ns.

    tritonclient's ``infer()`` builds, sends, waits and parses in one call, so the client's
    own share cannot be timed per request. This times the same serialisation code offline.
    Returns 0 where the client does not expose it.
    """
    try:
        if protocol == HTTP:
            import tritonclient.http as httpclient

            def build() -> Any:
                return httpclient.InferenceServerClient.generate_request_body(
                    list(inputs), outputs=list(outputs)
                )

        else:
            from tritonclient.grpc._utils import _get_inference_request

            def build() -> Any:
                request = _get_inference_request(
                    model, list(inputs), version, "", list(outputs), 0, False, False, 0, None, None
                )
                return request.SerializeToString()

        return _mean_ns(build)
    except Exception:  # a private helper moved: report "not measured" rather than fail
        return 0


def estimate_recv_ns(protocol: str, result: Any) -> int:
    """Mean time tritonclient takes to parse a response like ``result``, in ns.

    The body is rebuilt from the parsed result (JSON header plus zero bytes of the same
    binary size, or the serialised protobuf); parsing cost does not depend on the values.
    Returns 0 when the result cannot be re-encoded.
    """
    try:
        if protocol == HTTP:
            import tritonclient.http as httpclient

            header = json.dumps(result.get_response()).encode()
            binary = sum(
                int(out.get("parameters", {}).get("binary_data_size", 0))
                for out in result.get_response().get("outputs", [])
            )
            body = header + bytes(binary)
            length = len(header) if binary else None

            def parse() -> Any:
                return httpclient.InferenceServerClient.parse_response_body(
                    body, header_length=length
                )

        else:
            import tritonclient.grpc as grpcclient
            from tritonclient.grpc import service_pb2

            body = result.get_response().SerializeToString()

            def parse() -> Any:
                return grpcclient.InferResult(service_pb2.ModelInferResponse.FromString(body))

        return _mean_ns(parse)
    except Exception:  # unexpected result type: report "not measured" rather than fail
        return 0


def _mean_ns(func: Any) -> int:
    func()  # first call pays imports and caches
    start = time.perf_counter_ns()
    for _ in range(_CODEC_SAMPLES):
        func()
    return (time.perf_counter_ns() - start) // _CODEC_SAMPLES
