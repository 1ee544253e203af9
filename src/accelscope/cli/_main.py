"""The entry point: runs the app and maps every error to one line and an exit code."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import typer

from accelscope.cli._app import _err, app
from accelscope.errors import (
    EXIT_BAD_INPUT,
    EXIT_FAILURE,
    EXIT_INTERRUPTED,
    AccelscopeError,
)


def _click_modules() -> list[Any]:
    """The click package(s) whose exceptions the parser may raise: recent typer versions
    bundle their own copy (``typer._click``), older ones use ``click``."""
    import importlib

    found = []
    for name in ("typer._click", "click"):
        try:
            found.append(importlib.import_module(name))
        except ImportError:
            continue
    return found


_CLICK = _click_modules()


def _exception_classes(name: str, *extra: type[BaseException]) -> tuple[type[BaseException], ...]:
    found = [getattr(m.exceptions, name, None) for m in _CLICK]
    return tuple({c for c in (*found, *extra) if isinstance(c, type)})


USAGE_ERRORS = _exception_classes("ClickException")
_EXITS = _exception_classes("Exit", typer.Exit)
_ABORTS = _exception_classes("Abort", typer.Abort)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit code (used by the console script and by tests)."""
    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args
    command = typer.main.get_command(app)
    try:
        returned = command.main(args=args, prog_name="accelscope", standalone_mode=False)
    except _EXITS as done:
        return int(getattr(done, "exit_code", 0))
    except USAGE_ERRORS as exc:
        if debug:
            raise
        if type(exc).__name__ == "NoArgsIsHelpError":
            return EXIT_BAD_INPUT  # the help text has been printed
        formatter = getattr(exc, "format_message", None)
        text = formatter() if callable(formatter) else str(exc)
        message = str(text).replace("\n", " ")
        _err.print(f"error: {message}", markup=False, soft_wrap=True)
        return EXIT_BAD_INPUT
    except _ABORTS:
        _err.print("interrupted", markup=False)
        return EXIT_INTERRUPTED
    except AccelscopeError as exc:
        if debug:
            raise
        _err.print(f"error: {exc.message}", markup=False, soft_wrap=True)
        return exc.exit_code
    except KeyboardInterrupt:
        _err.print("interrupted", markup=False)
        return EXIT_INTERRUPTED
    except Exception as exc:
        if debug:
            raise
        _err.print(
            f"internal error: {type(exc).__name__}: {exc} (a bug in accelscope; rerun with "
            "--debug for the traceback and report it)",
            markup=False,
            soft_wrap=True,
        )
        return EXIT_FAILURE
    if isinstance(returned, int) and returned == EXIT_INTERRUPTED:
        _err.print("interrupted", markup=False)
    return returned if isinstance(returned, int) else 0
