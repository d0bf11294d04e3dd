"""Progress display and the profiler's statistics conformance warnings (no server)."""

from __future__ import annotations

import io

from rayton_perf.config import PerfConfig
from rayton_perf.progress import Progress
from rayton_perf.runner import Profiler
from rayton_perf.server_stats import ServerStats


class FakeTty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_tty_rewrites_one_line():
    stream = FakeTty()
    progress = Progress(stream)
    progress.status("window 1/10 0.5 s")
    progress.status("window 1/10 1 s")
    assert stream.getvalue() == "\rwindow 1/10 0.5 s\rwindow 1/10 1 s  "  # padded over
    progress.line("Pass [1] done")
    assert stream.getvalue().endswith("\r" + " " * 15 + "\rPass [1] done\n")
    assert "\n" not in stream.getvalue()[: -len("Pass [1] done\n")]


def test_non_tty_prints_rate_limited_lines():
    stream = io.StringIO()
    progress = Progress(stream, interval_s=60)
    progress.status("first")
    progress.status("second")  # within the interval: dropped
    progress.line("window result")  # always printed
    assert stream.getvalue().splitlines() == ["first", "window result"]
    assert "\r" not in stream.getvalue()


def test_disabled_progress_writes_nothing():
    stream = FakeTty()
    progress = Progress(stream, enabled=False)
    progress.status("x")
    progress.line("y")
    progress.clear()
    assert stream.getvalue() == ""


def _stats(version: str, queue: int, compute: tuple[int, int, int] = (0, 0, 0)):
    stats = ServerStats(queue_count=queue, success_count=queue)
    stats.compute_input_count, stats.compute_infer_count, stats.compute_output_count = compute
    return {("m", version): stats}


def test_profiler_warns_where_perf_analyzer_would_fail():
    profiler = Profiler(PerfConfig("m"))
    # Counters that did not move while requests completed: perf_analyzer cannot find the
    # version; this tool reports zeros and warns once.
    assert profiler._server_delta(_stats("1", 5), _stats("1", 5), 10) == ServerStats()
    assert profiler._server_delta(_stats("1", 5), _stats("1", 5), 10) == ServerStats()
    assert len(profiler.warnings) == 1
    assert "failed to find the requested model version" in profiler.warnings[0]
    # No completed requests: nothing to warn about.
    quiet = Profiler(PerfConfig("m"))
    quiet._server_delta(_stats("1", 5), _stats("1", 5), 0)
    assert quiet.warnings == []
    # Compute counts that disagree.
    delta = quiet._server_delta(_stats("1", 0), _stats("1", 4, (4, 3, 4)), 4)
    assert delta.queue_count == 4
    assert "compute counts must be the same" in quiet.warnings[0]
    # Without the statistics extension there is nothing to compare.
    assert quiet._server_delta(None, None, 4) is None
