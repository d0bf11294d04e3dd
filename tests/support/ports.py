"""Loopback ports for test and benchmark servers: the server's own choice
(:mod:`cluster.ports`), on loopback."""

from __future__ import annotations

from cluster.ports import free_port as free_port_on


def free_port() -> int:
    """An unused loopback port outside Ray's ranges and the kernel's ephemeral range."""
    return free_port_on("127.0.0.1")


def free_ports(count: int) -> list[int]:
    """``count`` distinct ports as :func:`free_port` picks them."""
    ports: list[int] = []
    while len(ports) < count:
        port = free_port()
        if port not in ports:
            ports.append(port)
    return ports
