"""The free loopback port every server of accelscope (and of its tests) listens on: the OS's
choice, or the first free port of a range."""

from __future__ import annotations

import socket

import pytest

from accelscope.processes import free_port


def test_a_free_port_binds_and_nothing_listens_there() -> None:
    port = free_port()
    assert 0 < port < 65536
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", port))  # still free
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=1).close()


def test_within_a_range_a_taken_port_is_skipped_and_none_free_is_an_oserror() -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        taken = held.getsockname()[1]
        with pytest.raises(OSError, match=f"no free port on 127.0.0.1 in {taken}-{taken}"):
            free_port(within=range(taken, taken + 1))
        stop = min(taken + 50, 65536)
        if stop > taken + 1:
            assert free_port(within=range(taken, stop)) in range(taken + 1, stop)
