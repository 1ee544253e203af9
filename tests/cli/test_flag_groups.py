"""Flag groups: flags declared once (cli/_flag_groups.py), shared by ``llm`` and ``tune``."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import click
import pytest
import typer
from typer.main import get_command
from typer.testing import CliRunner

from accelscope.cli._app import OutputFlags, app
from accelscope.cli._flag_groups import GROUP, FlagGroup, flag, with_flag_groups
from accelscope.cli._llm_options import SloFlags, WorkloadFlags
from accelscope.testing import CliRunner as Cli


@dataclasses.dataclass(frozen=True)
class _Pair(FlagGroup):
    left: int | None = flag(typer.Option(None, "--left", help="left"))
    right: str = flag(typer.Option("r", "--right", help="right"))


def _options(command: click.Command) -> set[str]:
    return {name for p in command.params for name in p.opts}


def test_a_group_is_spread_into_flags_and_built_back() -> None:
    seen: list[object] = []
    one = typer.Typer()

    @one.command()
    @with_flag_groups
    def go(pair: _Pair = GROUP, other: int = typer.Option(1, "--other")) -> None:
        seen.append((pair, other))

    result = CliRunner().invoke(one, ["--left", "3", "--other", "2"])
    assert result.exit_code == 0, result.output
    assert seen == [(_Pair(left=3, right="r"), 2)]
    assert _options(get_command(one)) >= {"--left", "--right", "--other"}


def test_a_flag_declared_twice_or_a_group_without_its_marker_is_refused() -> None:
    def twice(pair: _Pair = GROUP, left: int = typer.Option(0, "--left2")) -> None: ...

    with pytest.raises(TypeError, match="declared twice: left"):
        with_flag_groups(twice)

    def unmarked(pair: _Pair = None) -> None: ...  # type: ignore[assignment]

    with pytest.raises(TypeError, match="declare pair = GROUP"):
        with_flag_groups(unmarked)


def _command(name: str) -> click.Command:
    command: click.Command = get_command(app).commands[name]  # type: ignore[attr-defined]
    return command


@pytest.mark.parametrize("group", [WorkloadFlags, SloFlags, OutputFlags])
def test_llm_and_tune_take_each_shared_flag_from_the_one_group(group: type) -> None:
    flags = {
        name
        for f in dataclasses.fields(group)
        for name in f.metadata["option"].param_decls
        if name.startswith("--")
    }
    for command in ("llm", "tune"):
        params = {p.name: p for p in _command(command).params}
        for f in dataclasses.fields(group):
            assert f.name in params, (command, f.name)
            assert set(params[f.name].opts) <= flags | {f.name}
            assert params[f.name].help == f.metadata["option"].help


def test_tune_refuses_sessions_and_requests_together_as_llm_does(tmp_path: Path, cli: Cli) -> None:
    for command in (
        ["llm", "http://127.0.0.1:9", "--model", "m"],
        ["tune", "--engine", "vllm", "--model-dir", str(tmp_path)],
    ):
        code, out, err = cli(*command, "--sessions", "2", "--requests", "3")
        assert code == 2, out + err
        assert "give --sessions (conversations per trial) or --requests, not both" in err
