"""Grading one client's figure against the truth: within an absolute plus a relative tolerance,
a figure that does not exist on both sides, or "n/a" when the client cannot express it."""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict

from accelscope.llm.conformance.cases import Figure

__all__ = ["TOLERANCES", "Grade", "Tolerance", "Verdict", "grade"]


class Verdict(StrEnum):
    PASS = "pass"
    FAIL = "fail"
    NOT_EXPRESSED = "n/a"
    """The client has no such figure (not a failure): ``why`` says so."""


class Tolerance(BaseModel):
    """Pass when ``|measured - truth| <= abs + rel * |truth|`` (in the figure's unit);
    ``at_least``: when ``truth <= measured <= truth + abs + rel * |truth|`` (a wait a client
    must honour: shorter is wrong by any amount)."""

    model_config = ConfigDict(frozen=True)

    abs: float
    rel: float
    at_least: bool = False

    def bound(self, truth: float) -> float:
        return self.abs + self.rel * abs(truth)

    def passes(self, measured: float, truth: float) -> bool:
        if self.at_least:
            return truth <= measured <= truth + self.bound(truth)
        return abs(measured - truth) <= self.bound(truth)

    @property
    def label(self) -> str:
        if self.abs < 1e-6 and not self.rel:
            return "exact"
        sign = "+" if self.at_least else "±"
        parts = [f"{sign}{self.abs:g}" if self.abs else "", f"{self.rel:.0%}" if self.rel else ""]
        found = " + ".join(p for p in parts if p)
        return f"at least, {found}" if self.at_least else found


_EXACT = Tolerance(abs=1e-9, rel=0.0)
TOLERANCES: dict[Figure, Tolerance] = {
    # The truth is the server's own stamp of each write; a client's stamp of the same chunk trails
    # it by the loopback delivery (~0.1 ms) plus the client's wake-up, and TTFT/TTFC/E2E also hold
    # the connection and the request's write, which the receipt stamp does not see (~0.5 ms). A
    # loaded 2-core machine wakes a thread 5-12 ms late now and then; the median over the case's
    # requests keeps one stall from deciding. 4 ms + 5 % passes that and fails every wrong
    # definition the cases script (a 250 ms tail, one chunk for k tokens, a reasoning prefix of
    # 4 x 6 ms, a first chunk of 4 tokens).
    Figure.TTFT_MS: Tolerance(abs=4.0, rel=0.05),
    Figure.TTFC_MS: Tolerance(abs=4.0, rel=0.05),
    Figure.E2E_MS: Tolerance(abs=4.0, rel=0.05),
    # TPOT and ITL are differences of two stamps on one stream: the delivery latency cancels and
    # only the wake-up jitter of either stamp is left (TPOT divides it by the tokens). Their
    # wrong definitions are off by a whole factor (N - 1 against N - k1: 9/6; one gap per chunk
    # of k tokens against per token: 3x), so 1 ms + 5 % cannot hide one.
    Figure.TPOT_MS: Tolerance(abs=1.0, rel=0.05),
    Figure.ITL_MS: Tolerance(abs=1.0, rel=0.05),
    # Counts are integers the script fixes (a mean over identical requests): exact.
    Figure.OUTPUT_TOKENS: _EXACT,
    Figure.REASONING_TOKENS: _EXACT,
    Figure.PROMPT_TOKENS: _EXACT,
    Figure.FAILED_SHARE: _EXACT,
    # The lag truth takes the client's schedule and the server's receipts; the client's own
    # figure is its send stamps, which lead the receipt by the connect and write (<1 ms), and
    # the one request that anchors the two clocks adds its own. The lag is hundreds of ms.
    Figure.LAG_P99_MS: Tolerance(abs=10.0, rel=0.10),
    Figure.CLIENT_BOUND: _EXACT,
    # The agentic case. Prompt growth is a difference of two server counts: exact. The tool
    # wait is what the client did, on the server's stamps: the answer's end is stamped before
    # its trailing events leave and the next turn's receipt after the client sent it, so an
    # honoured wait is never short of the truth (a shorter gap is a wait not honoured, by any
    # amount), and is long by delivery, wake-up and the request's write (a few ms; the figure
    # is the shortest gap, so a stall lengthens it only if every gap stalls). Kept context is
    # a share of turns: exact. Job latency spans a session (~0.6 s) and holds the same stamps
    # as E2E at both ends.
    Figure.PROMPT_GROWTH_TOKENS: _EXACT,
    Figure.TOOL_WAIT_MS: Tolerance(abs=4.0, rel=0.05, at_least=True),
    Figure.CONTEXT_KEPT: _EXACT,
    Figure.JOB_LATENCY_MS: Tolerance(abs=4.0, rel=0.05),
}


class Grade(BaseModel):
    """One figure of one client on one case."""

    model_config = ConfigDict(frozen=True)

    case: str
    client: str
    figure: Figure
    truth: float | None
    measured: float | None
    tolerance: Tolerance
    verdict: Verdict
    why: str = ""


def grade(
    *,
    case: str,
    client: str,
    figure: Figure,
    truth: float | None,
    measured: float | None,
    expressed: bool = True,
    why: str = "",
    error: str = "",
) -> Grade:
    """Grade ``measured`` against ``truth``. A truth of None (the figure does not exist, e.g.
    no answer text so no time to first content) passes only a None; a client that cannot
    express the figure (``expressed=False``) is n/a, ``why`` says why; a client that did not
    run to the end (``error``) fails, the error its why."""
    tolerance = TOLERANCES[figure]
    if error:
        verdict, found, why = Verdict.FAIL, None, error
    elif not expressed:
        verdict, found = Verdict.NOT_EXPRESSED, None
    elif truth is None or measured is None:
        verdict, found = (
            (Verdict.PASS if truth is None and measured is None else Verdict.FAIL),
            measured,
        )
        if verdict is Verdict.FAIL and not why:
            why = "reported where there is none" if truth is None else "not reported"
    else:
        passed = tolerance.passes(measured, truth)
        verdict, found = (Verdict.PASS if passed else Verdict.FAIL), measured
    return Grade(
        case=case,
        client=client,
        figure=figure,
        truth=truth,
        measured=found,
        tolerance=tolerance,
        verdict=verdict,
        why=why,
    )
