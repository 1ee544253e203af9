"""One exception root for accelscope; every error class carries the process exit code.

The CLI maps an :class:`AccelscopeError` to one line on stderr and ``exit_code``; any other
exception is a bug in accelscope and is reported as such.
"""

from __future__ import annotations

__all__ = [
    "AccelscopeError",
    "BadInputError",
    "ConfigError",
    "InterruptedRunError",
    "MeasurementError",
    "ModelLoadError",
    "NotAvailableError",
    "OutOfMemoryError",
    "StoreError",
    "UnsafeModelError",
    "one_line",
]

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_BAD_INPUT = 2
EXIT_INTERRUPTED = 130


def one_line(text: str, limit: int = 200) -> str:
    """``text`` on one line (whitespace runs collapsed), cut to ``limit`` characters with an
    ellipsis: how a third party's message (a server's error, a log line) enters ours."""
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def exception_line(exc: BaseException, *, limit: int = 300, named: bool = False) -> str:
    """The first non-blank line of ``exc``'s message, cut to ``limit`` characters; with
    ``named`` it follows the exception's type (``ValueError: ...``). A message with no text
    is the type's name: how a library's exception enters a one-line error or a stored
    failure."""
    lines = [line for line in str(exc).strip().splitlines() if line.strip()]
    text = lines[0][:limit] if lines else ""
    if named:
        return f"{type(exc).__name__}: {text}".rstrip(": ")
    return text or type(exc).__name__


class AccelscopeError(Exception):
    """Root of every error accelscope raises on purpose."""

    exit_code: int = EXIT_FAILURE

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


class BadInputError(AccelscopeError):
    """The user gave something accelscope cannot use (flag, file, shape, value)."""

    exit_code = EXIT_BAD_INPUT


class ConfigError(BadInputError):
    """A config file is missing, malformed, has unknown keys or wrong types."""


class ModelLoadError(BadInputError):
    """A model file or factory could not be loaded (missing, truncated, wrong type)."""


class UnsafeModelError(BadInputError):
    """Loading would execute code from a file (pickle); refused without --trust-model-code."""


class StoreError(BadInputError):
    """The results store cannot be opened or written (path, permissions, foreign file)."""


class NotAvailableError(AccelscopeError):
    """A requested backend, device or precision is not available here; the message says why."""

    exit_code = EXIT_BAD_INPUT


class MeasurementError(AccelscopeError):
    """The model ran but could not be measured (it raised, produced nothing, ran out of memory)."""


class OutOfMemoryError(MeasurementError):
    """The configuration ran out of memory (host or device): a larger batch of it would too."""


class InterruptedRunError(AccelscopeError):
    """The user interrupted a run (Ctrl-C); what was already measured is kept."""

    exit_code = EXIT_INTERRUPTED
