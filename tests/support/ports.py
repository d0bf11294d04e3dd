"""Loopback ports for test and benchmark servers, clear of the ranges Ray takes for itself."""

from __future__ import annotations

import socket

_RAY_PORT_RANGES = ((10002, 19999), (30000, 31000), (40000, 41000))


def free_port() -> int:
    """An unused loopback port outside the ranges Ray hands to its workers and ingress."""
    while True:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        if not any(low <= port <= high for low, high in _RAY_PORT_RANGES):
            return port
