"""Pin the thread count of a run (torch intra-op, OpenMP) and record what was in force."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from accelscope.errors import BadInputError

__all__ = ["ThreadSettings", "available_cores", "pinned_threads"]

_ENV_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")


def available_cores() -> int:
    """Cores this process may run on (its CPU affinity), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


@dataclass(frozen=True, kw_only=True)
class ThreadSettings:
    """Thread settings that were in force during a run."""

    requested: int
    intra_op: int
    inter_op: int
    omp_num_threads: str | None
    available_cores: int


@contextmanager
def pinned_threads(threads: int) -> Iterator[ThreadSettings]:
    """Set torch's intra-op threads and the OpenMP/MKL variables for the block, then restore.

    More threads than cores is allowed (users ask for it to see oversubscription) and recorded.
    """
    import torch

    if threads <= 0:
        raise BadInputError(f"threads must be a positive integer, got {threads}")
    previous_threads = torch.get_num_threads()
    previous_env = {name: os.environ.get(name) for name in _ENV_VARS}
    for name in _ENV_VARS:
        os.environ[name] = str(threads)
    torch.set_num_threads(threads)
    try:
        yield ThreadSettings(
            requested=threads,
            intra_op=torch.get_num_threads(),
            inter_op=torch.get_num_interop_threads(),
            omp_num_threads=os.environ.get("OMP_NUM_THREADS"),
            available_cores=available_cores(),
        )
    finally:
        torch.set_num_threads(previous_threads)
        for name, value in previous_env.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
