"""Loopback ports for test and benchmark servers, clear of the ranges Ray takes for itself and
of the kernel's ephemeral range.

A port the kernel hands out for ``bind(("127.0.0.1", 0))`` comes from its ephemeral range,
which outgoing connections draw their local ports from too: between picking such a port and
a server binding it (a Ray cluster starting in between opens hundreds of connections), one of
them can take it ("Address already in use"). Ports are picked outside that range instead.
"""

from __future__ import annotations

import random
import socket

# Ray's workers and Serve's HAProxy (the brief's ranges) and the kernel's ephemeral ports.
_RAY_PORT_RANGES = ((10002, 19999), (30000, 31000), (40000, 41000))
_CANDIDATE_RANGES = ((20000, 29999), (61000, 65535))


def _ephemeral_range() -> tuple[int, int]:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as ranges:
            low, high = (int(word) for word in ranges.read().split())
        return low, high
    except (OSError, ValueError):
        return 32768, 60999  # Linux's default


def _clear(port: int, ephemeral: tuple[int, int]) -> bool:
    reserved = (*_RAY_PORT_RANGES, ephemeral)
    return not any(low <= port <= high for low, high in reserved)


def free_port() -> int:
    """An unused loopback port outside Ray's ranges and the kernel's ephemeral range."""
    ephemeral = _ephemeral_range()
    candidates = [
        port
        for low, high in _CANDIDATE_RANGES
        for port in range(low, high + 1)
        if _clear(port, ephemeral)
    ]
    for port in random.sample(candidates, min(len(candidates), 200)):
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free loopback port outside Ray's and the ephemeral ranges")
