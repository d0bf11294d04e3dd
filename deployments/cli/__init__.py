"""The ``rayton`` command: build a Serve config from a repository, or serve it directly."""

from __future__ import annotations

import argparse
import logging

from deployments.cli import build, cluster, kuberay, perf, serve, status

__all__ = ["main"]

# In the order `rayton --help` lists them.
_COMMANDS = (build, serve, status, kuberay, cluster, perf)


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    parser = argparse.ArgumentParser(prog="rayton", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    for command in _COMMANDS:
        command.add_parser(commands)
    args = parser.parse_args(argv)
    return args.func(args)
