"""The HTTP client a replica calls another replica's own port with (behind HAProxy every
replica has one): a sequence's request forwarded to its holder
(:mod:`deployments.apps.sequence_ports`), a request naming another node's shared-memory
region (:mod:`deployments.apps.region_hops`)."""

from __future__ import annotations

import aiohttp

# Long enough for a node under load to accept, short enough that a lost node fails promptly.
CONNECT_TIMEOUT_S = 10.0


def port_client() -> aiohttp.ClientSession:
    """A session without a connection limit or a total timeout (a model's run bounds the
    answer), that leaves the body as the replica encoded it."""
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0),
        timeout=aiohttp.ClientTimeout(total=None, sock_connect=CONNECT_TIMEOUT_S),
        auto_decompress=False,
    )
