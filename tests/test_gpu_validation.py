"""benchmarks/gpu/validate.py without a GPU: the step scheduler, the digest, the parsers of each
command's JSON (fake documents shaped like the real ones), and the subprocess handling.

Covers: accelscope.llm.documents, accelscope.doctor.profile, accelscope.load.summary,
accelscope.commands.audit.workflow, accelscope.documents."""

from __future__ import annotations

import dataclasses
import importlib.util
import io
import json
import sys
import time
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

from accelscope.commands.audit.workflow import AuditRequest, audit
from accelscope.doctor.breakdown import Rate, breakdown
from accelscope.doctor.device_timeline import TimelineVerdict
from accelscope.doctor.diagnose import DoctorResult
from accelscope.doctor.findings import Finding
from accelscope.doctor.profile import COUNTERS, PHASES, DeviceTraceRecord, Profile, Step
from accelscope.doctor.verdict import Diagnosis
from accelscope.doctor.whatif import WhatIfResult
from accelscope.documents import RooflineProfile
from accelscope.hardware.energy import EnergyFigure
from accelscope.llm.documents import (
    Arrivals,
    DecodeFloor,
    Distribution,
    LlmRun,
    LlmTrial,
    Metrics,
    TargetDescription,
    Throughput,
    TrialSummary,
)
from accelscope.load.batcher import BatchPolicy
from accelscope.load.summary import Distribution as LoadDistribution
from accelscope.load.summary import Scenario
from accelscope.load.summary import TrialSummary as LoadTrial
from accelscope.serialise import dump
from accelscope.spec import Device, Precision
from accelscope.testing import fake_result, fixed_environment
from accelscope.testing.nvml import FakeNvml
from plan_helpers import roofline_payload

PATH = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu" / "validate.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpu_validate", PATH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_validate"] = module  # dataclasses resolve their module by name
    spec.loader.exec_module(module)
    return module


v = _load()


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _step(name: str, min_s: float, max_s: float, cost_s: float, clock: FakeClock) -> Any:
    def body(_runner: Any, _allowed: float) -> Any:
        clock.now += cost_s
        return v.Outcome(name, v.OK, summary=f"{name} done")

    return v.Step(name, name, cost_s, min_s, max_s, body)


def _run(steps: list[Any], clock: FakeClock, budget: float, **kw: Any) -> tuple[list[Any], dict]:
    allowed: dict[str, float] = {}

    def execute(step: Any, limit: float) -> Any:
        allowed[step.name] = limit
        return step.body(None, limit)

    outcomes = v.run_steps(steps, budget_s=budget, execute=execute, clock=clock, **kw)
    return outcomes, allowed


def test_steps_run_in_order_each_within_its_own_budget_and_skip_once_they_no_longer_fit() -> None:
    clock = FakeClock()
    steps = [
        _step("a", 10, 60, 30, clock),
        _step("b", 50, 200, 80, clock),  # gets min(200, 170 left)
        _step("c", 100, 100, 10, clock),  # 90 left < 100: skipped
        _step("d", 20, 30, 5, clock),  # still fits after c was skipped
    ]
    outcomes, allowed = _run(steps, clock, budget=200)
    assert [(o.step, o.status) for o in outcomes] == [
        ("a", "ok"),
        ("b", "ok"),
        ("c", "skipped"),
        ("d", "ok"),
    ]
    assert allowed == {"a": 60, "b": 170, "d": 30}
    assert outcomes[1].seconds == 80
    assert outcomes[2].note == "needs 100 s, 90 s of the 200 s budget left"


def test_a_step_that_raises_is_recorded_and_the_run_goes_on() -> None:
    clock = FakeClock()

    def broken(_runner: Any, _allowed: float) -> Any:
        clock.now += 3
        raise RuntimeError("CUDA error: out of memory")

    steps = [v.Step("x", "x", 1, 1, 10, broken), _step("y", 1, 10, 1, clock)]
    outcomes, _ = _run(steps, clock, budget=100)
    assert [(o.step, o.status) for o in outcomes] == [("x", "failed"), ("y", "ok")]
    assert outcomes[0].note == "RuntimeError: CUDA error: out of memory"
    assert outcomes[0].seconds == 3


def test_only_the_selected_steps_run_and_the_budget_counts_from_the_start() -> None:
    clock = FakeClock()
    began = clock.now - 95  # the wheels' install and startup already took 95 s
    steps = [_step(n, 10, 50, 5, clock) for n in ("a", "b", "c")]
    seen: list[str] = []
    outcomes, _ = _run(
        steps,
        clock,
        budget=100,
        selected=["c", "a"],
        began=began,
        on_done=lambda o: seen.append(o.step),
    )
    assert [o.step for o in outcomes] == ["a", "c"] == seen  # step order, not --only's
    assert [o.status for o in outcomes] == ["skipped", "skipped"]  # 5 s left < 10


def _fake_outcomes() -> list[Any]:
    return [
        v.Outcome(
            "facts",
            v.OK,
            seconds=12.3,
            summary="NVIDIA H100 80GB HBM3, driver 580.159.04",
            checks=[v.Check("premise TF32", "conv TF32 by default", "conv 4.1e-04", v.CONFIRMED)],
        ),
        v.Outcome(
            "ceilings",
            v.OK,
            seconds=64,
            summary="bf16 781 TFLOP/s",
            tables=[v.Table("ceilings", ["row", "measured"], [["bf16", "781 TFLOP/s"]])],
            checks=[v.Check("H2", "fp32 | a TF32 rate", "fp32 51 TFLOP/s", v.REFUTED)],
            earlier="09:12 UTC",
        ),
        v.Outcome("compile", v.SKIPPED, note="needs 90 s, 12 s of the 450 s budget left"),
    ]


def test_the_digest_counts_verdicts_and_statuses_and_renders_paste_ready_markdown() -> None:
    meta = {
        "device": "NVIDIA H100 80GB HBM3",
        "driver": "driver 580.159.04",
        "torch": "torch 2.11.0+cu130",
        "date": "2026-11-27",
        "command": "bash benchmarks/gpu/run.sh",
        "commit": "abc1234",
        "budget_s": 450,
        "wall_s": 441,
    }
    digest = v.build_digest(_fake_outcomes(), meta)
    assert digest["verdicts"] == {"confirmed": 1, "refuted": 1}
    assert digest["statuses"] == {"ok": 2, "skipped": 1}
    assert [c["step"] for c in digest["checks"]] == ["facts", "ceilings"]
    json.dumps(digest)  # JSON-ready
    text = v.render_markdown(digest)
    assert text.startswith("## GPU validation: NVIDIA H100 80GB HBM3 (2026-11-27)\n")
    assert (
        "Command: `bash benchmarks/gpu/run.sh` (accelscope abc1234; budget 450 s, wall 441 s)"
        in text
    )
    assert "| ceilings | ok (earlier call, 09:12 UTC) | 64 s | bf16 781 TFLOP/s |" in text
    assert "| compile | skipped | 0 s | needs 90 s, 12 s of the 450 s budget left |" in text
    assert "| bf16 | 781 TFLOP/s |" in text
    assert r"| H2 | ceilings | fp32 \| a TF32 rate | fp32 51 TFLOP/s | **refuted** |" in text
    short = v.render_markdown(digest, tables=False)
    assert "| bf16 | 781 TFLOP/s |" not in short and "**refuted**" in short


def test_an_outcome_round_trips_through_json_for_the_next_calls_merge(tmp_path: Path) -> None:
    for outcome in _fake_outcomes():
        (tmp_path / f"{outcome.step}.json").write_text(json.dumps(outcome.to_dict()))
    (tmp_path / "broken.json").write_text("{not json")
    earlier = v.load_earlier(tmp_path)
    assert sorted(earlier) == ["ceilings", "compile", "facts"]  # skipped ones say so again
    assert earlier["ceilings"].tables[0].rows == [["bf16", "781 TFLOP/s"]]
    assert earlier["facts"].checks[0].verdict == v.CONFIRMED


def _finding(rule: str, status: str, share: float | None = None) -> Finding:
    return Finding(
        rule=rule,
        title=rule,
        status=status,
        summary=f"{rule} {status}",
        threshold="",
        share=share,
    )


def _step_record(start_s: float) -> Step:
    phases = dict.fromkeys(PHASES, 0.0) | {"sync": 0.085, "forward": 0.01}
    return Step(
        start_s=start_s,
        duration_s=0.1,
        phases_s=phases,
        counts=dict.fromkeys(COUNTERS, 0),
    )


def _doctor_printed(
    bottleneck: str,
    findings: list[Finding],
    shares: dict[str, float],
    whatifs: list[WhatIfResult],
    items_per_s: float = 640.0,
    recommendation: str = "",
) -> Any:
    """What ``doctor SCRIPT --json`` prints for a run that found ``findings``: a real
    :class:`DoctorResult`'s documents inside the CLI's wrapper."""
    steps = tuple(_step_record(0.1 * i) for i in range(6))
    profile = Profile(
        status="done",
        mode="train",
        warmup=2,
        target_steps=6,
        steps=steps,
        device_trace=DeviceTraceRecord(status="recorded"),
    )
    measured = breakdown(profile.measured)
    result = DoctorResult(
        script="train.py",
        args=(),
        profile=Profile.from_dict(dump(profile)),
        telemetry=None,
        diagnosis=Diagnosis(
            bottleneck=bottleneck,
            title=bottleneck,
            headline=f"{bottleneck} on the device",
            findings=tuple(findings),
            breakdown=dataclasses.replace(
                measured, shares=shares, items_per_s=Rate(items_per_s, items_per_s, items_per_s)
            ),
        ),
        what_ifs=tuple(whatifs),
        recommendation=recommendation,
    )
    document = {
        "run_id": "r1",
        "store": "",
        "report": "doctor.html",
        "trace": "trace.json",
        "bottleneck": result.diagnosis.bottleneck,
        "best": result.best,
        "recommendation": result.recommendation,
        **result.documents(),
    }
    return v.Command(["accelscope"], rc=0, seconds=1.0, stdout=json.dumps(document), stderr="")


def _whatif(name: str, speedup: float, low: float | None = None, high: float | None = None) -> Any:
    return WhatIfResult(
        name=name, label=name, status="ok", speedup=speedup, speedup_low=low, speedup_high=high
    )


def test_doctor_on_a_healthy_loop_refutes_h1_when_the_gpu_sets_the_pace() -> None:
    command = _doctor_printed(
        "device-bound",
        [
            _finding("device-bound", "fired", 0.93),
            _finding("sync-bound", "clear", 0.01),
            _finding("device-idle", "clear", 0.04),
            _finding("missing-mixed-precision", "clear"),
        ],
        {"sync": 0.85, "forward": 0.1},
        [_whatif("baseline", 1.0), _whatif("bf16", 3.1, 2.9, 3.3)],
        items_per_s=80000,
        recommendation="bf16",
    )
    doc = command.document(v.DoctorJson)
    assert doc is not None, command.why()
    out = v.summarise_doctor(v.Outcome("doctor_healthy", v.OK), doc, gpu=True)
    verdicts = {c.id: c.verdict for c in out.checks}
    assert verdicts == {
        "H1": "refuted",
        "H1 (mixed precision)": "refuted",
        "doc device-bound": "confirmed",
        "§3 bf16": "confirmed",
    }
    assert out.figures["whatif"]["bf16"]["speedup"] == 3.1
    assert out.figures["items_per_s"] == {"median": 80000, "low": 80000, "high": 80000}
    assert out.figures["device_trace"] == "recorded"
    assert out.figures["recommendation"] == "bf16"
    assert out.summary == (
        "device-bound; fired: device-bound; GPU idle 4%; what-if bf16 3.10x [2.90x-3.30x]; "
        "shares sync 85%, forward 10%"
    )
    json.dumps(out.figures)  # the digest stores the figures as JSON


def test_doctor_on_the_starved_loop_checks_input_bound_idle_and_the_workers_ratio() -> None:
    command = _doctor_printed(
        "input-bound",
        [_finding("input-bound", "fired", 0.91), _finding("device-idle", "fired", 0.9)],
        {"input": 0.91},
        [_whatif("workers", 4.2)],
    )
    doc = command.document(v.DoctorJson)
    assert doc is not None, command.why()
    out = v.summarise_doctor(v.Outcome("doctor_starved", v.OK), doc, gpu=True)
    assert [(c.id, c.verdict) for c in out.checks] == [
        ("§3 doctor starved", "confirmed"),
        ("§3 workers", "refuted"),  # 4.2x is outside the predicted 6-14x
    ]
    assert out.figures["gpu_idle_share"] == 0.9
    assert "what-if workers 4.20x;" in out.summary


def test_a_doctor_document_of_the_wrong_shape_fails_with_the_field_and_why() -> None:
    command = _doctor_printed("input-bound", [_finding("input-bound", "fired", 0.9)], {}, [])
    printed = json.loads(command.stdout)
    del printed["diagnosis"]["diagnosis"]["findings"][0]["status"]
    wrong = v.Command(["accelscope"], rc=0, seconds=1.0, stdout=json.dumps(printed), stderr="")
    assert wrong.document(v.DoctorJson) is None
    assert wrong.why() == (
        "not DoctorJson JSON: diagnosis.diagnosis.findings.0.status: Field required"
    )
    del printed["diagnosis"]["profile"]["steps"]  # read by Profile.from_dict
    printed["diagnosis"]["diagnosis"]["findings"] = []
    wrong = v.Command(["accelscope"], rc=0, seconds=1.0, stdout=json.dumps(printed), stderr="")
    assert wrong.document(v.DoctorJson) is None
    assert wrong.why().startswith("not DoctorJson JSON: diagnosis.profile: Value error, steps:")
    roofline = _printed(RooflineProfile.model_validate(roofline_payload()))
    assert roofline.document(v.DoctorJson) is None
    assert roofline.why() == "not DoctorJson JSON: bottleneck: Field required"
    failed = v.Command(["accelscope"], rc=2, seconds=1.0, stdout="", stderr="error: no GPU events")
    assert failed.document(v.TraceJson, failed_too=True) is None
    assert failed.why() == "exit 2: error: no GPU events"  # its exit, not the missing JSON


def test_the_archetype_replay_is_read_as_the_timeline_verdict_it_printed() -> None:
    verdict = TimelineVerdict(
        bottleneck="input-bound",
        headline="the GPU waits for input",
        advice="more DataLoader workers",
        ranked=(("input", 0.6),),
        step_s=0.1,
        compute_share=0.3,
        busy_share=0.35,
        copy_share=0.05,
        idle_share=0.65,
        nvml_utilisation=None,
        sm_active=0.3,
    )
    printed = {
        "mode": "trace",
        "slowest": "rank0",
        "ranks": [{"rank": "rank0", "verdict": dataclasses.asdict(verdict), "steps": []}],
        "what_ifs": "what-ifs need the script",
        "report": "",
    }
    text = json.dumps(printed, allow_nan=False, default=str)
    command = v.Command(["accelscope"], rc=0, seconds=1.0, stdout=text, stderr="")
    doc = command.document(v.TraceJson)
    assert doc is not None, command.why()
    assert doc.ranks[0].verdict == verdict


def test_audit_is_read_as_the_document_the_audit_printed() -> None:
    outcome = audit(
        AuditRequest(sample_s=1.0, step_s=0.25, prices=(("NVIDIA L4", 1.0),)),
        store_path=None,
        nvml=FakeNvml(gpm=True),
    )
    printed = json.dumps({"run_id": None, "report": "", **outcome.document})
    command = v.Command(["accelscope"], rc=0, seconds=1.0, stdout=printed, stderr="")
    doc = command.document(v.AuditJson)
    assert doc is not None, command.why()
    out = v.summarise_audit(v.Outcome("audit", v.OK), doc, gpu=True)
    (device,) = outcome.document["devices"]
    assert out.figures["device"] == "NVIDIA L4"
    assert out.figures["busy_share"] == pytest.approx(0.87)  # NVML: 87 %
    assert out.figures["useful_share"] == pytest.approx(0.615)  # GPM SM activity
    assert out.figures["power_mean_w"] == device["power_mean_w"]
    assert out.figures["not_measured"] == device["not_measured"]
    assert out.summary.startswith("NVIDIA L4: busy 87%, useful 62%, SM p95 ")
    assert [c.id for c in out.checks] == ["§3 audit", "M2 (audit)"]
    json.dumps(out.figures)
    nothing = v.AuditJson.model_validate({**outcome.document, "devices": []})
    empty = v.summarise_audit(v.Outcome("audit", v.OK), nothing, gpu=False)
    assert empty.summary == f"no GPU sampled ({outcome.document['source']})"
    assert empty.figures["device"] is None


def test_load_is_read_as_the_trials_it_printed() -> None:
    def latency(p99_s: float) -> LoadDistribution:
        return LoadDistribution(count=4000, mean_s=0.01, p50_s=0.01, p90_s=0.012, p99_s=p99_s)

    trial = LoadTrial(
        scenario=Scenario.OFFLINE,
        policy=BatchPolicy(max_batch=32),
        offered_rate_per_s=None,
        sla_p99_s=None,
        issued=4000,
        completed=4000,
        errors=0,
        timeouts=0,
        cancelled=0,
        latency=latency(0.02),
        queue=latency(0.01),
        compute=latency(0.005),
        lag=LoadDistribution(),
        duration_s=0.5,
        throughput_per_s=8000.0,
        mean_batch=31.5,
        batches=127,
        early_stopping=None,
        p90_estimate_s=None,
        p99_estimate_s=None,
        invalid_reasons=(),
        energy=EnergyFigure(energy_j=400.0, items=4000, window_s=0.5),
    )
    printed = {
        "run_id": "r1",
        "store": "",
        "report": "",
        "model": "resnet50",
        "label": "resnet50/fp32/b32",
        "scenario": "offline",
        "capacity": None,
        "trials": [trial.to_dict()],
        "notes": [],
        "harness_floor": None,
    }
    command = v.Command(["accelscope"], rc=0, seconds=1.0, stdout=json.dumps(printed), stderr="")
    doc = command.document(v.LoadJson)
    assert doc is not None, command.why()
    assert doc.trials == [trial]
    bench = {"fp32/b64": {"items_per_s": 16000.0}}
    out = v.summarise_load(v.Outcome("load", v.OK), doc, bench_configs=bench, gpu=True)
    assert out.figures == {
        "throughput_per_s": 8000.0,
        "mean_batch": 31.5,
        "p99_s": 0.02,
        "joules_per_item": 0.1,
        "bench_fp32_b64": 16000.0,
    }
    assert out.summary == "offline b32: 8 k/s, mean batch 31.5; bench fp32 b64 / load = 2.00x"
    assert [(c.id, c.verdict) for c in out.checks] == [("§3 / M8 load", "confirmed")]
    del printed["trials"][0]["latency"]
    wrong = v.Command(["accelscope"], rc=0, seconds=1.0, stdout=json.dumps(printed), stderr="")
    assert wrong.document(v.LoadJson) is None
    assert wrong.why() == "not LoadJson JSON: trials.0: Value error, latency: Field required"


def test_ceilings_rows_are_shares_of_the_datasheet_and_h2_m5_l4_are_judged() -> None:
    doc = {
        "device": "cuda",
        "device_name": "NVIDIA H100 80GB HBM3",
        "matmul_flops_per_s": {"bf16": 7.6e14, "fp16": 7.4e14, "tf32": 3.6e14, "fp32": 5.1e13},
        "bandwidth_bytes_per_s": 2.9e12,
        "bandwidth_detail_bytes_per_s": {"copy": 2.9e12, "triad": 2.8e12},
        "theoretical": {
            "flops_per_s": {"bf16": 989e12, "fp16": 989e12, "tf32": 494e12, "fp32": 67e12},
            "bandwidth_bytes_per_s": 3.35e12,
        },
        "peaks": {
            "fp32": {
                "family": "mm",
                "shape": [8192, 8192, 8192],
                "threads": 0,
                "flops_per_s": 5.1e13,
            }
        },
    }
    out = v.summarise_ceilings(v.Outcome("ceilings", v.OK), v.Ceilings.model_validate(doc))
    verdicts = {c.id: c.verdict for c in out.checks}
    assert verdicts == {
        "H2": "refuted",
        "L4 / §3": "confirmed",
        "M5 (peak)": "refuted",
        "§3 bandwidth": "confirmed",
    }
    rows = {r[0]: r for r in out.tables[0].rows}
    assert rows["bf16"][1:4] == ["760 TFLOP/s", "989 TFLOP/s", "77%"]
    assert rows["fp32"][3] == "76%" and rows["fp32"][4] == "mm"
    assert rows["memory"][3] == "87%"


def test_facts_judge_the_premises_tf32_gpm_and_the_cuda13_clock_fields() -> None:
    facts = {
        "python": "3.12.3",
        "torch": "2.11.0+cu130",
        "torch_cuda": "13.0",
        "cuda_available": True,
        "device": {"name": "NVIDIA H200", "clock_rate_present": False, "sms": 132},
        "tf32": {"rel_err_default": {"conv": 4.2e-4, "matmul": 1.1e-6}},
        "ceilings": {"copy_bytes_per_s": 4.3e12, "bf16_matmul_flops_per_s": 7.9e14},
        "nvml": {
            "driver": "580.159.03",
            "cuda_driver": "13.0",
            "gpm": {
                "supported": True,
                "metrics_under_bf16_load": {
                    "SM_UTIL": {"return_code": 0, "value": 99.0},
                    "ANY_TENSOR_UTIL": {"return_code": 3, "value": 0.0},
                },
            },
            "energy": {"update_period_s": 0.1},
        },
        "discovery": {"child_holds_a_context": False, "gpus_seen": "1"},
    }
    out = v.summarise_facts(v.Outcome("facts", v.OK), facts)
    verdicts = {c.id: c.verdict for c in out.checks}
    assert verdicts == {
        "premise TF32": "confirmed",
        "premise GPM / M2": "confirmed",  # a core metric was refused
        "M5 (fields)": "confirmed",
        "doc discovery": "confirmed",
    }
    assert "refused {'ANY_TENSOR_UTIL': 3}" in out.summary
    assert "copy 4.3 TB/s, bf16 8192^3 790 TFLOP/s" in out.summary


def test_bench_rows_give_items_per_second_energy_and_the_recorded_fp32_math() -> None:
    ieee = dataclasses.replace(
        fixed_environment(), numerics=(("cuda_matmul_fp32", "ieee"), ("cudnn_conv_fp32", "ieee"))
    )

    def result(precision: str, batch: int, median_s: float, joules: float | None) -> Any:
        base = fake_result(ieee, batch=batch)
        assert base.measurement is not None and base.accuracy is not None
        fidelity = dataclasses.replace(base.accuracy.fidelity, top1_agreement=1.0)
        return dataclasses.replace(
            base,
            spec=dataclasses.replace(base.spec, precision=Precision(precision), device=Device.CUDA),
            measurement=dataclasses.replace(base.measurement, samples_s=(median_s,) * 3),
            accuracy=dataclasses.replace(base.accuracy, fidelity=fidelity),
            energy=EnergyFigure(energy_j=joules * batch, items=batch, window_s=joules * batch / 600)
            if joules
            else EnergyFigure.not_measured("no energy counter in this fake"),
        )

    printed = {
        "run_id": "r1",
        "verdict": "bf16/b64",
        "results": [
            dump(result("fp32", 64, 0.016, 0.1)),
            dump(result("bf16", 64, 0.004, 0.04)),
            dump(result("bf16", 8, 0.0032, None)),
        ],
    }
    command = v.Command(["accelscope"], rc=0, seconds=1.0, stdout=json.dumps(printed), stderr="")
    doc = command.document(v.ResultsJson)
    assert doc is not None
    out = v.summarise_bench(v.Outcome("bench", v.OK), doc)
    assert out.figures["configs"]["bf16/b64"]["items_per_s"] == pytest.approx(16000)
    assert "bf16 b64 0.0400 J/image" in out.summary
    verdicts = {c.id: c.verdict for c in out.checks}
    assert verdicts["M1"] == "refuted"  # IEEE recorded: the fix holds
    assert verdicts["§3 bench b64"] == "confirmed"
    assert verdicts["§3 bench b8"] == "confirmed"  # 2,500 img/s
    assert verdicts["doc energy"] == "confirmed"


def _printed(document: Any, noise: str = "") -> Any:
    """A finished command whose stdout is ``document`` as ``--json`` prints it (its run id
    and report first), after ``noise``."""
    head = {"run_id": "r1", "report": ""}
    line = json.dumps({**head, **document.model_dump(mode="json")})
    return v.Command(argv=["accelscope"], rc=0, seconds=1.0, stdout=noise + line, stderr="")


def test_roofline_is_read_as_the_typed_document_it_printed() -> None:
    profile = RooflineProfile.model_validate(roofline_payload())
    command = _printed(profile, noise="Loading weights\n")
    doc = command.document(v.RooflineProfile)
    assert doc == profile
    out = v.summarise_roofline(v.Outcome("roofline", v.OK), doc, gpu=False)
    calls = sum(op.calls or 1 for op in profile.operators)
    assert sum(out.figures["bounds_by_calls"].values()) == calls
    assert out.figures["measured_time_s"] == profile.measured_time_s
    assert out.summary.startswith(f"{profile.model} {profile.precision} b{profile.batch_size}")
    json.dumps(out.figures)  # the digest stores the figures as JSON


def test_a_document_of_the_wrong_shape_fails_the_step_with_why() -> None:
    command = _printed(RooflineProfile.model_validate(roofline_payload()))
    assert command.document(v.Ceilings) is None
    assert command.why().startswith("not Ceilings JSON: matmul_flops_per_s: ")
    failed = v.Command(argv=["accelscope"], rc=2, seconds=1.0, stdout="", stderr="bad flag")
    assert failed.document(v.Ceilings) is None
    assert failed.why() == "exit 2: bad flag"


def test_env_is_read_back_as_the_environment_it_printed() -> None:
    env = fixed_environment()
    printed = {**dump(env), "fingerprint": env.fingerprint(), "precision_support": []}
    command = v.Command(["accelscope"], rc=0, seconds=1.0, stdout=json.dumps(printed), stderr="")
    read = command.document(v.Environment)
    assert read == env
    assert read.fingerprint() == printed["fingerprint"]


def test_llm_trials_are_read_as_attributes_of_the_llm_run() -> None:
    def trial(index: int, concurrency: int, tpot_s: float) -> LlmTrial:
        return LlmTrial(
            index=index,
            label=f"c{concurrency}",
            arrivals=Arrivals(concurrency=concurrency),
            summary=TrialSummary(
                requests=8,
                completed=8,
                errors=0,
                metrics=Metrics(
                    ttft_s=Distribution(n=8, p50=0.02), tpot_s=Distribution(n=8, p50=tpot_s)
                ),
                throughput=Throughput(
                    output_tokens_per_s=900.0, total_tokens_per_s=1800.0, requests_per_s=4.0
                ),
            ),
            floor=DecodeFloor(
                weights_read_bytes=2.2e8,
                active_parameters=1.1e8,
                kv_bytes_per_token=4096,
                decode_batch_mean=concurrency,
                context_mean_tokens=64,
                bandwidth_bytes_per_s=2.2e12,
                bandwidth_source="ceilings",
                tpot_floor_s=1e-4,
                decode_efficiency=0.025,
                bound="bandwidth",
            ),
        )

    run = LlmRun(
        model="llama",
        target=TargetDescription(
            kind="in-process",
            device="cuda",
            dtype="bfloat16",
            parameters=110_000_000,
            batching="static",
        ),
        trials=[trial(0, 1, 0.004), trial(1, 4, 0.005)],
    )
    doc = _printed(run).document(v.LlmRun)
    assert doc is not None
    out = v.summarise_llm(v.Outcome("llm", v.OK), doc, gpu=True, gpu_memory_mib=900.0)
    assert [t["concurrency"] for t in out.figures["trials"]] == [1, 4]
    assert out.figures["trials"][0]["tpot_floor_s"] == 1e-4
    assert "110 M params bfloat16 on cuda: TPOT p50 4 ms vs floor 0.1 ms (2%)" in out.summary
    assert out.tables[0].rows[1][:3] == [4, "20 ms", "5 ms"]
    assert {c.id: c.verdict for c in out.checks} == {"H3": "refuted"}  # it held GPU memory
    json.dumps(out.figures)


def test_helpers() -> None:
    assert v.opts(measure_budget="3s", json=True, store=None, no_store=False, batch=8) == [
        "--measure-budget",
        "3s",
        "--json",
        "--batch",
        "8",
    ]
    assert v.dig({"a": [{"b": 1}]}, "a", 0, "b") == 1
    assert v.dig({"a": [{"b": 1}]}, "a", 3, "b", default="x") == "x"
    assert v.parse_json('Loading weights\n{"a": 1}') == {"a": 1}
    assert v.parse_json("") is None
    assert v.si(7.9e14, "FLOP/s") == "790 TFLOP/s"
    assert v.si(None, "B/s") == "n/a"
    assert v.verdict(None) == "not checked"


def _alive(pid: int) -> bool:
    """Running (a zombie waiting for its reaper is dead)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def test_a_command_past_its_limit_is_killed_with_its_children(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runner = v.Runner(v.CPU, tmp_path, io.StringIO())
    runner.deadline = time.monotonic() + 30
    started = tmp_path / "started"  # written once the child's pid is printed
    code = (
        "import os, subprocess, sys, time; "
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
        "print(child.pid, flush=True); "
        f"open({str(started)!r} + '.tmp', 'w').write(str(child.pid)); "
        f"os.replace({str(started)!r} + '.tmp', {str(started)!r}); time.sleep(60)"
    )
    # the fault: the 1.5 s limit's kill, let through once the command printed its child's pid
    real_kill_group = v.kill_group

    def kill_group_once_the_child_runs(process: Any) -> None:
        deadline = time.monotonic() + 60
        while not started.exists():
            assert time.monotonic() < deadline, "the command never started its child"
            time.sleep(0.01)
        real_kill_group(process)

    monkeypatch.setattr(v, "kill_group", kill_group_once_the_child_runs)
    began = time.monotonic()
    result = runner.python("-c", code, timeout_s=1.5, label="sleeper")
    assert time.monotonic() - began < 30  # killed at its limit, not after its 60 s
    assert result.timed_out and result.rc is None and not result.ok
    assert result.why().startswith("killed at its")
    grandchild = int(result.stdout.split()[0])  # what it printed before the kill is kept
    assert grandchild == int(started.read_text())
    deadline = time.monotonic() + 30
    while _alive(grandchild):  # killed with its group: gone once the kernel has reaped it
        assert time.monotonic() < deadline, "the command's child survived it"
        time.sleep(0.01)
    assert "# killed at its limit" in runner.log.getvalue()


def test_a_command_is_not_started_once_the_steps_time_is_spent(tmp_path: Path) -> None:
    runner = v.Runner(v.CPU, tmp_path, io.StringIO())
    runner.deadline = time.monotonic()  # spent
    result = runner.cli("env", timeout_s=60)
    assert result.timed_out and result.stderr == "not run: the step's time was spent"


def _llm_run(tpot_s: float, compile_s: float | None = None) -> LlmRun:
    extra = {} if compile_s is None else {"cache": "static", "compile": True}
    if compile_s is not None:
        extra |= {"compile_mode": "reduce-overhead", "compile_s": compile_s}
    trial = LlmTrial(
        index=0,
        label="c1",
        arrivals=Arrivals(concurrency=1),
        summary=TrialSummary(
            requests=16,
            completed=16,
            errors=0,
            metrics=Metrics(
                ttft_s=Distribution(n=16, p50=0.01), tpot_s=Distribution(n=16, p50=tpot_s)
            ),
        ),
    )
    target = TargetDescription(kind="in-process", device="cuda", dtype="bfloat16", **extra)
    return LlmRun(model="llama", target=target, trials=[trial])


def test_the_llm_compile_step_alternates_fresh_runs_and_gives_the_tpot_ratio_with_its_interval(
    tmp_path: Path,
) -> None:
    # each side a fresh process, the order alternating per round (eager first, then compiled
    # first): the ratio is compiled / eager over paired rounds, the compile time kept apart
    (tmp_path / "llama-tiny").mkdir()
    (tmp_path / "llama-tiny" / "config.json").write_text("{}")
    tpots = {"eager": iter([4.0e-3, 4.4e-3, 3.8e-3]), "compiled": iter([1.0e-3, 1.2e-3, 0.9e-3])}
    calls: list[tuple[str, ...]] = []

    def cli(*args: str, timeout_s: float, label: str) -> Any:
        calls.append(args)
        side = "compiled" if "--compile" in args else "eager"
        return _printed(_llm_run(next(tpots[side]), 41.0 if side == "compiled" else None))

    run = SimpleNamespace(
        profile=dataclasses.replace(v.GPU, llm_shape={}),
        workdir=tmp_path,
        store=tmp_path / "results.db",
        cli=cli,
        record_command=lambda out, result: None,
    )
    out = v.step_llm_compile(run, 600.0)
    assert out.status == v.OK
    order = ["--compile" in c for c in calls]
    assert order == [False, True, True, False, False, True]
    assert all("--concurrency" in c and "1" in c for c in calls)
    ratios = [1.0 / 4.0, 1.2 / 4.4, 0.9 / 3.8]
    geometric = (ratios[0] * ratios[1] * ratios[2]) ** (1 / 3)
    assert out.figures["ratio"] == pytest.approx(geometric)
    assert out.figures["low"] < out.figures["ratio"] < out.figures["high"] < 1.0
    assert out.figures["compile_s"] == [41.0, 41.0, 41.0]
    assert out.figures["compile_mode"] == "reduce-overhead"
    summary = "TPOT p50 with --compile (reduce-overhead) / without: 0.253x (0.212x-0.302x, 95 %"
    assert out.summary.startswith(summary + ", 3 rounds); compile 41 s, 41 s, 41 s")
    assert out.tables[0].rows[0][:4] == [1, "4 ms", "1 ms", "0.25x"]
    json.dumps(out.figures)


def test_one_round_of_llm_compile_gives_the_ratio_but_no_interval() -> None:
    out = v.summarise_llm_compile(
        v.Outcome("llm_compile", v.OK), [_llm_run(4e-3)], [_llm_run(2e-3, 30.0)]
    )
    assert out.figures["ratio"] == pytest.approx(0.5)
    assert out.figures["low"] is None and out.figures["why_no_interval"]
    assert "no interval" in out.summary
    empty = v.summarise_llm_compile(v.Outcome("llm_compile", v.OK), [], [])
    assert empty.summary == "no round with a TPOT on both sides"
    assert empty.status == v.FAILED  # a step that measured nothing is no success


_GPU_IMAGE = {
    "torch", "numpy", "typer", "rich", "psutil", "scikit-learn", "scipy", "jinja2",
    "threadpoolctl",  # scikit-learn's own dependency: there wherever scikit-learn is
}  # fmt: skip
"""accelscope's dependencies the lent GPU machine's image has (shared/GPU-NOTES.md section 3,
the device tool's KINDS.md): every other one must travel as a wheel, or `import accelscope.cli`
fails there before any step runs."""


def test_every_dependency_the_gpu_image_lacks_travels_as_a_wheel() -> None:
    import re
    import tomllib

    root = PATH.parents[2]
    needed = tomllib.loads((root / "pyproject.toml").read_text())["project"]["dependencies"]
    names = {re.split(r"[<>=!~ \[]", spec, maxsplit=1)[0].lower() for spec in needed}
    pins = dict(
        line.split("==")
        for line in (PATH.parent / "wheels.txt").read_text().splitlines()
        if line and not line.startswith("#")
    )
    missing = names - _GPU_IMAGE - set(pins)
    assert not missing, f"add {sorted(missing)} to benchmarks/gpu/wheels.txt"
