"""One model of GPU time, shared by ``doctor SCRIPT`` and ``doctor --trace``, checked case by
case against docs/doctor.md ("On a GPU: one model of GPU time, shared with --trace", "Parts
never exceed their whole", "From a torch.profiler trace: --trace" and its quality gate): the
cause table is the doc's table; a cause at its threshold is reported by trace and fired live,
just below it neither; the verdict names a cause only at 40 % of the step, identically by both
paths; a window with no steady step is "not diagnosed" by both, and nothing is judged from its
one-off shares; every real H200 trace gives the same verdict live and by trace; impossible
partitions raise where they are built; diagnoses round-trip and old documents still load.

Covers: accelscope.doctor.causes, accelscope.doctor.device_timeline,
accelscope.doctor.trace_quality, accelscope.doctor.kineto, accelscope.doctor.trace_diagnosis,
accelscope.doctor.profile, accelscope.doctor.findings, accelscope.doctor.breakdown,
accelscope.doctor.verdict, accelscope.doctor.rules, accelscope.commands.doctor.digest,
accelscope.serialise."""

from __future__ import annotations

import functools
import gzip
import json
import math
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from test_causes import context_of, live_profile, steps_with

from accelscope.doctor.breakdown import Breakdown, breakdown
from accelscope.doctor.causes import (
    BOTTLENECK_SHARE,
    CAUSES,
    VERDICT_ADVICE,
    advice_for,
    describe,
)
from accelscope.doctor.device_timeline import (
    DEVICE_BOUND_COMPUTE,
    DEVICE_BOUND_SM_ACTIVE,
    UNDERFILLED_SM_ACTIVE,
    StepTimeline,
    StepWindow,
    TimelineVerdict,
    timeline_verdict,
)
from accelscope.doctor.findings import RuleContext
from accelscope.doctor.kineto import read_live_trace
from accelscope.doctor.profile import (
    PHASES,
    DeviceTraceRecord,
    GpuMemory,
    Profile,
    RunFacts,
    Step,
)
from accelscope.doctor.trace_diagnosis import diagnose_ranks
from accelscope.doctor.trace_quality import QualityFlag, TraceQuality, gated_verdict
from accelscope.doctor.verdict import Diagnosis, diagnose, named_from_timeline
from accelscope.serialise import dump
from accelscope.testing import CliRunner

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "doctor.md"
TRACES = ROOT / "tests" / "data" / "doctor-h200-traces"
LIVE_RUN = ROOT / "tests" / "data" / "doctor-h200-runs" / "launch_bound.live.json.gz"

STEP_US = 10_000.0
GPU_RULES = (
    "sync-bound",
    "pageable-copies",
    "input-bound",
    "overhead-bound",
    "device-bound",
    "device-idle",
    "underfilled",
)
"""The rules that read the GPU's own timeline."""


# -- builders ----------------------------------------------------------------------------------


_profile = live_profile
_ctx = context_of


def _live_steps(
    steps: tuple[StepTimeline, ...], gate: TraceQuality | None = None, **extra: Any
) -> RuleContext:
    record = DeviceTraceRecord(status="injected", steps=len(steps), timeline=steps, gate=gate)
    return _ctx(_profile(record, **extra))


def _by_rule(diagnosis: Diagnosis) -> dict[str, Any]:
    return {f.rule: f for f in diagnosis.findings}


def _trace_verdict(steps: tuple[StepTimeline, ...], **kw: Any) -> TimelineVerdict:
    """What ``doctor --trace`` draws from ``steps`` with no gate flag (every step steady)."""
    gate = TraceQuality(flags=(), steady=tuple(s.index for s in steps), excluded=())
    return gated_verdict(steps, gate, **kw)


@functools.cache
def _both(path: Path) -> tuple[Any, Diagnosis]:
    """``(trace rank diagnosis, live diagnosis)`` of one trace file, read by both entry points."""
    (rank,) = diagnose_ranks(path).ranks
    record = DeviceTraceRecord.from_dict(
        read_live_trace({"status": "recorded", "steps": 3, "path": str(path)})
    )
    return rank, diagnose(_ctx(_profile(record)))


def _write_trace(path: Path, events: list[dict[str, Any]]) -> Path:
    path.write_text(
        json.dumps({"traceEvents": events, "deviceProperties": [{"name": "Tesla V100"}]}),
        encoding="utf-8",
    )
    return path


def _context_creation_trace(path: Path) -> Path:
    """One 30.5 s step spent in CUDA context creation, a 21 s pageable copy beside it (the
    shape of the V100 trace the doc says once read "pageable copies: 69 %")."""
    return _write_trace(
        path,
        [
            {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#0", "pid": 1,
             "tid": 1, "ts": 0, "dur": 30_500_000},
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaDeviceGetStreamPriorityRange",
             "pid": 1, "tid": 1, "ts": 100, "dur": 30_000_000},
            {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pageable -> Device)",
             "pid": 0, "tid": 7, "ts": 200_000, "dur": 21_000_000, "args": {"stream": 7}},
        ],
    )  # fmt: skip


# -- the cause table ---------------------------------------------------------------------------


def _doc_table() -> dict[str, dict[str, Any]]:
    """The doc's cause table, by cause key."""
    text = DOC.read_text(encoding="utf-8")
    start = text.index("| cause | what its time is | reported at |")
    rows = []
    for line in text[start:].splitlines()[2:]:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in line.strip("|").split("|")])
    out: dict[str, dict[str, Any]] = {}
    for cause, what, reported, rule, what_ifs in rows:
        keys = re.findall(r"`(\w+)`", cause)
        if "never" in reported:
            threshold = None
        elif "80 %" in reported or "as `compute`" in reported:
            threshold = 0.8
        else:
            found = re.fullmatch(r"(\d+) %", reported)
            assert found is not None, reported
            threshold = int(found.group(1)) / 100
        live = None if rule.startswith("(") or rule == "—" else rule.split()[0]
        tried = () if what_ifs == "—" else what_ifs.replace(" (those that apply)", "")
        names = tuple(w.strip() for w in tried.split(",")) if tried else ()
        for key in keys:
            out[key] = {
                "what": what if len(keys) == 1 else None,
                "threshold": threshold,
                "rule": live,
                "what_ifs": names,
            }
    return out


def test_the_docs_cause_table_is_the_code_table() -> None:
    """Every row of docs/doctor.md's cause table: threshold, live rule, what-ifs, description."""
    table = _doc_table()
    assert set(table) == set(CAUSES)
    for key, row in table.items():
        cause = CAUSES[key]
        if row["threshold"] is None:
            assert cause.threshold is None, key
        else:
            assert cause.threshold == pytest.approx(row["threshold"]), key
        assert cause.rule == row["rule"], key
        assert cause.what_ifs == row["what_ifs"], key
        if row["what"] is not None:
            assert cause.description == row["what"], key
            assert describe(key) == row["what"]


def test_the_documented_levels() -> None:
    """Named at 40 %; device at 80 % kernels and 50 % SM active; under-filled below 20 %."""
    assert BOTTLENECK_SHARE == 0.4
    assert DEVICE_BOUND_COMPUTE == 0.8 and DEVICE_BOUND_SM_ACTIVE == 0.5
    assert UNDERFILLED_SM_ACTIVE == 0.2
    assert describe("no_such_cause") == "no_such_cause"


def test_bf16_advice_only_under_compute() -> None:
    """Advice mentions bf16 for compute only: never for memory, underfilled, reduced compute."""
    for key in (*CAUSES, *VERDICT_ADVICE):
        assert ("bf16" in advice_for(key).lower()) == (key == "compute"), key
    assert "schedule(wait=1, warmup=2, active=5)" in advice_for("not_diagnosed")


# -- reported and named: the same two levels live and by trace --------------------------------

WITH_RULE = ["sync", "h2d_pageable", "dataloader", "launch", "host_compute"]


@pytest.mark.parametrize("key", WITH_RULE)
def test_a_cause_at_its_threshold_is_reported_and_fired_just_below_neither(key: str) -> None:
    """At its threshold: reported by trace, its live rule fired; 0.1 % below: neither."""
    cause = CAUSES[key]
    assert cause.threshold is not None and cause.rule is not None
    for share, expected in ((cause.threshold, True), (cause.threshold - 0.001, False)):
        steps = steps_with({"compute": 0.3, key: share})
        trace = _trace_verdict(steps)
        live = diagnose(_live_steps(steps))
        assert live.timeline == trace
        assert (key in dict(trace.reported)) is expected, (key, share)
        finding = _by_rule(live)[cause.rule]
        assert finding.fired is expected, (key, share, finding.summary)
        if expected:
            assert finding.title == cause.title
            assert f"{cause.threshold:.0%}" in finding.threshold
        assert trace.bottleneck == "mixed" and live.bottleneck == "mixed"


def test_readbacks_at_20_percent_read_mixed_with_sync_bound_fired_in_both() -> None:
    """The doc's example: readbacks 20 %, nothing at 40 %: mixed by trace and live, sync fired."""
    steps = steps_with({"sync": 0.2, "launch": 0.3, "compute": 0.2})
    trace = _trace_verdict(steps)
    live = diagnose(_live_steps(steps))
    assert trace.bottleneck == "mixed" and live.bottleneck == "mixed"
    assert live.timeline == trace and live.headline == trace.headline
    assert "sync" in dict(trace.reported) and _by_rule(live)["sync-bound"].fired


def test_named_at_exactly_40_percent_and_mixed_just_below() -> None:
    """The largest cause is named at 40 % of the step, not at 39.9 %; both paths alike (the
    other causes smaller, so the 40 % cause is the largest)."""
    at = diagnose(_live_steps(steps_with({"sync": 0.4, "compute": 0.3, "launch": 0.3})))
    assert at.timeline is not None and at.timeline.bottleneck == "sync"
    assert (at.bottleneck, at.title) == ("sync-bound", CAUSES["sync"].title)
    below = diagnose(_live_steps(steps_with({"sync": 0.399, "compute": 0.3, "launch": 0.3})))
    assert below.timeline is not None and below.timeline.bottleneck == "mixed"
    assert below.bottleneck == "mixed" and _by_rule(below)["sync-bound"].fired


def test_causes_without_a_rule_are_named_by_the_verdict_at_40_percent() -> None:
    """communication, h2d_pinned, allocator: named (key and title) at 40 %, mixed below."""
    for key in ("communication", "h2d_pinned", "allocator"):
        at = steps_with({key: 0.4, "compute": 0.3, "launch": 0.3})
        live = diagnose(_live_steps(at))
        assert (live.bottleneck, live.title) == (key, CAUSES[key].title), key
        assert named_from_timeline(_trace_verdict(at)) == (key, CAUSES[key].title)
        below = steps_with({key: 0.39, "compute": 0.3, "launch": 0.31})
        assert diagnose(_live_steps(below)).bottleneck == "mixed", key


def test_time_no_event_explains_is_never_named_nor_reported() -> None:
    """``unexplained`` and ``other`` at 80 % of the step: mixed, nothing reported."""
    for key in ("unexplained", "other"):
        shares = {"unexplained": 0.8} if key == "unexplained" else {"compute": 0.1, "sync": 0.1}
        trace = _trace_verdict(steps_with(shares))
        assert trace.bottleneck == "mixed", key
        assert all(c not in ("unexplained", "other") for c, _ in trace.reported)
        assert diagnose(_live_steps(steps_with(shares))).bottleneck == "mixed"


def test_input_bound_needs_one_input_cause_at_its_own_threshold() -> None:
    """DataLoader 12 % + host preprocessing 12 %: neither at 20 %, nothing reported nor fired."""
    steps = steps_with({"dataloader": 0.12, "host_compute": 0.12, "compute": 0.3})
    assert not {"dataloader", "host_compute"} & set(dict(_trace_verdict(steps).reported))
    assert not _by_rule(diagnose(_live_steps(steps)))["input-bound"].fired


def test_device_bound_from_80_percent_kernels_and_not_below() -> None:
    """Kernels at exactly 80 %: compute named, device-bound fired; at 79 %: mixed, clear."""
    at = diagnose(_live_steps(steps_with({"compute": 0.8})))
    assert at.timeline is not None and at.timeline.bottleneck == "compute"
    assert at.bottleneck == "device-bound" and _by_rule(at)["device-bound"].fired
    assert dict(at.timeline.reported) == {"compute": pytest.approx(0.8)}
    below = diagnose(_live_steps(steps_with({"compute": 0.79})))
    assert below.bottleneck == "mixed" and not _by_rule(below)["device-bound"].fired
    assert below.timeline is not None and below.timeline.reported == ()


def test_memory_bound_kernels_are_named_memory_with_fusion_advice() -> None:
    """Memory-bound kernels holding most kernel time: memory, fusion advice, never bf16."""
    live = diagnose(_live_steps(steps_with({"memory": 0.6, "compute": 0.3})))
    assert live.timeline is not None and live.timeline.bottleneck == "memory"
    finding = _by_rule(live)["device-bound"]
    assert finding.fired and finding.title == "memory-bound on the device"
    assert "bf16" not in finding.advice.lower() and "torch.compile" in finding.advice
    assert set(finding.what_ifs) <= {"compile"}


def test_sm_activity_gates_device_bound_and_underfilled() -> None:
    """Kernels 90 %: SM 50 % device-bound, 49 % not, 20 % not, 19 % under-filled."""
    steps = steps_with({"compute": 0.9})
    expected = {0.5: "compute", 0.49: "mixed", 0.2: "mixed", 0.19: "underfilled", None: "compute"}
    for sm, name in expected.items():
        verdict = _trace_verdict(steps, sm_active=sm)
        assert verdict.bottleneck == name, (sm, verdict.headline)
        assert timeline_verdict(steps, sm_active=sm).bottleneck == name
    under = _trace_verdict(steps, sm_active=0.1)
    assert "bf16" not in under.advice and "batch" in under.advice
    assert "not called device-bound" in " ".join(_trace_verdict(steps, sm_active=0.3).notes)


def test_copies_do_not_make_a_gpu_underfilled() -> None:
    """Kernels 50 % + pinned copies 40 %, SM 10 %: busy 90 % but not under-filled."""
    verdict = _trace_verdict(steps_with({"compute": 0.5, "h2d_pinned": 0.4}), sm_active=0.1)
    assert verdict.bottleneck != "underfilled"
    assert verdict.busy_share == pytest.approx(0.9)


def test_matrix_precision_decides_the_compute_advice() -> None:
    """fp32 matrix kernels: bf16 advice; reduced: no autocast; unknown: bf16 with a note."""
    fp32 = _trace_verdict(steps_with({"compute": 0.9}, precision="fp32"))
    assert fp32.matrix_precision == "fp32" and "bf16" in fp32.advice
    reduced = _trace_verdict(steps_with({"compute": 0.9}, precision="reduced"))
    assert reduced.matrix_precision == "reduced"
    assert reduced.advice == VERDICT_ADVICE["compute_reduced"]
    assert "bf16" not in reduced.advice and "autocast" not in reduced.advice
    live = _by_rule(diagnose(_live_steps(steps_with({"compute": 0.9}, precision="reduced"))))
    assert live["device-bound"].fired and "autocast" not in live["device-bound"].advice
    unknown = _trace_verdict(steps_with({"compute": 0.9}, precision="unknown"))
    assert "bf16" in unknown.advice
    assert any("do not give their precision" in n for n in unknown.notes)


def test_what_only_a_live_run_sees_never_names_the_bottleneck() -> None:
    """Memory pressure fired beside a mixed (or launch) timeline: the name stays the timeline's."""
    memory = GpuMemory(
        allocated_peak_bytes=95 * 2**30,
        reserved_peak_bytes=99 * 2**30,
        total_bytes=100 * 2**30,
        alloc_retries=4,
    )
    mixed = diagnose(_live_steps(steps_with({"launch": 0.3, "compute": 0.2}), gpu_memory=memory))
    assert _by_rule(mixed)["memory-pressure"].fired
    assert mixed.bottleneck == "mixed"
    launch = diagnose(_live_steps(steps_with({"launch": 0.6}), gpu_memory=memory))
    assert launch.bottleneck == "overhead-bound" and _by_rule(launch)["memory-pressure"].fired


def test_cpu_rules_use_the_same_thresholds_as_the_table() -> None:
    """On the CPU: readbacks at 15 % fire sync-bound, 14.9 % not; input 20 % / 19.9 % likewise."""
    for phase, rule, key in (
        ("sync", "sync-bound", "sync"),
        ("input", "input-bound", "dataloader"),
    ):
        threshold = CAUSES[key].threshold
        assert threshold is not None
        for share, expected in ((threshold, True), (threshold - 0.001, False)):
            phases = dict.fromkeys(PHASES, 0.0) | {phase: share}
            step = Step(start_s=0.0, duration_s=1.0, phases_s=phases, counts={"syncs": 1})
            profile = Profile(
                status="done", mode="optimizer", warmup=0, target_steps=1, steps=(step,)
            )
            ctx = _ctx(profile)
            assert ctx.device == "cpu"
            live = diagnose(ctx)
            assert live.timeline is None
            assert _by_rule(live)[rule].fired is expected, (phase, share)


# -- without a timeline, and windows with no steady step ---------------------------------------


def test_cuda_without_a_device_trace_gpu_rules_are_na_with_the_reason() -> None:
    """No GPU timeline on CUDA: not diagnosed, saying it is missing; GPU rules n/a with why."""
    status = "not recorded: torch.profiler did not start (test)"
    facts = RunFacts(torch="2.11.0", torch_threads=4, interop_threads=4, cuda_initialized=True)
    ctx = _ctx(_profile(DeviceTraceRecord(status=status), facts=facts))
    assert ctx.device == "cuda"
    live = diagnose(ctx)
    assert live.timeline is None and live.bottleneck == "not_diagnosed"
    assert "missing" in live.headline and status in live.headline
    found = _by_rule(live)
    for rule in GPU_RULES:
        assert found[rule].status == "n/a", (rule, found[rule].status)
        assert status in found[rule].summary, (rule, found[rule].summary)


def test_an_unreadable_live_trace_says_why_and_nothing_stands_in() -> None:
    """A profiled trace that cannot be read: status 'not read: why', no timeline, n/a rules."""
    raw = read_live_trace({"status": "recorded", "steps": 3, "path": "/nonexistent/t.json"})
    assert raw["status"].startswith("not read:") and "timeline" not in raw
    record = DeviceTraceRecord.from_dict(raw)
    facts = RunFacts(torch="2.11.0", torch_threads=4, interop_threads=4, cuda_initialized=True)
    live = diagnose(_ctx(_profile(record, facts=facts)))
    assert live.bottleneck == "not_diagnosed" and raw["status"] in live.headline
    assert not any(f.fired for f in live.findings if f.rule in GPU_RULES)


def test_no_steady_step_is_not_diagnosed_in_both_paths_and_no_rule_fires() -> None:
    """Every step set aside: not_diagnosed by trace and live alike; the GPU rules are n/a."""
    steps = steps_with({"sync": 0.5, "launch": 0.3, "compute": 0.1})
    flag = QualityFlag(kind="one_off", message="CUDA context creation: 1 s in step 0", step=0)
    gate = TraceQuality(flags=(flag,), steady=(), excluded=(0, 1, 2))
    trace = gated_verdict(steps, gate)
    live = diagnose(_live_steps(steps, gate=gate))
    assert trace.bottleneck == "not_diagnosed" and live.timeline == trace
    assert live.bottleneck == "not_diagnosed" and live.headline == trace.headline
    assert trace.advice == VERDICT_ADVICE["not_diagnosed"]
    found = _by_rule(live)
    for rule in GPU_RULES:
        assert found[rule].status == "n/a", (rule, found[rule].summary)


def test_a_13_s_step_no_event_explains_is_not_diagnosed_not_launch_bound(tmp_path: Path) -> None:
    """One 13 s step with a 100 µs kernel and nothing else: not_diagnosed, live and by trace."""
    path = _write_trace(
        tmp_path / "compile_outside.json",
        [
            {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#0", "pid": 1,
             "tid": 1, "ts": 0, "dur": 13_000_000},
            {"ph": "X", "cat": "kernel", "name": "sgemm_kernel", "pid": 0, "tid": 7,
             "ts": 100, "dur": 100, "args": {"stream": 7}},
        ],
    )  # fmt: skip
    rank, live = _both(path)
    assert rank.verdict.bottleneck == "not_diagnosed", rank.verdict.headline
    assert live.timeline == rank.verdict and live.bottleneck == "not_diagnosed"
    assert any(f.kind == "unexplained_host" for f in rank.quality.flags)


def test_context_creation_window_is_not_diagnosed_naming_it(tmp_path: Path) -> None:
    """30 s of cudaDeviceGetStreamPriorityRange: not_diagnosed naming context creation; the
    live pageable-copies rule does not judge the one-off copy."""
    rank, live = _both(_context_creation_trace(tmp_path / "v100.json"))
    assert rank.verdict.bottleneck == "not_diagnosed"
    assert "CUDA context creation" in rank.verdict.headline
    assert live.timeline == rank.verdict
    assert _by_rule(live)["pageable-copies"].status == "n/a"


def test_a_window_with_no_steady_step_reports_no_cause(tmp_path: Path, cli: CliRunner) -> None:
    """No rule judges one-off shares: a not-diagnosed window reports nothing, live or by trace
    (the live rules are n/a, so --json's "reported" and the digest's column must be empty)."""
    path = _context_creation_trace(tmp_path / "v100.json")
    rank, live = _both(path)
    assert not any(f.fired for f in live.findings if f.rule in GPU_RULES)
    code, out, _ = cli("doctor", "--trace", path, "--json")
    assert code == 0
    (document,) = json.loads(out)["ranks"]
    assert document["verdict"]["bottleneck"] == "not_diagnosed"
    assert document["verdict"]["reported"] == [], document["verdict"]["reported"]
    assert rank.verdict.reported == ()


def test_the_digest_counts_no_steady_step_where_there_is_none(
    tmp_path: Path, cli: CliRunner
) -> None:
    """The digest's evidence says '0 steady of 1 steps' for a window with no steady step."""
    path = _context_creation_trace(tmp_path / "v100.json")
    code, out, _ = cli("doctor", "--trace", path, "--format", "markdown")
    assert code == 0
    assert "0 steady of 1 steps" in out, next(li for li in out.splitlines() if "steady of" in li)


# -- every real trace, by both paths: tests/doctor/test_trace_quality.py reads all 19 through
# both entry points (equal verdicts, fired == reported, each step a partition of itself)


def test_the_quality_gate_says_what_the_doc_quotes() -> None:
    """The gate's messages on the real traces are the doc table's."""
    expected = {
        "oneoff/compile_in_window.json.gz": [
            "step 0 took 4.94 s, 1583x the median of the others (3.12 ms): set aside "
            "(dynamo took 4.23 s: torch.compile / Inductor / Triton compilation)"
        ],
        "oneoff/cold_context.json.gz": ["CUDA context creation: 117 ms in step 0 (25% of it)"],
        "oneoff/cudnn_autotune.json.gz": [
            "aten::cudnn_convolution took 2.5 s: cuDNN autotuning "
            "(torch.backends.cudnn.benchmark) or a first convolution"
        ],
        "sync_logging.trace.json.gz": [
            "step 8: 12.9 ms (56%) of host time no recorded event covers, the GPU idle (a "
            "compile, an import or Python outside the profiler's reach): not called launch-bound"
        ],
        "oneoff/one_step.json.gz": [
            "1 steady step(s) of 1 in the window (fewer than 3): the verdict stands on little"
        ],
    }
    for name, messages in expected.items():
        rank, _ = _both(TRACES / name)
        flags = " | ".join(f.message for f in rank.quality.flags)
        for message in messages:
            assert message in flags, (name, flags)
    compiled, _ = _both(TRACES / "oneoff" / "compile_in_window.json.gz")
    assert compiled.quality.steady == (1, 2) and compiled.verdict.bottleneck == "launch"
    logging, _ = _both(TRACES / "sync_logging.trace.json.gz")
    assert 8 in logging.quality.excluded  # over half of it unexplained: set aside
    graph, _ = _both(TRACES / "oneoff" / "cuda_graph.json.gz")
    assert not any(f.kind == "graphs_unrecorded" for f in graph.quality.flags)


def test_the_steady_control_sets_aside_its_first_step_and_stays_launch_bound() -> None:
    """oneoff/steady: the profiler's first step set aside, launch-bound live and by trace."""
    rank, live = _both(TRACES / "oneoff" / "steady.json.gz")
    assert 0 in rank.quality.excluded and rank.quality.steady == (1, 2, 3, 4)
    assert rank.verdict.bottleneck == "launch" and live.bottleneck == "overhead-bound"


# -- parts never exceed their whole -------------------------------------------------------------


def _timeline(**over: Any) -> StepTimeline:
    fields: dict[str, Any] = {
        "index": 0,
        "step_us": 100.0,
        "compute_busy_us": 60.0,
        "copy_busy_us": 0.0,
        "busy_us": 60.0,
        "copy_by_kind": {},
        "by_cause": dict.fromkeys(CAUSES, 0.0) | {"compute": 60.0, "launch": 40.0},
        "gaps": (),
    }
    return StepTimeline(**(fields | over))


def test_step_timeline_rejects_negative_parts_and_sums_off_the_step() -> None:
    """A negative cause, causes summing above or below the step: ValueError, no clamp."""
    causes = dict.fromkeys(CAUSES, 0.0) | {"compute": 60.0}
    assert _timeline().shares["launch"] == pytest.approx(0.4)
    for by_cause in (
        causes | {"launch": 50.0, "sync": -10.0},  # negative part, sum right
        causes | {"launch": 50.0},  # 110 % of the step
        causes | {"launch": 30.0},  # 90 % of the step
    ):
        with pytest.raises(ValueError):
            _timeline(by_cause=by_cause)


def test_step_timeline_allows_rounding_and_rejects_busy_outside_the_step() -> None:
    """Sum off by float rounding is accepted; busy over the step, kernels over busy, raise."""
    off = dict.fromkeys(CAUSES, 0.0) | {"compute": 60.0, "launch": 40.0 + 1e-12}
    assert _timeline(by_cause=off).step_us == 100.0
    with pytest.raises(ValueError):
        _timeline(busy_us=101.0)
    with pytest.raises(ValueError):
        _timeline(compute_busy_us=70.0)
    with pytest.raises(ValueError):
        _timeline(step_us=math.nan)


def test_a_stored_impossible_step_timeline_raises_on_read() -> None:
    """StepTimeline.from_dict validates too: a stored negative or over-full part raises."""
    good = dump(_timeline())
    assert StepTimeline.from_dict(good) == _timeline()
    bad = json.loads(json.dumps(good))
    bad["by_cause"]["launch"] = -40.0
    bad["by_cause"]["compute"] = 140.0
    with pytest.raises(ValueError):
        StepTimeline.from_dict(bad)


def test_step_window_rejects_a_window_ending_before_it_starts() -> None:
    """A window ending before its start, or at a NaN, raises; a zero-length one is allowed."""
    assert StepWindow(index=0, start_us=5.0, end_us=5.0).end_us == 5.0
    for start, end in ((10.0, 9.0), (math.nan, 10.0), (0.0, math.nan)):
        with pytest.raises(ValueError):
            StepWindow(index=0, start_us=start, end_us=end)


def test_host_step_phases_must_fit_in_the_step() -> None:
    """Phases summing over the step, or one negative, raise; an exact fit has other_s 0."""
    base = dict.fromkeys(PHASES, 0.0)
    with pytest.raises(ValueError):
        Step(start_s=0.0, duration_s=1.0, phases_s=base | {"forward": 0.7, "sync": 0.4}, counts={})
    with pytest.raises(ValueError):
        Step(start_s=0.0, duration_s=1.0, phases_s=base | {"sync": -0.1}, counts={})
    with pytest.raises(ValueError):
        Step(start_s=0.0, duration_s=-1.0, phases_s=base, counts={})
    exact = Step(
        start_s=0.0, duration_s=1.0, phases_s=base | {"forward": 0.5, "sync": 0.5}, counts={}
    )
    assert exact.other_s == 0.0


def test_a_verdict_whose_ranked_shares_exceed_the_step_raises() -> None:
    """TimelineVerdict.ranked is a partition: summing to 1.2 or a negative share raises."""
    good = _trace_verdict(steps_with({"sync": 0.5}))
    for ranked in ((("sync", 0.7), ("launch", 0.5)), (("sync", 1.1), ("launch", -0.1))):
        with pytest.raises(ValueError):
            replace(good, ranked=ranked)


# -- stored once, read back ---------------------------------------------------------------------


def test_a_live_diagnosis_round_trips_with_its_timeline() -> None:
    """dump -> JSON -> Diagnosis.from_dict gives the same diagnosis, timeline included."""
    _, live = _both(TRACES / "sync_logging.trace.json.gz")
    stored = json.loads(json.dumps(dump(live)))
    assert stored["timeline"]["bottleneck"] == "launch"
    back = Diagnosis.from_dict(stored)
    assert back.timeline == live.timeline and back == live
    assert back.timeline is not None and back.timeline.reported == live.timeline.reported


def test_a_device_trace_record_round_trips_with_its_gate() -> None:
    """The stored record keeps which steps were set aside: read back, the verdict is the same."""
    raw = read_live_trace(
        {"status": "recorded", "steps": 3, "path": str(TRACES / "sync_logging.trace.json.gz")}
    )
    record = DeviceTraceRecord.from_dict(raw)
    back = DeviceTraceRecord.from_dict(json.loads(json.dumps(dump(record))))
    assert back == record and back.quality_gate.excluded == (8,)
    assert diagnose(_ctx(_profile(back))).timeline == diagnose(_ctx(_profile(record))).timeline


def test_old_documents_with_the_removed_models_still_load() -> None:
    """A step's 'device', a census's 'op_device_s', a breakdown's 'device_idle_share' load."""
    phases = dict.fromkeys(PHASES, 0.001)
    step = {
        "start_s": 0.0,
        "duration_s": 0.01,
        "phases_s": phases,
        "counts": {"items": 4},
        "device": {"device_s": 0.02, "idle_s": 0.0, "busy_s": 0.02},  # 200 % of its step
    }
    probe = {
        "ops": 10, "forward_ops": 5, "op_time_s": 0.001, "matmul_calls": 1,
        "matmul_time_s": {}, "matmul_flops": {}, "devices": ["cuda:0"], "autocast": {},
        "op_device_s": 0.5, "matmul_device_s": {"float32": 0.3}, "device_status": "measured",
    }  # fmt: skip
    profile = Profile.from_dict(
        {"status": "done", "mode": "optimizer", "warmup": 0, "target_steps": 2,
         "steps": [step, step], "probe": probe, "device_status": "events"}
    )  # fmt: skip
    assert profile.steps[0].duration_s == 0.01 and profile.probe is not None
    summary = json.loads(json.dumps(dump(breakdown(profile.measured))))
    summary |= {"device_idle_share": 0.9, "device": {"idle_s": 1.0}, "device_step_mean_s": 2.0}
    assert Breakdown.from_dict(summary) == breakdown(profile.measured)


def test_the_stored_h200_live_run_is_rediagnosed_as_the_trace_of_its_loop() -> None:
    """The stored launch_bound live run loads (no stored timeline) and re-diagnoses to launch."""
    with gzip.open(LIVE_RUN) as f:
        stored = json.loads(f.read())["diagnosis"]
    old = Diagnosis.from_dict(stored["diagnosis"])
    assert old.timeline is None and old.bottleneck == "overhead-bound"
    profile = Profile.from_dict(stored["profile"])
    live = diagnose(_ctx(profile))
    (rank,) = diagnose_ranks(TRACES / "archetypes" / "launch_bound.json.gz").ranks
    assert live.timeline is not None and live.timeline.bottleneck == rank.verdict.bottleneck
    assert live.bottleneck == "overhead-bound"


# -- the command line ---------------------------------------------------------------------------


def test_json_verdict_has_a_reported_list(cli: CliRunner) -> None:
    """--json: each rank's verdict holds 'reported', [cause, share] pairs at their thresholds."""
    code, out, _ = cli("doctor", "--trace", TRACES / "sync_logging.trace.json.gz", "--json")
    assert code == 0
    (rank,) = json.loads(out)["ranks"]
    reported = rank["verdict"]["reported"]
    assert [cause for cause, _ in reported] == ["launch", "sync"]
    for cause, share in reported:
        threshold = CAUSES[cause].threshold
        assert threshold is not None and share >= threshold


def test_markdown_digest_has_a_reported_column_and_40_lines_per_rank(cli: CliRunner) -> None:
    """--format markdown on a directory of ranks: 'reported' column, <= 40 lines per rank."""
    code, out, _ = cli("doctor", "--trace", TRACES / "archetypes", "--format", "markdown")
    assert code == 0
    sections = re.split(r"^(?=## )", out, flags=re.MULTILINE)[1:]
    assert len(sections) == 10
    for section in sections:
        assert len(section.rstrip("\n").splitlines()) <= 40, section.splitlines()[0]
        assert "| cause | share of step | per step | reported |" in section
    assert "| yes (>= 25%) |" in out


def test_the_docs_digest_example_is_what_the_cli_prints(cli: CliRunner) -> None:
    """docs/doctor.md's digest of oneoff/compile_in_window is printed verbatim."""
    text = DOC.read_text(encoding="utf-8")
    start = text.index("```markdown\n# accelscope doctor --trace: compile_in_window")
    block = text[start + len("```markdown\n") : text.index("\n```", start + 5)]
    path = TRACES / "oneoff" / "compile_in_window.json.gz"
    code, out, _ = cli("doctor", "--trace", path, "--format", "markdown")
    assert code == 0 and out.rstrip("\n") == block
