"""What the what-ifs measured overrides what the profile suggested: a fired rule whose every
measured what-if came out slower (its 95 % interval of items/s wholly below the baseline) does
not name the bottleneck. Its finding becomes ``refuted`` (with what was measured), the next
unrefuted fired rule names the bottleneck, else none is confirmed; the notes say what was
measured instead. On CUDA, where the GPU's own timeline named the bottleneck, a refuted name
is not replaced by another finding (one under the 40 % naming bar, or one only a live run
sees): none is confirmed. Pure: a new :class:`Diagnosis`, nothing printed."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from accelscope.doctor.findings import Finding
from accelscope.doctor.verdict import Diagnosis
from accelscope.doctor.whatif import WhatIfResult

__all__ = ["REFUTED", "refute_by_what_ifs"]

REFUTED = "refuted"
"""A finding whose rule fired but whose what-ifs all measured slower."""


def _base(name: str) -> str:
    return name.split("=", 1)[0].strip()


def _measured(result: WhatIfResult) -> str:
    high = "inf" if result.speedup_high is None else f"{result.speedup_high:.2f}"
    return (
        f"{result.label} measured {result.speedup or 0.0:.2f}x items/s "
        f"(95 % bounds {result.speedup_low or 0.0:.2f}-{high}x)"
    )


def _slower(finding: Finding, results: Sequence[WhatIfResult]) -> list[WhatIfResult] | None:
    """The finding's measured what-ifs when every one of them was measurably slower."""
    wanted = {_base(w) for w in finding.what_ifs}
    measured = [
        r
        for r in results
        if r.status == "ok"
        and r.name != "baseline"
        and _base(r.name) in wanted
        and r.speedup is not None
    ]
    if not measured:
        return None
    if all(r.speedup_high is not None and r.speedup_high < 1.0 for r in measured):
        return measured
    return None


def refute_by_what_ifs(
    diagnosis: Diagnosis, results: Sequence[WhatIfResult], recommendation: str = ""
) -> Diagnosis:
    """``diagnosis`` with every fired rule that its own what-ifs measured slower refuted."""
    refuted: dict[str, list[WhatIfResult]] = {}
    for finding in diagnosis.fired:
        slower = _slower(finding, results)
        if slower is not None:
            refuted[finding.rule] = slower
    if not refuted:
        return diagnosis
    findings: list[Finding] = []
    notes = list(diagnosis.notes)
    for finding in diagnosis.findings:
        if finding.rule not in refuted:
            findings.append(finding)
            continue
        measured = "; ".join(_measured(r) for r in refuted[finding.rule])
        findings.append(
            replace(
                finding,
                status=REFUTED,
                summary=f"{finding.summary} — refuted: {measured}, slower",
            )
        )
        notes.append(
            f"{finding.title} is not named the bottleneck: {measured}, slower than the "
            "baseline" + (f"; {recommendation}" if recommendation else "")
        )
    standing = [f for f in findings if f.fired]
    if diagnosis.bottleneck not in refuted:
        return replace(diagnosis, findings=tuple(findings), notes=tuple(notes))
    if standing and diagnosis.timeline is None:  # on CUDA only the GPU's timeline names
        top = standing[0]
        return replace(
            diagnosis,
            bottleneck=top.rule,
            title=top.title,
            headline=f"{top.title}: {top.summary}",
            findings=tuple(findings),
            notes=tuple(notes),
        )
    first = next(f for f in diagnosis.fired if f.rule == diagnosis.bottleneck)
    measured = "; ".join(_measured(r) for r in refuted[first.rule])
    return replace(
        diagnosis,
        bottleneck="unconfirmed",
        title="no confirmed bottleneck",
        headline=(
            f"no confirmed bottleneck: the profile pointed at {first.title}, but {measured}, "
            "slower than the baseline"
        ),
        findings=tuple(findings),
        notes=tuple(notes),
    )
