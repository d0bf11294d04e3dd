"""``rayton perf``: a perf_analyzer work-alike built on tritonclient's asyncio clients.

Modules, one job each:

* :mod:`~cluster.perf.config` run settings and option parsers;
* :mod:`~cluster.perf.client` one interface over the HTTP and gRPC aio clients;
* :mod:`~cluster.perf.server_stats` model discovery and statistics deltas;
* :mod:`~cluster.perf.inputs` input data: random, zero or perf_analyzer JSON;
* :mod:`~cluster.perf.load` closed-loop and open-loop load generators;
* :mod:`~cluster.perf.measure` windows, percentiles, stability;
* :mod:`~cluster.perf.result` one level's result and its CSV row;
* :mod:`~cluster.perf.runner` the profiler tying them together (:func:`run_level`);
* :mod:`~cluster.perf.report` stdout report, CSV and plot;
* :mod:`~cluster.perf.progress` progress display;
* :mod:`~cluster.perf.cli` the command line (:func:`main`, :func:`add_arguments`).
"""

from cluster.perf.cli import add_arguments, main, run
from cluster.perf.config import PerfConfig, PerfError
from cluster.perf.result import LevelResult, csv_header
from cluster.perf.runner import Profiler, run_level

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
