"""Training what-ifs (issue 43): the larger micro-batch sized to the memory estimated from the
measured peak (or gradient accumulation when nothing larger fits), and bf16/fp16 (fp16 with a
GradScaler) whose loss over the measured steps is compared with fp32's from the same seed, so a
diverging recipe is not recommended.

Covers: accelscope.doctor.train_whatif, accelscope.doctor.whatif, accelscope.doctor.diagnose,
accelscope.doctor.inprocess.inject, accelscope.doctor.inprocess.instrument,
accelscope.doctor.launcher."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pytest
from test_doctor_rules import _ctx, _facts, _step

from accelscope.doctor.diagnose import DoctorPlan, DoctorResult, run_doctor
from accelscope.doctor.findings import RuleContext
from accelscope.doctor.launcher import Launcher
from accelscope.doctor.profile import GpuMemory, Profile, TrainState
from accelscope.doctor.train_whatif import (
    LOSS_GAP_BOUND,
    BatchMemory,
    LossComparison,
    accumulation_speedup,
    batch_memory,
    compare_losses,
)
from accelscope.doctor.whatif import WhatIfResult, loss_caveat, plan_what_ifs, recommend
from accelscope.hardware.fingerprint import collect_environment
from accelscope.hardware.telemetry import Telemetry, TelemetrySample

_GIB = 2**30

# A small MLP trained in code; ``--scale`` multiplies the logits after the model's forward, so
# under fp16 autocast (the forward's output in fp16) a large scale overflows to inf.
_SCRIPT = """
import sys
import torch
from torch import nn

scale = float(sys.argv[1]) if len(sys.argv) > 1 else 1.0
model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
inputs = torch.randn(512, 64)
targets = torch.randint(0, 10, (512,))
for step in range(1000):
    index = torch.randint(0, 512, (32,))
    logits = model(inputs[index]) * scale
    loss = nn.functional.cross_entropy(logits, targets[index])
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
"""


def _doctor(tmp_path: Path, what_if: str, *args: str) -> DoctorResult:
    script = tmp_path / "train.py"
    script.write_text(_SCRIPT, encoding="utf-8")
    env = collect_environment()
    launcher = Launcher(
        env={"OMP_NUM_THREADS": "1"}, stall_s=60, timeout_s=120, telemetry_interval_s=0.05
    )
    plan = DoctorPlan(script=script, args=args, warmup=3, steps=12, what_if=what_if)
    return run_doctor(
        plan,
        launcher,
        support=env.precision_support(),
        cores=2,
        memory_bytes=env.memory_bytes,
    )


@pytest.mark.slow  # doctor runs of a training script (40-60 s); no time is asserted
def test_bf16_and_fp16_losses_compared_with_fp32_from_the_same_seed(tmp_path: Path) -> None:
    result = _doctor(tmp_path, "bf16,fp16,batch")
    state = result.profile.facts.train_state if result.profile.facts else None
    assert state is not None and state.optimizer == "AdamW"
    params = (64 * 128 + 128 + 128 * 10 + 10) * 4
    assert state.parameter_bytes == params and state.gradient_bytes == params
    assert state.optimizer_state_bytes >= 2 * params  # exp_avg, exp_avg_sq (+ step counters)
    by = {w.name: w for w in result.what_ifs}
    base = by["baseline"]
    assert base.status == "ok" and base.loss_gap is None
    bf16 = by["bf16"]
    assert bf16.status == "ok", bf16.reason
    assert bf16.loss_gap is not None and 0 <= bf16.loss_gap <= LOSS_GAP_BOUND
    assert bf16.caveat.startswith("changes numerics: mean loss")
    assert "training: no GradScaler (bf16)" in bf16.notes
    fp16 = by["fp16"]  # asked for explicitly: CPU fp16 autocast runs, slowly
    assert fp16.status == "ok", fp16.reason
    assert fp16.details["grad_scaler"] is True and fp16.details["loss_scale"] > 0
    assert fp16.loss_gap is not None and fp16.loss_gap <= LOSS_GAP_BOUND
    assert "GradScaler" in fp16.label
    batch = by["batch"]  # sized from the measured RSS peak and train state
    assert batch.status == "ok"
    # This MLP's activations are kilobytes: its RSS peak over the RSS before the first forward
    # is mostly pages the process touched for the first time, and on a machine that reclaims
    # cold pages (DAMON here) it can read no growth at all (seen once in three fresh clones).
    # Then the estimate is refused in words, never made up: both branches are held exactly by
    # test_the_batch_memory_is_estimated_from_the_rss_peak_or_refused_in_words.
    estimated = [n for n in batch.notes if n.startswith("memory x4: ~")]
    refused = [n for n in batch.notes if "does not exceed what the loop holds" in n]
    assert len(estimated) + len(refused) == 1, batch.notes
    docs = result.documents()  # the store round trip keeps the train state and loss gaps
    back = DoctorResult.from_documents(docs["diagnosis"], docs["telemetry"], docs["whatif"])
    assert back.profile.facts is not None and back.profile.facts.train_state == state
    assert {w.name: w.loss_gap for w in back.what_ifs} == {w.name: w.loss_gap for w in by.values()}


@pytest.mark.slow  # doctor runs of a training script (40-60 s); no time is asserted
def test_a_diverging_fp16_recipe_is_not_recommended(tmp_path: Path) -> None:
    result = _doctor(tmp_path, "fp16", "1e6")  # logits x 1e6 overflow fp16's 65504
    fp16 = next(w for w in result.what_ifs if w.name == "fp16")
    assert fp16.status == "ok", fp16.reason
    assert fp16.loss_gap == math.inf  # stored as null; the caveat says why
    assert fp16.caveat.startswith("changes results: the loss became non-finite")
    assert fp16.details["scaler_skipped_steps"] >= 1  # every step's gradients were inf
    assert result.best != "fp16"


def test_loss_comparison_bound_and_recommendation() -> None:
    close = compare_losses({5: 2.0, 6: 1.0}, {5: 2.02, 6: 1.01, 9: 7.0})
    assert close is not None and close.steps == 2
    assert close.gap == pytest.approx(0.03 / 3.0) and not close.diverging
    far = compare_losses({5: 2.0}, {5: 2.0 * (1 + LOSS_GAP_BOUND) + 1e-9})
    assert far is not None and far.diverging
    broken = compare_losses({5: 2.0, 6: 1.0}, {5: 2.0, 6: None})
    assert broken is not None and broken.gap == math.inf and broken.diverging
    assert compare_losses({5: None}, {5: 1.0}) is None  # nothing finite to compare against
    assert compare_losses({5: 1.0}, {6: 1.0}) is None  # no common step
    with pytest.raises(ValueError):
        LossComparison(steps=0, baseline_mean=1.0, what_if_mean=1.0)

    def ok(name: str, caveat: str) -> WhatIfResult:
        return WhatIfResult(
            name=name, label=name, status="ok", speedup=3.0, speedup_low=2.5, caveat=caveat
        )

    assert loss_caveat("bf16", close).startswith("changes numerics")
    diverged = ok("fp16", loss_caveat("fp16", far))
    assert recommend([diverged])[0] is None
    assert recommend([diverged, ok("bf16", loss_caveat("bf16", close))])[0] == "bf16"


def _training_ctx(
    *, peak_gib: float, held_gib: float, total_gib: float, optimizer_s: float = 0.02
) -> RuleContext:
    state = TrainState(
        optimizer="AdamW",
        parameter_bytes=int(held_gib / 4 * _GIB),
        gradient_bytes=int(held_gib / 4 * _GIB),
        optimizer_state_bytes=int(held_gib / 2 * _GIB),
    )
    ctx = _ctx([_step(0.1, forward=0.03, backward=0.05, optimizer=optimizer_s)] * 4)
    facts = replace(_facts(), train_state=state)
    gpu = GpuMemory(
        device="cuda:0 fake",
        allocated_peak_bytes=int(peak_gib * _GIB),
        reserved_peak_bytes=int(peak_gib * _GIB),
        total_bytes=int(total_gib * _GIB),
        alloc_retries=0,
        ooms=0,
    )
    profile: Profile = replace(ctx.profile, facts=facts, gpu_memory=gpu)
    return replace(ctx, profile=profile)


def test_batch_is_sized_to_the_estimated_memory() -> None:
    # held 4 GiB, peak 6 GiB: 2 GiB activations; 90 % of 80 GiB fits x4 (12 GiB)
    roomy = _training_ctx(peak_gib=6, held_gib=4, total_gib=80)
    (batch,) = plan_what_ifs("list", (("batch", None),), roomy, ())
    assert batch.spec == {"kind": "batch", "factor": 4}
    assert "x4: ~12.00 GiB estimated" in batch.notes[0]
    # a 10 GiB device: budget 9 GiB, x2 needs 8 GiB, x3 10 GiB: x2 is the largest that fits
    tight = _training_ctx(peak_gib=6, held_gib=4, total_gib=10)
    (batch,) = plan_what_ifs("list", (("batch", None),), tight, ())
    assert batch.spec == {"kind": "batch", "factor": 2}
    assert "x2 is the largest that fits" in batch.notes[0]
    # a 7 GiB device: nothing larger fits: gradient accumulation, estimated, not run
    full = _training_ctx(peak_gib=6, held_gib=4, total_gib=7)
    (batch,) = plan_what_ifs("list", (("batch", None),), full, ())
    assert batch.spec is None
    gain = accumulation_speedup(full, 4)
    assert gain == pytest.approx(0.1 / (0.1 - 0.02 * 3 / 4))
    assert "gradient accumulation over 4 micro-batches" in batch.reason
    assert f"~{gain:.2f}x samples/s" in batch.reason and "not measured" in batch.reason


def test_batch_memory_invariants() -> None:
    memory = BatchMemory(
        factor=4, source="CUDA allocated peak", peak_bytes=6, held_bytes=4, budget_bytes=20
    )
    assert memory.activation_bytes == 2 and memory.estimated_bytes == 12 and memory.fits
    assert memory.largest_factor() == 8
    with pytest.raises(ValueError, match="must exceed"):
        BatchMemory(factor=2, source="x", peak_bytes=4, held_bytes=4, budget_bytes=10)
    with pytest.raises(ValueError, match="factor"):
        BatchMemory(factor=0, source="x", peak_bytes=6, held_bytes=4, budget_bytes=10)
    with pytest.raises(ValueError, match="budget"):
        BatchMemory(factor=2, source="x", peak_bytes=6, held_bytes=4, budget_bytes=math.nan)
    with pytest.raises(ValueError, match=">= 0"):
        TrainState(optimizer="SGD", parameter_bytes=-1, gradient_bytes=0, optimizer_state_bytes=0)


def test_without_a_measured_train_state_batch_runs_unsized() -> None:
    ctx = _ctx([_step(0.1, forward=0.05, backward=0.04)] * 3)  # no train_state recorded
    (batch,) = plan_what_ifs("list", (("batch", None),), ctx, ())
    assert batch.spec == {"kind": "batch", "factor": 4}
    assert batch.notes == ("memory at x4 not estimated: no optimizer state was measured",)


def _rss_ctx(peak_bytes: int, before_bytes: int) -> RuleContext:
    """A training loop whose telemetry's RSS peaks at ``peak_bytes``, with 1 MiB of parameters
    (AdamW: 1 MiB of gradients, 2 MiB of states) and ``before_bytes`` before its first forward."""
    state = TrainState(
        optimizer="AdamW",
        parameter_bytes=2**20,
        gradient_bytes=2**20,
        optimizer_state_bytes=2 * 2**20,
        rss_before_first_step_bytes=before_bytes,
    )
    samples = tuple(
        TelemetrySample(
            t_s=0.05 * i, cpu_percent=(50.0,), iowait_percent=0.0, procs_running=1,
            process_rss_bytes=rss, process_cpu_cores=1.0, processes=1,
            available_bytes=20 * _GIB, swap_used_bytes=0,
        )
        for i, rss in enumerate((before_bytes, peak_bytes, before_bytes))
    )  # fmt: skip
    telemetry = Telemetry(
        interval_s=0.05, samples=samples, gpu_status="none", sm_activity_status="none"
    )
    facts = replace(_facts(), train_state=state)
    return _ctx([_step(0.1, forward=0.05, backward=0.04)] * 3, facts=facts, telemetry=telemetry)


def test_the_batch_memory_is_estimated_from_the_rss_peak_or_refused_in_words() -> None:
    before = 300 * 2**20
    memory, why = batch_memory(_rss_ctx(before + 3 * 2**20 + 8 * 2**20, before), 4)
    assert why == "" and memory is not None and memory.source == "RSS peak"
    assert memory.activation_bytes == 8 * 2**20  # the peak over what the loop holds
    assert memory.estimated_bytes == memory.peak_bytes + 3 * 8 * 2**20
    memory, why = batch_memory(_rss_ctx(before + 2 * 2**20, before), 4)  # pages reclaimed
    assert memory is None
    assert why == (
        "not estimated: the measured RSS peak (0.29 GiB) does not exceed what the loop holds "
        "between steps (0.30 GiB)"
    )
