"""Child processes that must not outlive accelscope: the parent-death signal (Linux
``prctl(PR_SET_PDEATHSIG)``) and a free loopback port for a server to listen on.

The signal is delivered when the *thread* that started the child ends, so start long-lived
children (servers) from the main thread.
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket

__all__ = ["die_with_parent", "free_port"]

_PR_SET_PDEATHSIG = 1


def die_with_parent(signum: int = signal.SIGTERM, parent_pid: int | None = None) -> None:
    """In a child (a ``preexec_fn``, or the child's first line): receive ``signum`` when the
    parent dies, and exit at once if it already has (``parent_pid``: the parent expected;
    default: any parent but init). A platform without ``prctl`` is left as it is."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signum)
    except (OSError, AttributeError):
        return
    parent = os.getppid()
    if (parent_pid is not None and parent != parent_pid) or parent == 1:
        os._exit(1)  # the parent died before prctl took effect


def free_port(host: str = "127.0.0.1", *, within: range | None = None) -> int:
    """A TCP port free on ``host`` now: nothing listens there (the OS's choice, or the first
    port of ``within`` that binds; :class:`OSError` when none does). Another process may take
    it before it is used, so a server that fails to bind should be retried on a new one."""
    if within is None:
        return _bind(host, 0)
    for port in within:
        try:
            return _bind(host, port)
        except OSError:
            continue
    raise OSError(f"no free port on {host} in {within.start}-{within.stop - 1}")


def _bind(host: str, port: int) -> int:
    with socket.socket() as probe:
        probe.bind((host, port))
        bound: int = probe.getsockname()[1]
        return bound
