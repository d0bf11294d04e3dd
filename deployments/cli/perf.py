"""``rayton perf``: measure a model like perf_analyzer (the flags are ``rayton_perf``'s)."""

from __future__ import annotations

import argparse

from rayton_perf.cli import add_arguments, run


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "perf", help="measure a model like perf_analyzer (tritonclient aio)"
    )
    add_arguments(parser)
    parser.set_defaults(func=run)
