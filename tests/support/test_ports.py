import socket

from tests.support.ports import _RAY_PORT_RANGES, _ephemeral_range, free_port


def test_a_free_port_is_bindable_and_clear_of_ray_and_the_ephemeral_range():
    low, high = _ephemeral_range()
    for _ in range(20):
        port = free_port()
        assert not low <= port <= high
        assert not any(a <= port <= b for a, b in _RAY_PORT_RANGES)
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))
