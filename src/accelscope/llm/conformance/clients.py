"""The benchmark clients a conformance run grades: what each reported for a case, and the
registry they sit in. accelscope's own client is :mod:`.accelscope_client`; the peers
(vLLM's ``bench serve``, GuideLLM, AIPerf, inference-perf) are :mod:`.peers`, each a subprocess
in its own environment whose output file is parsed into the graded figures."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from accelscope.llm.conformance.cases import Case, Figure

__all__ = ["CLIENTS", "Client", "ClientRun", "Endpoint", "register_client"]


@dataclass(frozen=True, kw_only=True)
class Endpoint:
    """Where a case is served, and the tokenizer every client counts with (a word-level one:
    each whitespace-separated word one token, as the scripted server counts)."""

    url: str
    model: str
    tokenizer_dir: Path
    workdir: Path
    """A directory of the client's own for this case (its output files, its log)."""


@dataclass(frozen=True, kw_only=True)
class ClientRun:
    """What a client reported for one case. ``figures``: each figure it reported (None:
    reported as missing); ``not_expressed``: the figures it has no way to report, with why;
    ``error``: the client did not run to the end (every figure fails, the error named).
    ``schedule_s`` and ``first_sent_s``: the client's own schedule (arrival offsets, in send
    order) and its first send, where it has them, for the lag truth."""

    figures: dict[Figure, float | None] = field(default_factory=dict)
    not_expressed: dict[Figure, str] = field(default_factory=dict)
    error: str = ""
    schedule_s: tuple[float, ...] = ()
    first_sent_s: float | None = None


class Client(Protocol):
    """A benchmark client under test."""

    name: str

    def unavailable(self) -> str | None:
        """Why this client cannot run here (not installed, and how to install it); None: it can."""
        ...

    def run(self, case: Case, endpoint: Endpoint) -> ClientRun:
        """Run ``case`` against ``endpoint`` and report its figures (never raises for a
        client that fails: the run's ``error`` says why)."""
        ...


CLIENTS: dict[str, Client] = {}
"""Every known client by name, accelscope's first, in the order the table shows them."""


def register_client(make: Callable[[], Client]) -> Callable[[], Client]:
    """Register the client ``make()`` builds under its name."""
    client = make()
    CLIENTS[client.name] = client
    return make
