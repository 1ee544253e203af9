"""``accelscope llm conformance``: run accelscope's client and every peer client found
installed against the scripted conformance cases, and show the graded table (case x figure:
the truth, each client's figure and verdict).

The workflow checks the names it is given (one line, exit 2, for an unknown case or client or a
named peer that is not installed), runs the suite in a working directory (a temporary one
unless ``workdir`` keeps the peers' outputs and logs), and returns the typed report; the view
draws it. Nothing is stored: the cases are scripted, a run is a check, not a measurement of a
system."""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from rich.console import Group, RenderableType
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from accelscope.errors import BadInputError
from accelscope.llm.conformance import (
    CASES,
    CLIENTS,
    Case,
    Client,
    ConformanceReport,
    Figure,
    Grade,
    Verdict,
    run_conformance,
)

__all__ = ["ConformanceRequest", "conformance", "conformance_view"]

OWN_CLIENT = "accelscope"


@dataclass(frozen=True, kw_only=True)
class ConformanceRequest:
    """``clients`` / ``cases``: the names asked for (None: accelscope and every peer found
    installed; every case)."""

    clients: tuple[str, ...] | None = None
    cases: tuple[str, ...] | None = None
    workdir: Path | None = None


def _cases(names: Sequence[str] | None) -> list[Case]:
    if names is None:
        return list(CASES)
    known = {c.name: c for c in CASES}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise BadInputError(f"--case {unknown[0]!r}: give one of {', '.join(known)}")
    return [known[n] for n in names]


def _clients(names: Sequence[str] | None) -> list[Client]:
    if names is None:
        return list(CLIENTS.values())
    unknown = [n for n in names if n not in CLIENTS]
    if unknown:
        raise BadInputError(f"--client {unknown[0]!r}: give one of {', '.join(CLIENTS)}")
    for name in names:
        why = CLIENTS[name].unavailable()
        if why is not None:
            raise BadInputError(f"--client {name}: {why}")
    return [CLIENTS[n] for n in names]


def conformance(
    request: ConformanceRequest, events: Callable[[str], None] | None = None
) -> ConformanceReport:
    """Grade the clients asked for on the cases asked for."""
    cases = _cases(request.cases)
    clients = _clients(request.clients)
    if request.workdir is not None:
        try:
            request.workdir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise BadInputError(f"--workdir {request.workdir}: {exc.strerror}") from None
        return run_conformance(cases, clients, workdir=request.workdir, events=events)
    with tempfile.TemporaryDirectory(prefix="accelscope-conformance-") as place:
        return run_conformance(cases, clients, workdir=Path(place), events=events)


def _value(figure: Figure, value: float | None) -> str:
    if value is None:
        return "none"
    if figure is Figure.FAILED_SHARE:
        return f"{value:.0%}"
    if figure is Figure.CLIENT_BOUND:
        return "yes" if value else "no"
    if figure.value.endswith("_ms"):
        return f"{value:.1f}"
    return f"{value:g}"


_STYLE = {Verdict.PASS: "green", Verdict.FAIL: "bold red", Verdict.NOT_EXPRESSED: "dim"}


def _cell(found: Grade | None, row_truth: float | None) -> Text:
    """A client's figure and verdict; its own truth beside it where it differs from the row's
    beyond the tolerance (each client is graded on the requests it sent: a peer that sends
    single turns where the case scripts conversations has prompts of its own)."""
    if found is None:
        return Text("")
    if found.verdict is Verdict.NOT_EXPRESSED:
        return Text("n/a", style="dim")
    shown = "error" if found.measured is None and found.truth is not None else None
    text = shown or _value(found.figure, found.measured)
    own = found.truth
    if own is not None and (
        row_truth is None or abs(own - row_truth) > found.tolerance.bound(row_truth)
    ):
        text += f" (truth {_value(found.figure, own)})"
    return Text(f"{text} {found.verdict.value}", style=_STYLE[found.verdict])


def conformance_view(report: ConformanceReport) -> RenderableType:
    """The graded table, then each failure and each n/a with its why, the clients that did
    not run, and the definitions and tolerances."""
    ran = [c.name for c in report.clients if c.ran]
    table = Table(title="llm conformance: each figure against the scripted server's truth")
    for column in ("case", "figure", "truth", "tolerance", *ran):
        table.add_column(column, justify="left" if column in ("case", "figure") else "right")
    grades = {(g.case, g.client, g.figure): g for g in report.grades}
    for case in report.cases:
        for number, figure in enumerate(case.figures):
            truths = [g.truth for g in report.grades if g.case == case.name and g.figure == figure]
            truth = truths[0] if truths else None
            row: list[RenderableType] = [
                case.name if number == 0 else "",
                figure.value,
                _value(figure, truth),
                report.tolerances.get(figure, ""),
            ]
            row += [_cell(grades.get((case.name, client, figure)), truth) for client in ran]
            table.add_row(*row)
        table.add_section()
    lines: list[RenderableType] = [table]
    failed = [g for g in report.grades if g.verdict is Verdict.FAIL]
    for found in failed:
        because = f": {found.why}" if found.why else ""
        expected = _value(found.figure, found.truth)
        got = _value(found.figure, found.measured)
        lines.append(
            Text(
                f"FAIL {found.client} {found.case} {found.figure.value}: {got} against "
                f"{expected}{escape(because)}",
                style="red",
            )
        )
    missing: dict[tuple[str, str], set[str]] = {}  # one line per client and reason
    for g in report.grades:
        if g.verdict is Verdict.NOT_EXPRESSED:
            missing.setdefault((g.client, g.why), set()).add(g.figure.value)
    for (name, why), figures in sorted(missing.items()):
        lines.append(Text(f"n/a {name} {', '.join(sorted(figures))}: {why}", style="dim"))
    for status in report.clients:
        if not status.ran:
            lines.append(Text(f"not run: {status.name}: {status.why}", style="yellow"))
    own = [c for c in report.clients if c.name == OWN_CLIENT and c.ran]
    if own:
        verdict = "passes every case" if report.passes_every_case(OWN_CLIENT) else "FAILS"
        lines.append(Text(f"accelscope {verdict}", style="bold"))
    lines.append(Text("truth (the server's own stamps of each write):", style="dim"))
    shown = {figure for case in report.cases for figure in case.figures}
    for figure, definition in report.definitions.items():
        if figure in shown:
            lines.append(Text(f"  {figure.value}: {definition}", style="dim"))
    return Group(*lines)
