"""Listening ports the server picks for itself, clear of Ray's ranges and the kernel's
ephemeral range.

A port the kernel hands out for ``bind((host, 0))`` comes from its ephemeral range, which
outgoing connections draw their local ports from too: between picking such a port and a
process binding it (a Ray cluster starting in between opens hundreds of connections), one of
them can take it, and HAProxy or a frontend then fails to start ("Address already in use").
"""

from __future__ import annotations

import random
import socket

# Ray's worker ports and Serve's direct-ingress ports for replicas (their defaults).
RAY_PORT_RANGES = ((10002, 19999), (30000, 31000), (40000, 41000))
_CANDIDATE_RANGES = ((20000, 29999), (61000, 65535))
_LINUX_DEFAULT_EPHEMERAL = (32768, 60999)
_PROBES = 200


def ephemeral_range() -> tuple[int, int]:
    """The kernel's range for outgoing connections' local ports."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as ranges:
            low, high = (int(word) for word in ranges.read().split())
        return low, high
    except (OSError, ValueError):
        return _LINUX_DEFAULT_EPHEMERAL


def free_port(host: str = "127.0.0.1") -> int:
    """A port free on ``host`` now, outside Ray's ranges and the ephemeral range."""
    reserved = (*RAY_PORT_RANGES, ephemeral_range())
    candidates = [
        port
        for low, high in _CANDIDATE_RANGES
        for port in range(low, high + 1)
        if not any(start <= port <= end for start, end in reserved)
    ]
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    for port in random.sample(candidates, min(len(candidates), _PROBES)):
        with socket.socket(family) as probe:
            try:
                probe.bind((host, port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port on {host} outside Ray's and the ephemeral ranges")
