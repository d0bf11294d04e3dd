"""Serve's HAProxy with every listener on the address rayton serves on.

Ray 2.60's HAProxy config binds its stats page and Prometheus exporter on every interface
(``bind *:8404``, ``bind :9101``) whatever ``http_options.host`` says. For a cluster rayton
starts itself, Serve runs HAProxy through a small wrapper (``RAY_SERVE_HAPROXY_BINARY_PATH``)
that rewrites those two binds to the serving address in the config file Serve passes with
``-f`` before it runs the real binary; the frontends already bind that address.
"""

from __future__ import annotations

import atexit
import ipaddress
import os
import shlex
import shutil
import stat
import tempfile

_WRAPPER = """#!/bin/sh
# rayton: Serve's HAProxy with its stats and Prometheus listeners on {host} (not every interface)
previous=""
for argument in "$@"; do
  if [ "$previous" = "-f" ]; then
    sed -i -e 's/^\\([[:space:]]*bind \\)\\*:/\\1{host}:/' \\
      -e 's/^\\([[:space:]]*bind \\):/\\1{host}:/' "$argument"
  fi
  previous="$argument"
done
exec {binary} "$@"
"""


def bindable_host(host: str) -> bool:
    """Whether HAProxy's ``bind HOST:PORT`` takes ``host`` as written (IPv4 or a name)."""
    try:
        return ipaddress.ip_address(host).version == 4
    except ValueError:
        return bool(host) and ":" not in host


def haproxy_wrapper(host: str) -> str | None:
    """Path of an executable that runs Serve's HAProxy with its binds on ``host``, or None
    where ``host`` is every interface anyway, cannot be written into a bind, or no HAProxy
    binary is installed."""
    if host in ("0.0.0.0", "") or not bindable_host(host):
        return None
    try:
        from ray.serve._private.haproxy import get_haproxy_binary

        binary = get_haproxy_binary()
    except Exception:  # no HAProxy here: Serve reports that itself
        return None
    directory = tempfile.mkdtemp(prefix="rayton-haproxy-")
    atexit.register(shutil.rmtree, directory, True)
    path = os.path.join(directory, "haproxy")
    with open(path, "w", encoding="utf-8") as out:
        out.write(_WRAPPER.format(host=host, binary=shlex.quote(binary)))
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR)
    return path
