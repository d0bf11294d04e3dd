"""The profiler: discover the model, prepare requests once, then measure load levels.

Per level, as perf_analyzer: start the load, warm up (``--warmup`` seconds, our addition,
or perf_analyzer's ``--warmup-request-count``), then measure back-to-back windows until the
last three are stable or ``-r`` windows ran, snapshotting the server's statistics (and, with
``--collect-metrics``, its GPU metrics) at every window boundary. The load keeps running
between windows so a boundary never sees a ramp.

Library use::

    result = await run_level(PerfConfig(model_name="m", url="host:8000"), concurrency=4)
    print(result.throughput, result.latencies.p99_us, result.as_csv_row())
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from rayton_perf.client import (
    ClientPool,
    TritonConnection,
    estimate_recv_ns,
    estimate_send_ns,
    http_infer_headers,
)
from rayton_perf.config import COUNT_WINDOWS, GRPC, PerfConfig, PerfError
from rayton_perf.inputs import prepare_requests
from rayton_perf.load import ConcurrencyLoad, Load, RequestRateLoad
from rayton_perf.measure import (
    STABILITY_WINDOWS,
    LatencyStats,
    Window,
    is_stable,
    merge,
)
from rayton_perf.metrics import GpuMetrics, MetricsCollector, merge_metrics
from rayton_perf.progress import Progress
from rayton_perf.result import CONCURRENCY, REQUEST_RATE, LevelResult, format_number
from rayton_perf.server_stats import (
    ModelInfo,
    ServerStats,
    discover_model,
    parse_statistics,
    supports_statistics,
    window_delta,
)
from rayton_perf.shared_memory import SharedMemoryData

# count_windows: a window also ends after this many measurement intervals, so a stalled
# server cannot hold the run forever.
COUNT_WINDOW_TIME_FACTOR = 10
# --request-count: longest wait for the requests to finish.
REQUEST_COUNT_CAP_S = 600.0
# Time given to requests still in flight when a level ends.
DRAIN_TIMEOUT_S = 10.0
_TICK_S = 0.25


class Profiler:
    """A connection to one model, ready to measure load levels.

    Use as ``async with Profiler(config) as profiler: await profiler.run_level(...)``.

    Args:
        config: run settings.
        progress: progress display; None shows none.
        on_window: called with a line of text after every window (verbose pass lines).
    """

    def __init__(
        self,
        config: PerfConfig,
        progress: Progress | None = None,
        on_window: Callable[[str], None] | None = None,
    ):
        self.config = config
        self.progress = progress or Progress(enabled=False)
        self.on_window = on_window
        self.connection: TritonConnection | None = None
        self.model: ModelInfo | None = None
        self.collect_stats = False
        self.server_metadata: dict[str, Any] = {}
        self._payloads: list[list[Any]] = []
        self._outputs: list[Any] = []
        self._shared: SharedMemoryData | None = None  # --shared-memory's regions
        self._send_ns = 0
        self._recv_ns: int | None = None
        self.warnings: list[str] = []  # messages about the last level, for the caller
        self.metrics: MetricsCollector | None = None
        self._last_pass = ""  # latest window's numbers, shown in the status line

    async def __aenter__(self) -> Profiler:
        try:
            await self.open()
        except BaseException:
            await self.close()  # no unclosed client sessions when setup fails
            raise
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def open(self) -> None:
        """Validate settings, query the server and model, and build every request once.

        Raises:
            PerfError: bad settings, unreachable server, unusable model or input data.
        """
        config = self.config
        config.validate()
        self.connection = TritonConnection(
            config.protocol, config.resolved_url, config.request_timeout_s, headers=config.headers
        )
        try:
            self.server_metadata = await self.connection.server_metadata()
        except Exception as err:
            raise PerfError(
                f"failed to get server metadata from {config.protocol}://"
                f"{config.resolved_url}: {err}"
            ) from None
        self.collect_stats = supports_statistics(self.server_metadata)
        self.model = await discover_model(self.connection, config.model_name, config.model_version)
        requests = prepare_requests(
            self.model,
            config.batch_size,
            config.shapes,
            config.input_data,
            config.string_length,
            config.string_data,
            config.seed,
        )
        datatypes = {t.name: t.datatype for t in self.model.inputs}
        if config.shared_memory != "none":
            self._shared = SharedMemoryData(self.connection, config.shared_memory)
            self._payloads = await self._shared.inputs(requests, datatypes)
            self._outputs = await self._shared.outputs(
                [t.name for t in self.model.outputs], config.output_shared_memory_size
            )
        else:
            # Built once: every request reuses these InferInput objects (and their bytes).
            self._payloads = [
                [
                    self.connection.make_input(name, datatypes[name], array, config.binary_inputs)
                    for name, array in request.items()
                ]
                for request in requests
            ]
            self._outputs = [
                self.connection.make_output(t.name, config.binary_outputs)
                for t in self.model.outputs
            ]
        if config.collect_metrics:
            self.metrics = MetricsCollector(config.resolved_metrics_url, config.metrics_interval_ms)
        self._send_ns = estimate_send_ns(
            config.protocol,
            config.model_name,
            config.model_version,
            self._payloads[0],
            self._outputs,
        )

    async def close(self) -> None:
        """Unregister the run's shared-memory regions; close the control connection."""
        if self._shared is not None:
            await self._shared.close()
            self._shared = None
        if self.connection is not None:
            await self.connection.close()
            self.connection = None

    # -- one level ----------------------------------------------------------------------------

    async def run_level(
        self, concurrency: int | None = None, request_rate: float | None = None
    ) -> LevelResult:
        """Measure one load level: exactly one of ``concurrency`` or ``request_rate``.

        Raises:
            PerfError: a request failed (the first error is in the message), or the server's
                statistics could not be read.
        """
        if (concurrency is None) == (request_rate is None):
            raise ValueError("give exactly one of concurrency or request_rate")
        if self.connection is None or self.model is None:
            raise RuntimeError("Profiler.open() has not been called")
        config = self.config
        mode = CONCURRENCY if concurrency is not None else REQUEST_RATE
        label = (
            f"concurrency {concurrency}"
            if mode == CONCURRENCY
            else f"rate {format_number(request_rate)}/s"
        )
        self.warnings = []
        self._last_pass = ""
        if concurrency is not None and concurrency < 1:
            raise PerfError("concurrency must be >= 1")
        if request_rate is not None and not request_rate > 0:
            raise PerfError("request rate must be > 0")
        max_in_flight = concurrency if concurrency is not None else config.rate_in_flight_limit
        streams = 0
        if config.streaming:  # perf_analyzer: a stream per context (worker)
            streams = concurrency if concurrency is not None else config.max_threads
        pool = ClientPool(self.connection, max_in_flight, streams)
        load: Load | None = None
        try:
            if config.warmup_request_count:
                # perf_analyzer's counted warm-up: its own load, finished before measuring.
                warmup = self._new_load(
                    pool, concurrency, request_rate, config.warmup_request_count
                )
                await self._warm_up_requests(warmup, label)
            if config.request_count:
                # A counted run must not spend its requests on warming up: warm up with a
                # separate, unbounded load first.
                if config.warmup_s > 0:
                    warmup = self._new_load(pool, concurrency, request_rate, 0)
                    await self._warm_up(warmup, label, stop_after=True)
                load = self._new_load(pool, concurrency, request_rate, config.request_count)
                load.start()
            elif config.warmup_request_count:
                load = self._new_load(pool, concurrency, request_rate, 0)
                load.start()
            else:
                # The same load carries on from warm-up into the first window: no ramp.
                load = self._new_load(pool, concurrency, request_rate, 0)
                await self._warm_up(load, label, stop_after=False)
            if self.metrics is not None:
                self.metrics.start()
            windows, stable = await self._measure(load, label, mode == REQUEST_RATE)
        finally:
            if self.metrics is not None:
                await self.metrics.stop()
            if load is not None:
                await load.stop(DRAIN_TIMEOUT_S)
            self.progress.clear()
            await pool.close()
        self._raise_if_failed(load, "measurement")
        self._calibrate_recv(load)
        return self._result(mode, concurrency, request_rate, windows, stable)

    @contextlib.asynccontextmanager
    async def sustained_load(self, concurrency: int) -> AsyncIterator[Load]:
        """A closed-loop load of ``concurrency`` requests, running until the block ends, with
        no windows: for callers that measure it themselves (``load.buffer.completed``).

        Raises:
            PerfError: a request failed (the first error is in the message).
        """
        if self.connection is None or self.model is None:
            raise RuntimeError("Profiler.open() has not been called")
        if concurrency < 1:
            raise PerfError("concurrency must be >= 1")
        streams = concurrency if self.config.streaming else 0
        pool = ClientPool(self.connection, concurrency, streams)
        load = self._new_load(pool, concurrency, None, 0)
        load.start()
        try:
            yield load
        finally:
            await load.stop(DRAIN_TIMEOUT_S)
            await pool.close()
        self._raise_if_failed(load, "measurement")

    def _new_load(
        self, pool: ClientPool, concurrency: int | None, rate: float | None, limit: int
    ) -> Load:
        send = self._sender(pool)
        if concurrency is not None:
            return ConcurrencyLoad(send, concurrency, request_limit=limit)
        return RequestRateLoad(
            send,
            rate,
            self.config.request_distribution,
            self.config.rate_in_flight_limit,
            self.config.seed,
            request_limit=limit,
            intervals_ns=self.config.request_intervals_ns or None,
        )

    def _sender(self, pool: ClientPool) -> Callable[[int, int], Any]:
        model, version = self.config.model_name, self.config.model_version
        payloads, outputs = self._payloads, self._outputs
        timeout = self.config.request_timeout_s
        grpc = self.config.protocol == GRPC
        streaming = self.config.streaming
        headers = self.connection.headers if self.connection is not None else {}

        async def send(worker: int, seq: int) -> Any:
            inputs = payloads[seq % len(payloads)]
            if streaming:
                sent = pool.stream_for(worker).infer(model, inputs, version, outputs)
                return await asyncio.wait_for(sent, timeout)
            client = pool.client_for(worker)
            if grpc:
                return await client.infer(
                    model,
                    inputs,
                    version,
                    outputs=outputs,
                    client_timeout=timeout,
                    headers=headers or None,
                )
            # HTTP: the pool's aiohttp session enforces the timeout.
            return await client.infer(
                model, inputs, version, outputs=outputs, headers=http_infer_headers(headers)
            )

        return send

    async def _warm_up(self, load: Load, label: str, stop_after: bool) -> None:
        """Start ``load``, run it for ``warmup_s`` and throw its measurements away."""
        load.start()
        deadline = time.monotonic() + self.config.warmup_s
        try:
            while (left := deadline - time.monotonic()) > 0 and not load.failed:
                self.progress.status(
                    f"[perf] {label}: warming up {self.config.warmup_s - left:.1f}/"
                    f"{self.config.warmup_s:g} s, {load.buffer.completed} requests"
                )
                await asyncio.sleep(min(left, _TICK_S))
        finally:
            if stop_after:
                await load.stop(DRAIN_TIMEOUT_S)
        self._raise_if_failed(load, "warm-up")
        self._calibrate_recv(load)
        load.buffer.swap()

    async def _warm_up_requests(self, load: Load, label: str) -> None:
        """Send exactly ``warmup_request_count`` requests and wait for them (perf_analyzer's
        ``PerformWarmup``); their measurements are thrown away."""
        load.start()
        deadline = time.monotonic() + REQUEST_COUNT_CAP_S
        try:
            while not load.finished.is_set() and not load.failed:
                if time.monotonic() >= deadline:
                    raise PerfError(
                        f"warm-up did not finish {self.config.warmup_request_count} requests "
                        f"within {REQUEST_COUNT_CAP_S:g} s"
                    )
                self.progress.status(
                    f"[perf] {label}: warming up {load.buffer.completed}/"
                    f"{self.config.warmup_request_count} requests"
                )
                await asyncio.sleep(_TICK_S / 5)
        finally:
            await load.stop(DRAIN_TIMEOUT_S)
        self._raise_if_failed(load, "warm-up")
        self._calibrate_recv(load)

    async def _measure(
        self, load: Load, label: str, relax_latency: bool
    ) -> tuple[list[Window], bool]:
        """Measure windows on a running load until stable or out of trials.

        ``relax_latency``: accept a stable throughput alone once the trials run out (as
        perf_analyzer does for its asynchronous request-rate mode).
        """
        config = self.config
        windows: list[Window] = []
        stable = False
        start_stats = await self._snapshot()
        # Requests finished while the snapshot was taken belong to no window.
        load.buffer.swap()
        window_start = time.perf_counter_ns()
        for trial in range(1, config.max_trials + 1):
            await self._wait_window(load, window_start, trial, label)
            window_end = time.perf_counter_ns()
            records, sent = load.buffer.swap()
            end_stats = await self._snapshot()
            duration = window_end - window_start
            if config.request_count and records:
                # perf_analyzer clamps a counted run to first start .. last end.
                duration = max(r.end_ns for r in records) - min(r.start_ns for r in records)
            window = Window(
                duration_ns=max(duration, 1),
                latencies_ns=[r.latency_ns for r in records if r.ok],
                batch_size=config.batch_size,
                error_count=sum(1 for r in records if not r.ok),
                delayed_count=sum(1 for r in records if r.delayed),
                sent_count=sent,
                server=self._server_delta(start_stats, end_stats, len(records)),
                metrics=self._take_metrics(),
            )
            windows.append(window)
            self._report_window(label, trial, window)
            start_stats, window_start = end_stats, window_end
            if load.failed:
                break
            if config.request_count:
                stable = True  # one counted window, no stability search (perf_analyzer)
                break
            if is_stable(windows, config.stability_percentage, config.percentile):
                stable = True
                break
        if (
            not stable
            and relax_latency
            and not load.failed
            and is_stable(windows, config.stability_percentage, check_latency=False)
        ):
            # perf_analyzer's asynchronous modes accept a stable throughput alone.
            self.warnings.append(
                "Warning: Request latency is not stabilizing. Please try lowering the request rate."
            )
            stable = True
        return windows, stable

    async def _wait_window(self, load: Load, start_ns: int, trial: int, label: str) -> None:
        """Return when the window is over: by time, by count, or when the load ended."""
        config = self.config
        interval_s = config.measurement_interval_ms / 1000
        if config.request_count:
            limit_s = REQUEST_COUNT_CAP_S
        elif config.measurement_mode == COUNT_WINDOWS:
            limit_s = interval_s * COUNT_WINDOW_TIME_FACTOR
        else:
            limit_s = interval_s
        deadline = start_ns + int(limit_s * 1e9)
        baseline = load.buffer.completed
        while True:
            now = time.perf_counter_ns()
            done = load.buffer.completed - baseline
            if now >= deadline or load.failed or load.finished.is_set():
                return
            if (
                not config.request_count
                and config.measurement_mode == COUNT_WINDOWS
                and done >= config.measurement_request_count
            ):
                return
            self.progress.status(
                f"[perf] {label}: window {trial}/{config.max_trials} "
                f"{(now - start_ns) / 1e9:.1f}/{limit_s:g} s, {done} requests{self._last_pass}"
            )
            await asyncio.sleep(min((deadline - now) / 1e9, _TICK_S))

    async def _snapshot(self) -> dict[tuple[str, str], ServerStats] | None:
        if not self.collect_stats:
            return None
        try:
            payload = await self.connection.model_statistics(
                self.config.model_name, self.config.model_version
            )
        except Exception as err:
            raise PerfError(f"failed to get server statistics: {err}") from None
        return parse_statistics(payload)

    def _server_delta(self, start: Any, end: Any, completed: int) -> ServerStats | None:
        """The window's server counters; conformance problems become warnings.

        perf_analyzer aborts on both problems checked here, so a server under test that
        trips them would break perf_analyzer even though this tool carries on.
        """
        if start is None or end is None:
            return None
        try:
            delta = window_delta(self.config.model_name, self.config.model_version, start, end)
        except PerfError as err:
            if completed:
                self._warn_once(
                    f"server statistics: {err} although requests completed in the window "
                    "(perf_analyzer finds the version by a growing inference_stats.queue.count)"
                )
            return ServerStats()
        counts = {
            delta.compute_input_count,
            delta.compute_infer_count,
            delta.compute_output_count,
        }
        if len(counts) > 1:
            self._warn_once(
                "server statistics: compute_input/compute_infer/compute_output counts differ "
                "(perf_analyzer aborts: 'Server side statistics compute counts must be the "
                "same.')"
            )
        return delta

    def _take_metrics(self) -> list[GpuMetrics]:
        """The window's GPU metric scrapes (none without ``--collect-metrics``)."""
        if self.metrics is None:
            return []
        samples = self.metrics.take()
        for warning in self.metrics.warnings():
            self._warn_once(warning)
        return samples

    def _warn_once(self, message: str) -> None:
        if message not in self.warnings:
            self.warnings.append(message)

    def _report_window(self, label: str, trial: int, window: Window) -> None:
        text = f"  Pass [{trial}] throughput: {window.throughput:.6g} infer/sec. " + (
            f"Avg latency: {window.avg_latency_ns // 1000} usec "
            f"(std {window.std_latency_us} usec). "
            if self.config.percentile is None
            else f"p{self.config.percentile} latency: "
            f"{window.percentile_ns(self.config.percentile) // 1000} usec"
        )
        if self.on_window is not None:
            self.on_window(text)
        else:
            self.progress.event(f"[perf] {label}:{text[1:].rstrip()}")
        self._last_pass = (
            f" | last: {window.throughput:.6g} infer/sec, "
            f"{window.stabilizing_latency_ns(self.config.percentile) // 1000} usec"
        )

    def _raise_if_failed(self, load: Load, phase: str) -> None:
        if load.failed:
            raise PerfError(
                f"inference request failed during {phase}: {load.buffer.first_error} "
                f"({load.buffer.errors} failed)"
            )

    def _calibrate_recv(self, load: Load) -> None:
        if self._recv_ns is None and load.buffer.last_result is not None:
            self._recv_ns = estimate_recv_ns(self.config.protocol, load.buffer.last_result)

    def _result(
        self,
        mode: str,
        concurrency: int | None,
        rate: float | None,
        windows: list[Window],
        stable: bool,
    ) -> LevelResult:
        merged = merge(windows[-STABILITY_WINDOWS:])
        latencies = LatencyStats.of(merged, self.config.percentile)
        return LevelResult(
            mode=mode,
            concurrency=concurrency,
            request_rate=rate,
            batch_size=self.config.batch_size,
            throughput=merged.throughput,
            request_count=merged.request_count,
            duration_s=merged.duration_ns / 1e9,
            latencies=latencies,
            stabilizing_latency_us=merged.stabilizing_latency_ns(self.config.percentile) // 1000,
            server=merged.server,
            batch_size_distribution=dict(merged.server.batch_executions) if merged.server else {},
            stable=stable,
            windows=len(windows),
            error_count=merged.error_count,
            delayed_count=merged.delayed_count,
            send_rate=merged.send_rate,
            client_send_us=self._send_ns // 1000,
            client_recv_us=(self._recv_ns or 0) // 1000,
            cache_enabled=self.model.response_cache,
            warnings=list(self.warnings),
            gpu_metrics=merge_metrics(merged.metrics) if self.metrics is not None else None,
        )


async def run_level(
    config: PerfConfig, concurrency: int | None = None, request_rate: float | None = None
) -> LevelResult:
    """Connect, prepare and measure a single load level (library entry point).

    Args:
        config: run settings (``PerfConfig(model_name=..., url=..., protocol=...)``).
        concurrency: closed-loop level: requests kept in flight.
        request_rate: open-loop level: requests per second.

    Returns:
        The level's :class:`LevelResult`.

    Raises:
        PerfError: setup failed or a request failed.
    """
    async with Profiler(config) as profiler:
        return await profiler.run_level(concurrency=concurrency, request_rate=request_rate)
