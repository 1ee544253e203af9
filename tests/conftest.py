"""Shared fixtures: a fixed environment and an in-process command-line runner, no real hardware
needed. Fakes and helpers live in :mod:`accelscope.testing`; import them from there."""

from __future__ import annotations

from pathlib import Path

import pytest

from accelscope.cli import main
from accelscope.hardware.fingerprint import Environment
from accelscope.testing import CliResult, CliRunner, fixed_environment


@pytest.fixture
def environment() -> Environment:
    return fixed_environment()


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]) -> CliRunner:
    """``cli(*args)`` runs ``accelscope *args`` in process: ``code, out, err = cli(...)``."""

    def run(*args: str | Path) -> CliResult:
        code = main([str(a) for a in args])
        captured = capsys.readouterr()
        return CliResult(code, captured.out, captured.err)

    return run
