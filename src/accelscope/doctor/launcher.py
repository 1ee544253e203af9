"""Runs the user's script in an instrumented child process, bounded in time, watched from outside.

The child (``python -m accelscope.doctor.inprocess.bootstrap``, the same interpreter) runs in its
own process group with the script's output passed straight through. The parent samples telemetry
of the child's process tree, counts steps from a progress pipe (one byte per step), and
enforces two bounds: a wall-clock ``timeout_s`` for the whole run and a ``stall_s`` within which
the next step must arrive. On a bound, or Ctrl-C, the child is asked for what it has (SIGUSR1,
a short grace), then its whole group (DataLoader workers too) is killed.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from accelscope.doctor.inprocess.session import PROGRESS_FD_ENV
from accelscope.doctor.kineto import read_live_trace
from accelscope.doctor.profile import Profile
from accelscope.errors import exception_line
from accelscope.hardware.telemetry import NvmlSource, Telemetry, TelemetrySampler

__all__ = ["ChildConfig", "ChildRun", "Launcher", "profile_of"]

_GRACE_S = 3.0
_POLL_S = 0.05


@dataclass(frozen=True, kw_only=True)
class ChildConfig:
    """One instrumented run: the script, its arguments, how many steps, which what-if."""

    script: Path
    args: tuple[str, ...] = ()
    warmup: int = 10
    steps: int = 50
    full: bool = True
    trace_steps: int = 3
    probe: bool = True
    whatif: dict[str, Any] | None = None
    seed: int | None = None
    """Seed ``random``, ``numpy`` and ``torch`` with this before the script runs, so that runs
    compared with each other start from the same weights and draw the same data (a script's
    own seeding still wins); ``None``: leave them unseeded."""

    def payload(self, result_path: Path) -> dict[str, Any]:
        """The JSON the bootstrap reads (the diagnosis run, ``full``, also records the
        device timeline of a few steps after the warm-up, beside the result, when on CUDA)."""
        trace = result_path.with_name("device_trace.json") if self.full else None
        return {
            "script": str(self.script),
            "args": list(self.args),
            "warmup": self.warmup,
            "steps": self.steps,
            "full": self.full,
            "trace_steps": self.trace_steps,
            "probe": self.probe,
            "whatif": self.whatif,
            "seed": self.seed,
            "result_path": str(result_path),
            "device_trace_path": None if trace is None else str(trace),
        }


@dataclass(frozen=True, kw_only=True)
class ChildRun:
    """What came back from one child: its profile (if it wrote one) and how it ended.

    ``ended_by`` is ``exit`` (the child left by itself), ``timeout``, ``stall`` or
    ``interrupt``; ``returncode`` is negative for a signal.
    """

    profile: Profile | None
    telemetry: Telemetry | None
    ended_by: str
    returncode: int | None
    steps_seen: int
    wall_s: float
    unreadable: str = ""
    notes: list[str] = field(default_factory=list)
    telemetry_origin_s: float | None = None
    """``time.monotonic()`` when telemetry sampling began (its samples' ``t_s`` count from
    here); with the profile's ``first_step_monotonic_s`` it places the steps on that clock."""

    @property
    def telemetry_steps_at_s(self) -> float | None:
        """Where the first recorded step started on the telemetry clock (seconds since
        sampling began); ``None`` when either end is unknown."""
        profile = self.profile
        if (
            self.telemetry_origin_s is None
            or profile is None
            or profile.first_step_monotonic_s is None
        ):
            return None
        return profile.first_step_monotonic_s - self.telemetry_origin_s


class Launcher:
    """Starts and watches instrumented children (see the module doc).

    Args:
        timeout_s: Wall-clock bound for one run.
        stall_s: Bound on the wait for each step (the first included).
        python: Interpreter for the child (default: this one).
        env: Extra environment variables for the child.
        stdout: File descriptor for the child's stdout (default: inherited).
        telemetry_interval_s: Sampling period; ``None`` turns telemetry off.
        gpu: Sample GPUs through NVML.
        cwd: Working directory of the child (default: this one).
    """

    def __init__(
        self,
        *,
        timeout_s: float = 300.0,
        stall_s: float = 120.0,
        python: str = sys.executable,
        env: dict[str, str] | None = None,
        stdout: int | None = None,
        telemetry_interval_s: float | None = 0.1,
        gpu: bool = True,
        cwd: Path | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.timeout_s = timeout_s
        self.stall_s = stall_s
        self.python = python
        self.env = dict(env or {})
        self.stdout = stdout
        self.telemetry_interval_s = telemetry_interval_s
        self.gpu = gpu
        self.cwd = cwd
        self.clock = clock

    def run(self, config: ChildConfig, on_step: Callable[[int], None] | None = None) -> ChildRun:
        """Run ``config`` to completion or a bound; never raises for the script's failures."""
        with tempfile.TemporaryDirectory(prefix="accelscope-doctor-") as workdir:
            result_path = Path(workdir) / "result.json"
            config_path = Path(workdir) / "config.json"
            config_path.write_text(json.dumps(config.payload(result_path)), encoding="utf-8")
            return self._run(config_path, result_path, on_step)

    def _spawn(self, config_path: Path, write_fd: int) -> subprocess.Popen[bytes]:
        env = {**os.environ, **self.env, PROGRESS_FD_ENV: str(write_fd)}
        return subprocess.Popen(
            [self.python, "-m", "accelscope.doctor.inprocess.bootstrap", str(config_path)],
            stdin=subprocess.DEVNULL,
            stdout=self.stdout,
            pass_fds=(write_fd,),
            start_new_session=True,
            env=env,
            cwd=self.cwd,
        )

    def _run(
        self, config_path: Path, result_path: Path, on_step: Callable[[int], None] | None
    ) -> ChildRun:
        read_fd, write_fd = os.pipe()
        try:
            child = self._spawn(config_path, write_fd)
        finally:
            os.close(write_fd)
        origin = time.monotonic()  # the sampler's own clock starts now, within microseconds
        sampler = self._sampler(child.pid)
        started = last_step = self.clock()
        steps, ended_by = 0, "exit"
        try:
            while child.poll() is None:
                ready, _, _ = select.select([read_fd], [], [], _POLL_S)
                now = self.clock()
                if ready:
                    chunk = os.read(read_fd, 4096)
                    if chunk:
                        steps += len(chunk)
                        last_step = now
                        if on_step is not None:
                            on_step(steps)
                if now - started > self.timeout_s:
                    ended_by = "timeout"
                    break
                if now - last_step > self.stall_s:
                    ended_by = "stall"
                    break
        except KeyboardInterrupt:
            self._stop(child)
            os.close(read_fd)
            if sampler is not None:
                sampler.stop()
            raise
        if ended_by != "exit":
            self._stop(child)
        else:
            _kill_group(child.pid)  # DataLoader workers the script left behind
        os.close(read_fd)
        telemetry = sampler.stop() if sampler is not None else None
        profile, unreadable = _read_profile(result_path)
        return ChildRun(
            profile=profile,
            telemetry=telemetry,
            ended_by=ended_by,
            returncode=child.returncode,
            steps_seen=steps,
            wall_s=self.clock() - started,
            unreadable=unreadable,
            telemetry_origin_s=origin if telemetry is not None else None,
        )

    def _sampler(self, pid: int) -> TelemetrySampler | None:
        if self.telemetry_interval_s is None:
            return None
        try:
            sampler = TelemetrySampler(
                pid, self.telemetry_interval_s, gpu=NvmlSource() if self.gpu else None
            )
        except Exception:  # noqa: BLE001 - the child may already be gone; telemetry is optional
            return None
        sampler.start()
        return sampler

    def _stop(self, child: subprocess.Popen[bytes]) -> None:
        """Ask the child for its results (SIGUSR1), then kill its whole process group."""
        if child.poll() is None:
            try:
                child.send_signal(signal.SIGUSR1)
                child.wait(timeout=_GRACE_S)
            except subprocess.TimeoutExpired:
                pass
            except ProcessLookupError:
                pass
        _kill_group(child.pid)
        try:
            child.wait(timeout=_GRACE_S)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def profile_of(data: dict[str, Any]) -> Profile:
    """The :class:`Profile` of a session's payload, its device trace (the file the profiler
    wrote) read into step timelines as ``doctor --trace`` reads one."""
    if isinstance(data.get("device_trace"), dict):
        data = {**data, "device_trace": read_live_trace(data["device_trace"])}
    return Profile.from_dict(data)


def _read_profile(path: Path) -> tuple[Profile | None, str]:
    if not path.exists():
        return None, ""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data, dict):
            raise ValueError("the child's profile is not a JSON object")
        return profile_of(data), ""
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return None, exception_line(exc, named=True)
