"""``rayton status``: models, versions, states and replicas of a running server."""

from __future__ import annotations

import argparse
import json
import sys
import urllib.error
import urllib.request
from typing import Any

import ray
from ray import serve

from cluster.local import loopback_kept
from deployments.apps.builders import SERVER_APP_NAME
from deployments.apps.repository_access import CONTROLLER_DEPLOYMENT_NAME
from deployments.cli.settings import CONTROLLER_TIMEOUT_S
from deployments.http.server_routes import STATUS_PATH
from deployments.observability.status import format_status


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("status", help="models, versions, states and replicas of a server")
    parser.add_argument(
        "--url", default="127.0.0.1:8000", help="HOST:PORT of the server's HTTP endpoint"
    )
    parser.add_argument(
        "--address", default=None, help="ask the controller through this Ray cluster instead"
    )
    parser.add_argument("--json", action="store_true", help="the status document as JSON")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Models, versions, states and replicas of a running server, from its controller."""
    try:
        document = _fetch_status(args)
    except (OSError, RuntimeError, ValueError) as err:
        where = f"the Ray cluster at {args.address}" if args.address else f"http://{args.url}"
        print(f"error: no rayton server answered at {where}: {err}", file=sys.stderr)
        return 1
    print(json.dumps(document, indent=2) if args.json else format_status(document), end="")
    return 0


def _fetch_status(args: argparse.Namespace) -> dict[str, Any]:
    if args.address:
        return _status_through_ray(args.address)
    url = f"http://{args.url}{STATUS_PATH}"
    try:
        with urllib.request.urlopen(url, timeout=CONTROLLER_TIMEOUT_S) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as err:
        raise RuntimeError(f"{err.code} {err.read().decode(errors='replace')}") from None


def _status_through_ray(address: str) -> dict[str, Any]:
    with loopback_kept(address) as node_ip:
        ray.init(
            address=address, _node_ip_address=node_ip, logging_level="ERROR", log_to_driver=False
        )
    try:
        controller = serve.get_deployment_handle(
            CONTROLLER_DEPLOYMENT_NAME, app_name=SERVER_APP_NAME
        )
        return controller.status.remote().result(timeout_s=CONTROLLER_TIMEOUT_S)
    except KeyError:
        raise RuntimeError("it runs no rayton server application") from None
    finally:
        ray.shutdown()
