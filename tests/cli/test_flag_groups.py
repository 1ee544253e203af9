"""Flag groups: each flag declared once (cli/_flag_groups.py), taken whole by the commands
that share it; a flag that two commands spell alike is one declaration with one help text,
unless it means different things there (:data:`SEVERAL_MEANINGS` names those, and why)."""

from __future__ import annotations

import ast
import collections
import dataclasses
import inspect
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
import pytest
import typer
from typer.main import get_command
from typer.testing import CliRunner

import accelscope.cli
from accelscope.cli._app import app
from accelscope.cli._flag_groups import GROUP, FlagGroup, OutputFlags, flag, with_flag_groups
from accelscope.cli._llm_conformance import conformance_command
from accelscope.cli._llm_options import SloFlags, WorkloadFlags
from accelscope.testing import CliRunner as Cli

CLI = Path(accelscope.cli.__file__).parent


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
        name.strip()
        for f in dataclasses.fields(group)
        for declared in f.metadata["option"].param_decls
        for name in declared.split("/")
        if name.strip().startswith("--")
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


# --------------------------------------------------------------------------------------------
# Every command: one declaration, one help text per flag (per meaning).

SEVERAL_MEANINGS: dict[str, str] = {
    "--backend": "bench sweeps a list of runtimes; measure, load, roofline and gate run one",
    "--precision": "bench sweeps a list; plan memory takes an LLM's weight dtype (fp8, int4); "
    "the others run one",
    "--batch": "bench and measure take a list of sizes; roofline and gate one size; load the "
    "dynamic batcher's maximum; plan memory the concurrent sequences",
    "--threads": "bench sweeps a list of thread counts; the others run one",
    "--tf32": "bench measures off,on as two rows; the others run one setting",
    "--device": "doctor sets the script's device, auto by default (the script decides)",
    "--budget": "bench and tune bound the whole run; measure, ceilings and gate each measurement",
    "--timeout": "bench and doctor bound each measured run; llm and tune each request",
    "--seed": "llm and tune seed the prompts, random unless given (stored with the run)",
    "--rate": "load offers one rate (queries/s); llm a list of rates; tune one per configuration",
    "--concurrency": "llm measures a list of concurrencies; tune one per configuration",
    "--capacity": "llm and tune name what their capacity search varies; plan takes a known "
    "capacity (120qps)",
    "--instance": "llm prices its datasheet floor; tune its good tokens; plan api the hardware "
    "side of the bill",
    "--search": "load searches a rate (a switch); tune names how it searches configurations",
    "--trace": "doctor reads a torch.profiler trace; llm replays a Mooncake trace",
    "--from-run": "load serves a bench run's best configuration; plan api prices an llm run's "
    "goodput",
    "--model": "llm names the model the server serves; plan the model whose runs to use; tune "
    "refuses it (--model-dir)",
    "--node-type": "bench measures on Ray node types; plan maps catalog types to them",
    "--format": "runs export writes csv or json; doctor --trace prints text or a markdown digest",
    "--dtype": "llm loads an in-process model at it; plan llm projects weights stored in it",
}
"""Flags spelt alike in several commands that mean different things there: each meaning is
declared once (renaming them would break every command line written so far)."""

_DECLARERS = {"Option", "duration_option", "fraction_option"}


def _commands() -> Iterator[tuple[str, click.Command]]:
    """Every command the ``accelscope`` line reaches, by its path (``plan api``)."""

    def walk(command: click.Command, path: str) -> Iterator[tuple[str, click.Command]]:
        if path:
            yield path, command
        for name, sub in getattr(command, "commands", {}).items():
            yield from walk(sub, f"{path} {name}".strip())

    yield from walk(get_command(app), "")
    yield "llm conformance", conformance_command()


def _flags(command: click.Command) -> Iterator[tuple[str, str | None]]:
    for param in command.params:
        for name in (*param.opts, *getattr(param, "secondary_opts", ())):
            if name.startswith("--"):
                yield name, getattr(param, "help", None)


def _helps() -> dict[str, dict[str | None, list[str]]]:
    """Each flag's help texts, with the commands that show each."""
    found: dict[str, dict[str | None, list[str]]] = collections.defaultdict(
        lambda: collections.defaultdict(list)
    )
    for path, command in _commands():
        for name, help_text in _flags(command):
            found[name][help_text].append(path)
    return found


def _declarations() -> collections.Counter[str]:
    """How many places in the CLI's source declare each flag (a ``typer.Option`` call or a
    helper that makes one, with the flag written out)."""
    counts: collections.Counter[str] = collections.Counter()
    for path in sorted(CLI.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Call):
                continue
            function = node.func
            name = function.attr if isinstance(function, ast.Attribute) else ""
            name = name or (function.id if isinstance(function, ast.Name) else "")
            if name not in _DECLARERS:
                continue
            for argument in node.args:
                if isinstance(argument, ast.Constant) and isinstance(argument.value, str):
                    for part in argument.value.split("/"):
                        if part.strip().startswith("--"):
                            counts[part.strip()] += 1
    return counts


def test_a_flag_is_declared_once_for_each_of_its_meanings() -> None:
    helps = _helps()
    declarations = _declarations()
    wrong = {
        name: (declarations[name], dict(texts))
        for name, texts in helps.items()
        if declarations[name] != len(texts)
    }
    assert not wrong, f"flag: (declarations, {{help: commands}}): {wrong}"


def test_a_flag_two_commands_share_has_one_help_text() -> None:
    helps = _helps()
    shared = {name: texts for name, texts in helps.items() if sum(map(len, texts.values())) > 1}
    several = {name: dict(texts) for name, texts in shared.items() if len(texts) > 1}
    unexplained = {name: texts for name, texts in several.items() if name not in SEVERAL_MEANINGS}
    assert not unexplained, f"one flag, several help texts: {unexplained}"
    stale = sorted(set(SEVERAL_MEANINGS) - set(several))
    assert not stale, f"these now mean one thing: drop them from SEVERAL_MEANINGS: {stale}"


def test_the_store_and_output_flags_are_one_declaration_everywhere() -> None:
    declarations = _declarations()
    for name in ("--store", "--no-store", "--json", "--report", "--quiet", "--input"):
        assert declarations[name] == 1, name
    for name in ("--weights", "--trust-model-code", "--option", "--config", "--catalog"):
        assert declarations[name] == 1, name


def _groups_of(callback: Any) -> dict[str, type] | None:
    while callback is not None:
        if hasattr(callback, "flag_groups"):
            return dict(callback.flag_groups)
        callback = getattr(callback, "__wrapped__", None)
    return None


def test_every_command_with_options_takes_them_through_flag_groups() -> None:
    """So the refusal of a flag declared twice (above) holds for every command."""
    without = [
        path
        for path, command in _commands()
        if command.callback is not None and _groups_of(command.callback) is None
    ]
    assert without == [], "declare these commands with @with_flag_groups"


def test_a_group_is_not_named_like_a_flag_of_another() -> None:
    def shadowing(left: OutputFlags = GROUP, pair: _Pair = GROUP) -> None: ...

    with pytest.raises(TypeError, match="group left is named like a flag"):
        with_flag_groups(shadowing)

    def own(store: OutputFlags = GROUP) -> None: ...  # its own flag's name: no clash

    with_flag_groups(own)


def test_a_config_file_sets_a_flag_of_a_group(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``[llm] requests = 10``: the file's keys are the flags' names, grouped or not."""
    import accelscope.commands.llm.workflow as workflow

    seen: list[Any] = []

    def capture(request: Any, **kwargs: Any) -> None:
        seen.append(request)
        raise typer.Exit(0)

    monkeypatch.setattr(workflow, "llm", capture)
    config = tmp_path / "c.toml"
    config.write_text('[llm]\nrequests = 10\nseed = 3\nslo = "ttft=500ms"\n', encoding="utf-8")
    code = accelscope.cli.main(
        ["llm", "http://127.0.0.1:9", "--model", "m", "--rate", "1", "--config", str(config)]
    )
    assert code == 0 and len(seen) == 1
    assert seen[0].requests == 10 and seen[0].workload.seed == 3
    assert seen[0].slo is not None and seen[0].slo.ttft_s == 0.5


def test_the_help_names_the_mooncake_block_of_the_trace_reader() -> None:
    from accelscope.cli._llm import MOONCAKE_BLOCK_TOKENS
    from accelscope.llm.trace import MOONCAKE_BLOCK_TOKENS as READER

    assert MOONCAKE_BLOCK_TOKENS == READER


def test_a_group_made_of_groups_has_their_flags_in_order() -> None:
    names = [f.name for f in dataclasses.fields(OutputFlags)]
    assert names == ["store", "no_store", "report", "as_json"]
    assert inspect.isclass(OutputFlags) and issubclass(OutputFlags, FlagGroup)
