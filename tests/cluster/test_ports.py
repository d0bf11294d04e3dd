import socket

import pytest

from cluster.ports import RAY_PORT_RANGES, ephemeral_range, free_port


@pytest.mark.parametrize("host", ["127.0.0.1", "0.0.0.0"])
def test_a_free_port_is_bindable_and_clear_of_ray_and_the_ephemeral_range(host):
    low, high = ephemeral_range()
    for _ in range(20):
        port = free_port(host)
        assert not low <= port <= high
        assert not any(a <= port <= b for a, b in RAY_PORT_RANGES)
        with socket.socket() as sock:
            sock.bind((host, port))


def test_a_port_in_use_is_never_picked(monkeypatch):
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    monkeypatch.setattr("cluster.ports._CANDIDATE_RANGES", ((taken.getsockname()[1],) * 2,))
    monkeypatch.setattr("cluster.ports.ephemeral_range", lambda: (1, 2))
    monkeypatch.setattr("cluster.ports.RAY_PORT_RANGES", ())
    with pytest.raises(RuntimeError, match=r"no free port on 127\.0\.0\.1"):
        free_port("127.0.0.1")
    taken.close()
