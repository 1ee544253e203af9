"""A run that exists from its first committed row: the store file is opened, and the run
started (or a resumed one reopened), only when the first result or document arrives, so a
command that fails before measuring anything leaves no store and no empty run behind."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from accelscope.hardware.fingerprint import Environment
from accelscope.result import Result
from accelscope.store.sqlite import ResultStore

__all__ = ["RunSink"]


class RunSink:
    """Commits each result or document of one run as it arrives (``path`` ``None``: nothing
    is written). ``command_line`` is stored with the run exactly as given (the CLI passes the
    command it runs; a Python caller, whatever describes its call, never the host script's
    argv). ``resume_id`` reopens that run now instead of starting a new one. ``env`` may be
    a function that collects it: it is called when the run is first stored, so a run that
    stores nothing collects no environment (which imports torch to find the GPUs)."""

    def __init__(
        self,
        path: Path | None,
        kind: str,
        model: str,
        env: Environment | Callable[[], Environment],
        settings: dict[str, Any],
        *,
        command_line: str,
        resume_id: str | None = None,
    ) -> None:
        self.path = path
        self.kind = kind
        self.model = model
        self.env = env
        self.settings = settings
        self.command_line = command_line
        self.run_id = resume_id
        self.store: ResultStore | None = None
        if path is not None and resume_id is not None:
            self.store = ResultStore(path)
            self.store.reopen_run(resume_id)

    def _open(self) -> tuple[ResultStore, str] | None:
        if self.path is None:
            return None
        if self.store is None:
            self.store = ResultStore(self.path)
        if self.run_id is None:
            env = self.env() if callable(self.env) else self.env
            self.run_id = self.store.start_run(
                self.kind, self.model, self.command_line, env, self.settings
            )
        return self.store, self.run_id

    def add_result(self, result: Result) -> None:
        """Commit one configuration's result now."""
        opened = self._open()
        if opened is not None:
            opened[0].add_result(opened[1], result)

    def add_document(self, kind: str, payload: dict[str, Any]) -> None:
        """Commit one analysis document now."""
        opened = self._open()
        if opened is not None:
            opened[0].add_document(opened[1], kind, payload)

    def finish(self, status: str) -> None:
        """Mark the run ``complete``, ``failed`` or ``interrupted`` (if it was started)."""
        if self.store is not None and self.run_id is not None:
            self.store.finish_run(self.run_id, status)

    def close(self) -> None:
        """Close the store file (if it was opened)."""
        if self.store is not None:
            self.store.close()
