"""The fixed cost: CPU a serving system takes at rest, by process.

``python -m benchmarks.idle_cost [--systems rayton] [--settle-s 20] [--window-s 30]``

Starts each system on the benchmark repositories as :mod:`benchmarks.run` does, lets it
settle, then reads the CPU time (user + system, from ``/proc``) of every process in its
process session over a window with no requests. Prints percent of one core per process, most
first. Settings under study (``RAY_SERVE_CONTROL_LOOP_INTERVAL_S``, ...) are read from the
environment by the servers it starts.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from benchmarks.cpu_per_request import session_cpu_by_process, used_between
from benchmarks.models import write_repositories
from benchmarks.run import start_system


def idle_shares(
    before: dict[tuple[int, str], float], after: dict[tuple[int, str], float], window_s: float
) -> list[tuple[float, str]]:
    """Percent of a core each process used between two readings, most first."""
    shares = [(used * 100 / window_s, key[1]) for key, used in used_between(before, after).items()]
    return sorted(shares, reverse=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--systems", default="rayton")
    parser.add_argument("--settle-s", type=float, default=20.0)
    parser.add_argument("--window-s", type=float, default=30.0)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="rayton-idle-") as tmp:
        root = Path(tmp)
        rayton_repo, reference_repo = write_repositories(root)
        repos = {"rayton": rayton_repo, "reference": reference_repo}
        for name in args.systems.split(","):
            system = start_system(name, repos, root)
            try:
                time.sleep(args.settle_s)
                before = session_cpu_by_process(system.session_id)
                time.sleep(args.window_s)
                shares = idle_shares(
                    before, session_cpu_by_process(system.session_id), args.window_s
                )
            finally:
                system.stop()
            print(f"{name} at rest: {sum(share for share, _ in shares):.1f}% of a core")
            for share, command in shares:
                if share >= 0.05:
                    print(f"  {share:6.2f}%  {command[:80]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
