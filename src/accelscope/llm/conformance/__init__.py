"""``accelscope llm conformance``: scripted streams whose true TTFT, TTFC, TPOT, ITL, E2E and
token counts are known, every benchmark client found run against each, each figure graded
against the truth (issue 31).

- :mod:`.script`: the stream shape a case asks of the scripted server, and what it served;
- :mod:`.cases`: the cases, the figures, and the truth derived from what was served (the
  agentic case's sessions too: its tool wait and kept context graded on what the server saw
  the client do, :func:`~.cases.observed_of`);
- :mod:`.grading`: tolerances (stated and justified) and the verdict per figure;
- :mod:`.clients`: the client protocol and registry; :mod:`.accelscope_client` (in-process,
  through ``llm``'s harness) and :mod:`.peers` (vLLM's ``bench serve``, GuideLLM, AIPerf,
  inference-perf, each a subprocess from its own environment);
- :mod:`.suite`: one run, one scripted-server process for every case.
"""

from accelscope.llm.conformance import accelscope_client as _accelscope_client  # noqa: F401
from accelscope.llm.conformance import peers as _peers  # noqa: F401
from accelscope.llm.conformance.cases import CASES, Case, Figure, case_named, truth_of
from accelscope.llm.conformance.clients import CLIENTS, Client, ClientRun, Endpoint
from accelscope.llm.conformance.grading import TOLERANCES, Grade, Tolerance, Verdict, grade
from accelscope.llm.conformance.suite import ClientStatus, ConformanceReport, run_conformance

__all__ = [
    "CASES",
    "CLIENTS",
    "TOLERANCES",
    "Case",
    "Client",
    "ClientRun",
    "ClientStatus",
    "ConformanceReport",
    "Endpoint",
    "Figure",
    "Grade",
    "Tolerance",
    "Verdict",
    "case_named",
    "grade",
    "run_conformance",
    "truth_of",
]
