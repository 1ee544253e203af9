"""How busy the loop's child processes (DataLoader workers) were over the measured steps, in
cores: their CPU time (live children plus those already reaped) over the steps' wall time, read
with psutil in the process that runs the loop. A what-if sizes torch's threads from this
measured load, not from the worker count (four workers idle 99 % of the time leave the cores
free)."""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["WorkerLoad", "children_cpu_s"]


def children_cpu_s() -> float | None:
    """CPU seconds of this process's children, live and reaped; ``None`` without psutil."""
    try:
        import psutil
    except ImportError:  # pragma: no cover - psutil is a dependency
        return None
    try:
        me = psutil.Process()
        times = me.cpu_times()
        total = times.children_user + times.children_system
        for child in me.children(recursive=True):
            try:
                t = child.cpu_times()
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue
            total += t.user + t.system
    except (psutil.Error, OSError):
        return None
    return float(total)


class WorkerLoad:
    """Children's CPU time between :meth:`begin` and :meth:`end` over the wall time."""

    def __init__(
        self,
        read: Callable[[], float | None] = children_cpu_s,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.read = read
        self.clock = clock
        self._start: tuple[float, float] | None = None
        self.busy_cores: float | None = None

    def begin(self) -> None:
        """The measured steps start."""
        cpu = self.read()
        self._start = None if cpu is None else (cpu, self.clock())

    def end(self) -> float | None:
        """The measured steps are over: their busy cores (``None``: not measured)."""
        if self._start is None:
            return self.busy_cores
        cpu = self.read()
        wall = self.clock() - self._start[1]
        if cpu is not None and wall > 0:
            self.busy_cores = max(0.0, cpu - self._start[0]) / wall
        self._start = None
        return self.busy_cores
