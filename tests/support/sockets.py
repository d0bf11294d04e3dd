"""The TCP sockets a set of processes listens on, read from ``/proc`` (Linux)."""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Iterable
from dataclasses import dataclass

_LISTEN = "0A"


@dataclass(frozen=True)
class Listener:
    address: str
    port: int
    pid: int

    @property
    def loopback(self) -> bool:
        address = ipaddress.ip_address(self.address)
        mapped = getattr(address, "ipv4_mapped", None)  # ::ffff:127.0.0.1
        return (mapped or address).is_loopback

    def describe(self) -> str:
        try:
            with open(f"/proc/{self.pid}/cmdline", "rb") as f:
                command = f.read().replace(b"\0", b" ").decode(errors="replace")[:80]
        except OSError:
            command = "?"
        return f"{self.address}:{self.port} (pid {self.pid}: {command})"


def _socket_inodes(pids: Iterable[int]) -> dict[int, int]:
    inodes: dict[int, int] = {}
    for pid in pids:
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
                if link.startswith("socket:["):
                    inodes[int(link[8:-1])] = pid
        except OSError:  # gone, or not ours to read
            continue
    return inodes


def _address(hex_address: str) -> str:
    raw = bytes.fromhex(hex_address)
    # /proc/net stores each 32-bit word in host (little-endian) order
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    return str(ipaddress.ip_address(words))


def listening_sockets(pids: Iterable[int]) -> list[Listener]:
    """Every TCP socket in LISTEN state that one of ``pids`` holds."""
    inodes = _socket_inodes(pids)
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                rows = f.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            if fields[3] != _LISTEN or int(fields[9]) not in inodes:
                continue
            address, port = fields[1].split(":")
            found.append(Listener(_address(address), int(port, 16), inodes[int(fields[9])]))
    return found
