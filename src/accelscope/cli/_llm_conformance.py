"""``accelscope llm conformance``: grade accelscope's LLM client and the peer clients found
installed against scripted streams whose truth is known.

``llm`` itself takes a server URL as its first argument, so ``conformance`` is dispatched by
:class:`LlmCommand`: when the first argument is ``conformance`` the rest goes to this command's
parser, and every other ``accelscope llm ...`` line parses exactly as before. The command is
built when it is dispatched to: its help names the clients and cases, which come from the llm
package, and ``accelscope --help`` does not import it."""

from __future__ import annotations

import functools
import sys
from pathlib import Path
from typing import Any

import typer
from typer._click.core import Command, Context  # the click typer bundles
from typer.core import TyperCommand

from accelscope.cli._app import _err, _out
from accelscope.cli._flag_groups import GROUP, JsonFlags, with_flag_groups
from accelscope.errors import EXIT_FAILURE

__all__ = ["CONFORMANCE_EPILOG", "SUBCOMMAND", "LlmCommand", "conformance_command"]

SUBCOMMAND = "conformance"
CONFORMANCE_EPILOG = (
    "accelscope llm conformance [--client accelscope,vllm,...] [--case NAME] [--json]: grade "
    "accelscope's client and the peer clients installed against scripted streams whose truth "
    "is known."
)


def _names(value: str | None) -> tuple[str, ...] | None:
    if value is None:
        return None
    return tuple(n.strip() for n in value.split(",") if n.strip())


@functools.cache
def conformance_command() -> Command:
    """The ``llm conformance`` command (a Typer of one command is that command, not a group)."""
    from accelscope.commands.llm.conformance import (
        OWN_CLIENT,
        ConformanceRequest,
        conformance,
        conformance_view,
    )
    from accelscope.llm.conformance import CASES, CLIENTS

    sub = typer.Typer(add_completion=False)

    @sub.command(SUBCOMMAND)
    @with_flag_groups
    def grade(
        client: str | None = typer.Option(
            None,
            "--client",
            help=f"Clients to grade, e.g. accelscope,vllm (default: {OWN_CLIENT} and every peer "
            f"installed; known: {', '.join(CLIENTS)}).",
        ),
        case: str | None = typer.Option(
            None, "--case", help=f"Cases to run (default all: {', '.join(c.name for c in CASES)})."
        ),
        workdir: Path | None = typer.Option(
            None,
            "--workdir",
            help="Keep the peers' outputs and logs here (default: a temporary one).",
        ),
        output: JsonFlags = GROUP,
    ) -> None:
        """Grade LLM benchmark clients against scripted streams whose truth is known; exit 1
        when accelscope fails a case."""
        request = ConformanceRequest(clients=_names(client), cases=_names(case), workdir=workdir)
        as_json = output.as_json
        events = None if as_json else (lambda line: _err.print(line, style="dim", markup=False))
        report = conformance(request, events)
        if as_json:
            sys.stdout.write(report.model_dump_json() + "\n")
        else:
            _out.print(conformance_view(report))
        ran_own = any(c.name == OWN_CLIENT and c.ran for c in report.clients)
        if ran_own and not report.passes_every_case(OWN_CLIENT):
            raise typer.Exit(EXIT_FAILURE)

    return typer.main.get_command(sub)


class LlmCommand(TyperCommand):
    """``llm``, which hands ``llm conformance ...`` to the conformance command."""

    def make_context(
        self,
        info_name: str | None,
        args: list[str],
        parent: Context | None = None,
        **extra: Any,
    ) -> Context:
        if args and args[0] == SUBCOMMAND:
            name = f"{info_name} {SUBCOMMAND}"
            return conformance_command().make_context(name, args[1:], parent, **extra)
        return super().make_context(info_name, args, parent, **extra)
