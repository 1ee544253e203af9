"""The plumbing every command shares, written once: the store and report paths checked before
any work, the run's lifecycle (started with its first committed row; then ``complete``,
``interrupted`` or ``failed``), the default report path and the atomic report write.

A workflow reads::

    check_paths(store_path, request.report_path)          # before loading or measuring
    with CommandRun("bench", model.ref, env, settings, store_path=store_path,
                    command_line=command_line) as run:
        ...; run.add_result(result); run.add_document("probes", doc)
    report = run.write_report(html, request.report_path)

Ctrl-C inside the ``with`` marks the run ``interrupted`` and becomes ``InterruptedRunError``
naming the run that keeps what was measured; any other exception marks it ``failed``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any

from accelscope.errors import BadInputError, InterruptedRunError
from accelscope.files import write_atomic
from accelscope.hardware.fingerprint import Environment
from accelscope.result import Result
from accelscope.store.sink import RunSink
from accelscope.store.sqlite import DEFAULT_STORE_PATH, check_store_path

__all__ = [
    "API_COMMAND_LINE",
    "CommandRun",
    "check_paths",
    "check_report_path",
    "default_report_path",
    "write_report",
]

API_COMMAND_LINE = "(Python API)"
"""What a run started from Python (not the CLI) records as its command line."""


def check_report_path(path: Path) -> None:
    """Refuse a report path that cannot be written, before any measuring time is spent."""
    if path.is_dir():
        raise BadInputError(f"report path {path} is a directory; give a file name")
    if not path.parent.is_dir():
        raise BadInputError(f"cannot write the report to {path}: {path.parent} does not exist")
    if not os.access(path.parent, os.W_OK):
        raise BadInputError(f"cannot write the report to {path}: {path.parent} is not writable")


def check_paths(store_path: Path | None, report_path: Path | None = None) -> None:
    """Every output path a command will write, checked before any work (one-line errors)."""
    if store_path is not None:
        check_store_path(store_path)
    if report_path is not None:
        check_report_path(report_path)


def default_report_path(kind: str, store_path: Path | None, run_id: str | None) -> Path:
    """``<store dir>/reports/<kind>-<run id>.html`` (``unsaved`` when nothing was stored)."""
    base = (store_path or DEFAULT_STORE_PATH).parent
    return base / "reports" / f"{kind}-{run_id or 'unsaved'}.html"


def write_report(html_text: str, path: Path) -> Path:
    """Write a report atomically (temp file, fsync, rename); a one-line error if it cannot."""
    try:
        return write_atomic(path, html_text)
    except OSError as exc:
        raise BadInputError(f"cannot write the report to {path}: {exc.strerror or exc}") from None


class CommandRun:
    """One command's run in the store (``store_path`` ``None``: nothing is stored).

    The run row is created with the first result or document, so a command that fails before
    producing anything leaves no store and no empty run. ``status`` may be set inside the
    ``with`` block (doctor marks a run it stopped early ``interrupted``); ``kept`` names what
    an interrupted run keeps, for the error message (default: the count of results).
    """

    def __init__(
        self,
        kind: str,
        model: str,
        env: Environment | Callable[[], Environment],
        settings: dict[str, Any],
        *,
        store_path: Path | None,
        command_line: str | None,
        resume_id: str | None = None,
        kept: str | None = None,
        resume_hint: str = "",
    ) -> None:
        self.kind = kind
        self.store_path = store_path
        self.status = "complete"
        self.kept = kept
        self.results_added = 0
        self.resume_hint = resume_hint
        self._sink = RunSink(
            store_path,
            kind,
            model,
            env,
            settings,
            command_line=command_line or API_COMMAND_LINE,
            resume_id=resume_id,
        )

    @property
    def run_id(self) -> str | None:
        """The stored run's id, once something was committed (or the resumed run's)."""
        return self._sink.run_id

    @property
    def stored_path(self) -> Path | None:
        """The store holding this run, ``None`` when nothing was stored."""
        return self.store_path if self.run_id is not None else None

    def add_result(self, result: Result) -> None:
        """Commit one configuration's result now."""
        self._sink.add_result(result)
        self.results_added += 1

    def add_document(self, kind: str, payload: dict[str, Any]) -> None:
        """Commit one document now."""
        self._sink.add_document(kind, payload)

    def __enter__(self) -> CommandRun:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        try:
            if exc_type is None:
                self._sink.finish(self.status)
            elif issubclass(exc_type, KeyboardInterrupt):
                self._sink.finish("interrupted")
                kept = self.kept or f"{self.results_added} result(s)"
                where = f"; {kept} kept in run {self.run_id}" if self.run_id else ""
                hint = f" ({self.resume_hint})" if self.run_id and self.resume_hint else ""
                raise InterruptedRunError(f"interrupted{where}{hint}") from exc
            else:
                self._sink.finish("failed")
        finally:
            self._sink.close()

    def report_path(self, explicit: Path | None) -> Path:
        """The report path: the one given (checked up front), else the default beside the
        store, whose directory is created."""
        if explicit is not None:
            return explicit
        path = default_report_path(self.kind, self.store_path, self.run_id)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise BadInputError(f"cannot create {path.parent}: {exc.strerror or exc}") from None
        return path

    def write_report(self, html_text: str, explicit: Path | None) -> Path:
        """Write this run's report (to ``explicit`` or the default path); return the path."""
        return write_report(html_text, self.report_path(explicit))
