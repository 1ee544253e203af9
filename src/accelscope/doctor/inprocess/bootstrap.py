"""The child process of ``accelscope doctor``: instrument torch, run the user's script, report.

Run as ``python -m accelscope.doctor.inprocess.bootstrap CONFIG.json`` by
:mod:`accelscope.doctor.launcher`. It installs the instrumentation (and the what-if change, if
any), runs the script with ``runpy`` as
``__main__`` with the script's own ``sys.argv`` and ``sys.path[0]``, and, once warm-up +
measured steps are done, writes the results as JSON (atomically) and leaves with ``os._exit``
so that none of the script's remaining work runs. If the script ends, exits or raises first,
it writes what it has with the reason. SIGUSR1 (sent by the parent at its timeout) writes the
results so far and exits. One byte per step goes to the progress pipe the parent watches.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import sys
import traceback
from pathlib import Path
from typing import Any

from accelscope.doctor.inprocess.session import PROGRESS_FD_ENV, Session
from accelscope.files import write_atomic

__all__ = ["main"]
_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except OSError:
        return
    if os.getppid() == 1:  # the parent died before prctl took effect
        os._exit(1)


def _write_atomic(path: Path, payload: dict[str, Any]) -> None:
    write_atomic(path, json.dumps(payload))


def _where(exc: BaseException, script: str) -> str:
    frames = traceback.extract_tb(exc.__traceback__)
    mine = [f for f in frames if os.path.abspath(f.filename) == script]
    chosen = mine or list(frames)
    if not chosen:
        return ""
    return f"{Path(chosen[-1].filename).name}:{chosen[-1].lineno}"


class _Child:
    """State of one instrumented run; :meth:`finish` writes the results and exits."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config
        self.script = os.path.abspath(str(config["script"]))
        self.result_path = Path(str(config["result_path"]))
        self.finished = False
        progress = os.environ.get(PROGRESS_FD_ENV)
        self.progress_fd = int(progress) if progress and progress.isdigit() else None
        self.session = Session(
            warmup=int(config["warmup"]),
            steps=int(config["steps"]),
            full=bool(config.get("full", True)),
            probe=bool(config.get("probe", True)),
            trace_steps=int(config.get("trace_steps", 0)),
            whatif=config.get("whatif"),
            device_trace_path=config.get("device_trace_path"),
            on_step=self._progress,
            on_done=lambda: self.finish("done"),
        )

    def _progress(self, index: int) -> None:
        if self.progress_fd is not None:
            try:
                os.write(self.progress_fd, b".")
            except OSError:
                self.progress_fd = None

    def finish(
        self, status: str, exit_code: int | None = None, error: dict[str, str] | None = None
    ) -> None:
        """Write the results and leave the process now (no more of the script runs)."""
        if self.finished:
            return
        self.finished = True
        code = 0 if status in ("done", "ended") else 1
        try:
            _write_atomic(self.result_path, self.session.payload(status, exit_code, error))
        except Exception:  # noqa: BLE001 - report our own failure on stderr, then exit
            traceback.print_exc()
            code = 3
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):
                stream.flush()
        os._exit(code)

    def run(self) -> None:
        """Run the script under the instrumentation until it ends or enough steps are seen."""
        signal.signal(signal.SIGUSR1, lambda signum, frame: self.finish("stopped"))
        if self.session.injector is not None:
            self.session.injector.start()
        self.session.instrumentation.install()
        seed = self.config.get("seed")
        if seed is not None:
            _seed(int(seed))
        sys.argv = [self.script, *[str(a) for a in self.config.get("args", [])]]
        sys.path[0] = str(Path(self.script).parent)
        import runpy

        try:
            runpy.run_path(self.script, run_name="__main__")
        except SystemExit as exc:
            code = exc.code
            if code is None or code == 0:
                self.finish("ended", 0)
            number = code if isinstance(code, int) else 1
            message = "" if isinstance(code, int) else str(code)
            self.finish(
                "exited",
                number,
                {"type": "SystemExit", "message": message, "where": _where(exc, self.script)},
            )
        except KeyboardInterrupt as exc:
            self.finish(
                "error",
                None,
                {"type": "KeyboardInterrupt", "message": "", "where": _where(exc, self.script)},
            )
        except BaseException as exc:  # noqa: BLE001 - the user's exception, reported as such
            traceback.print_exc()
            lines = str(exc).strip().splitlines()
            self.finish(
                "error",
                None,
                {
                    "type": type(exc).__name__,
                    "message": lines[0][:300] if lines else "",
                    "where": _where(exc, self.script),
                },
            )
        self.finish("ended", 0)


def _seed(seed: int) -> None:
    """The seeds a script's initial weights and data order are drawn from."""
    import random

    import torch

    random.seed(seed)
    torch.manual_seed(seed)
    try:
        import numpy
    except ImportError:
        return
    numpy.random.seed(seed)


def main(argv: list[str] | None = None) -> None:
    """Entry point: ``python -m accelscope.doctor.inprocess.bootstrap CONFIG.json``."""
    args = sys.argv[1:] if argv is None else argv
    _die_with_parent()
    config = json.loads(Path(args[0]).read_text(encoding="utf-8"))
    _Child(config).run()


if __name__ == "__main__":
    main()
