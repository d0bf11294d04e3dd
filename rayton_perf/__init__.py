"""``rayton perf``: a perf_analyzer work-alike built on tritonclient's asyncio clients.

Modules, one job each:

* :mod:`~rayton_perf.config` run settings and option parsers;
* :mod:`~rayton_perf.client` one interface over the HTTP and gRPC aio clients;
* :mod:`~rayton_perf.server_stats` model discovery and statistics deltas;
* :mod:`~rayton_perf.inputs` input data: random, zero, perf_analyzer JSON or a directory;
* :mod:`~rayton_perf.load` closed-loop and open-loop load generators;
* :mod:`~rayton_perf.measure` windows, percentiles, stability;
* :mod:`~rayton_perf.metrics` the server's GPU metrics (``--collect-metrics``);
* :mod:`~rayton_perf.sweep` the order of levels: linear sweep or binary search;
* :mod:`~rayton_perf.result` one level's result and its CSV row;
* :mod:`~rayton_perf.runner` the profiler tying them together (:func:`run_level`);
* :mod:`~rayton_perf.report` stdout report, CSV and plot;
* :mod:`~rayton_perf.progress` progress display;
* :mod:`~rayton_perf.options` perf_analyzer's options, declared (:func:`add_arguments`);
* :mod:`~rayton_perf.cli` the command line: parsed options into a run (:func:`main`,
  :func:`run`).
"""

from rayton_perf.cli import add_arguments, main, run
from rayton_perf.config import PerfConfig, PerfError
from rayton_perf.result import LevelResult, csv_header
from rayton_perf.runner import Profiler, run_level

__all__ = [
    "LevelResult",
    "PerfConfig",
    "PerfError",
    "Profiler",
    "add_arguments",
    "csv_header",
    "main",
    "run",
    "run_level",
]
