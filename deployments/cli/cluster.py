"""``rayton cluster``: a multi-node Ray cluster on this machine, for development."""

from __future__ import annotations

import argparse
import sys

from cluster import dev_cluster

_COUNTS = ("workers", "gpus_per_worker", "cpus_per_worker", "head_cpus")


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "cluster",
        help="start a multi-node Ray cluster on this machine (head + workers with logical "
        "GPUs and per-GPU resources) for development; Ctrl-C stops every node",
    )
    parser.add_argument("--workers", type=int, default=2, help="worker nodes")
    parser.add_argument("--gpus-per-worker", type=int, default=2, help="logical GPUs per worker")
    parser.add_argument("--cpus-per-worker", type=int, default=1, help="logical CPUs per worker")
    parser.add_argument("--head-cpus", type=int, default=1, help="logical CPUs of the head node")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    for count in _COUNTS:
        if getattr(args, count) < 0:
            print(f"error: --{count.replace('_', '-')} must be >= 0", file=sys.stderr)
            return 2
    spec = dev_cluster.DevClusterSpec(
        args.workers, args.gpus_per_worker, args.cpus_per_worker, args.head_cpus
    )
    return dev_cluster.run(spec)
