"""A conformance run: every case served by one scripted-server process (each case on its own
port), every client run against every case, one after the other, then each client's figures
graded against the truth of the requests the server served while that client ran.

The server runs in a process of its own (``python -m accelscope.testing.llm_server --cases``):
a server thread in the client's process would share its interpreter lock with the client under
test, and the stamps it writes on the way out are the truth. Its ``perf_counter`` is the
machine's ``CLOCK_MONOTONIC``, the clock every client process stamps on too, so a client run's
requests are the ones received between its start and its end. A figure of what a client did
(the agentic case's tool wait and kept context) is read from those requests, not from the
client's report.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from accelscope.llm.conformance.cases import (
    OBSERVED,
    TRUE_DEFINITIONS,
    Case,
    Figure,
    observed_of,
    truth_of,
)
from accelscope.llm.conformance.clients import Client, ClientRun, Endpoint
from accelscope.llm.conformance.grading import TOLERANCES, Grade, Verdict, grade
from accelscope.llm.conformance.script import (
    HostedCase,
    ServedRequest,
    hosted_cases_json,
    read_stamps,
)
from accelscope.llm.conformance.tokenizer import write_word_tokenizer
from accelscope.llm.server_process import ServerProcess
from accelscope.processes import free_port

__all__ = ["ClientStatus", "ConformanceReport", "run_conformance"]

MODEL = "fake-model"
_SCHEDULED = (Figure.LAG_P99_MS, Figure.CLIENT_BOUND)
"""Figures whose truth needs the client's schedule."""
SERVER_MODULE = "accelscope.testing.llm_server"


class ClientStatus(BaseModel):
    """A client asked for: whether it ran, and why not."""

    model_config = ConfigDict(frozen=True)

    name: str
    ran: bool
    why: str = ""


class CaseDescription(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str
    about: str
    figures: list[Figure]


class ConformanceReport(BaseModel):
    """The graded table: one :class:`Grade` per case x client x figure."""

    model_config = ConfigDict(frozen=True)

    cases: list[CaseDescription]
    clients: list[ClientStatus]
    grades: list[Grade]
    definitions: dict[Figure, str]
    tolerances: dict[Figure, str]

    def failures(self, client: str) -> list[Grade]:
        return [g for g in self.grades if g.client == client and g.verdict is Verdict.FAIL]

    def passes_every_case(self, client: str) -> bool:
        """Whether ``client`` ran and failed no figure of any case."""
        ran = any(c.name == client and c.ran for c in self.clients)
        return ran and not self.failures(client)


@dataclass(frozen=True)
class _Ran:
    case: Case
    client: str
    run: ClientRun
    start_s: float
    end_s: float


def _lag_s(run: ClientRun, served: Sequence[ServedRequest]) -> list[float] | None:
    """Each request's receipt minus its scheduled arrival, on the server's clock: the client's
    trial origin is placed by its first request (its send stamp against the server's receipt:
    apart by the connection and the write, well under a millisecond on loopback)."""
    if not run.schedule_s or run.first_sent_s is None or not served:
        return None
    origin = served[0].received_s - run.first_sent_s
    return [r.received_s - origin - s for r, s in zip(served, run.schedule_s, strict=False)]


def _grades(ran: _Ran, served: Sequence[ServedRequest]) -> list[Grade]:
    """Each figure of the case graded: what the client reported, or for a figure of what it
    did (the agentic case's tool wait and kept context) what the server saw it do."""
    agent = ran.case.agent
    truth = truth_of(served, _lag_s(ran.run, served), agent)
    did = observed_of(served, agent)
    found = []
    for figure in ran.case.figures:
        why = ran.run.not_expressed.get(figure)
        if why is None and figure in _SCHEDULED and truth[figure] is None:
            why = "its schedule is not known to the grader"
        found.append(
            grade(
                case=ran.case.name,
                client=ran.client,
                figure=figure,
                truth=truth[figure],
                measured=did[figure] if figure in OBSERVED else ran.run.figures.get(figure),
                expressed=why is None,
                why=why or "",
                error=ran.run.error,
            )
        )
    return found


def run_conformance(
    cases: Sequence[Case],
    clients: Sequence[Client],
    *,
    workdir: Path,
    events: Callable[[str], None] | None = None,
) -> ConformanceReport:
    """Run ``clients`` (those available; the others are listed with why) on ``cases`` in
    ``workdir`` (the server's stamps, the tokenizer, each peer's output and log) and grade
    them."""
    say = events or (lambda line: None)
    statuses = [
        ClientStatus(name=c.name, ran=c.unavailable() is None, why=c.unavailable() or "")
        for c in clients
    ]
    running = [c for c in clients if c.unavailable() is None]
    tokenizer_dir = write_word_tokenizer(workdir / "tokenizer")
    hosted = [HostedCase(name=c.name, port=free_port(), script=c.script) for c in cases]
    (workdir / "cases.json").write_bytes(hosted_cases_json(hosted))
    stamps_dir = workdir / "stamps"
    stamps_dir.mkdir(exist_ok=True)
    command = [sys.executable, "-m", SERVER_MODULE, "--port", "{port}", "--model", MODEL]
    command += ["--cases", str(workdir / "cases.json"), "--stamps-dir", str(stamps_dir)]
    runs: list[_Ran] = []
    with ServerProcess(
        command,
        name="scripted LLM server",
        startup_timeout_s=120.0,
        log_path=workdir / "server.log",
    ):
        for case, host in zip(cases, hosted, strict=True):
            for client in running:
                say(f"{case.name}: {client.name}")
                place = workdir / case.name / client.name
                place.mkdir(parents=True, exist_ok=True)
                endpoint = Endpoint(
                    url=f"http://127.0.0.1:{host.port}",
                    model=MODEL,
                    tokenizer_dir=tokenizer_dir,
                    workdir=place,
                )
                start = time.perf_counter()
                run = client.run(case, endpoint)
                runs.append(_Ran(case, client.name, run, start, time.perf_counter()))
    served = {c.name: read_stamps((stamps_dir / f"{c.name}.json").read_bytes()) for c in cases}
    grades = []
    for ran in runs:
        window = [r for r in served[ran.case.name] if ran.start_s <= r.received_s <= ran.end_s]
        grades += _grades(ran, window)
    return ConformanceReport(
        cases=[CaseDescription(name=c.name, about=c.about, figures=list(c.figures)) for c in cases],
        clients=statuses,
        grades=grades,
        definitions=dict(TRUE_DEFINITIONS),
        tolerances={f: t.label for f, t in TOLERANCES.items()},
    )
