"""The CPU case of issue 29: a conv-net loop with 16 torch threads and 4 DataLoader workers on
2 cores was named 'missing-mixed-precision' while bf16 measured 0.32x (channels-first
convolutions), and its threads what-if tried 1 thread (cores minus workers, though the workers
were idle 99 % of the time). A what-if's default now comes from measured load (the workers'
busy cores over the measured steps), and bf16 on a model with 4-D convolutions is also measured
with channels_last, the better of the two being the figure.

Covers: accelscope.doctor.whatif, accelscope.doctor.refute, accelscope.doctor.verdict,
accelscope.doctor.inprocess.worker_load, accelscope.doctor.inprocess.inject."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from test_doctor_rules import _ctx, _facts, _probe, _step

from accelscope.doctor.findings import RuleContext
from accelscope.doctor.inprocess.inject import Injector, describe
from accelscope.doctor.inprocess.worker_load import WorkerLoad
from accelscope.doctor.refute import refute_by_what_ifs
from accelscope.doctor.verdict import diagnose
from accelscope.doctor.whatif import WhatIfResult, pair_variants, plan_what_ifs


def _issue_ctx(busy: float | None, *, conv: bool = True) -> RuleContext:
    facts = _facts(workers=4, threads=16)
    main = {"parameter_dtypes": {"float32": 10}, "conv2d": conv}
    facts = replace(facts, worker_busy_cores=busy, main_model=main)
    steps = [_step(0.05, forward=0.02, backward=0.025)] * 5
    return _ctx(steps, _probe(40, 0.045, 0.03), facts=facts)


def test_threads_default_is_cores_minus_the_workers_measured_busy_cores() -> None:
    idle = _issue_ctx(busy=0.02)  # 4 workers, idle 99 % of the time
    assert idle.threads_to_try()[0] == 2
    planned = {p.name: p for p in plan_what_ifs("list", (("threads", None),), idle, ())}
    assert planned["threads"].spec == {"kind": "threads", "threads": 2}
    busy = _issue_ctx(busy=0.9)  # the workers kept ~1 core busy
    assert busy.threads_to_try()[0] == 1
    unmeasured = _issue_ctx(busy=None)  # no measurement: the worker count, as before
    threads, how = unmeasured.threads_to_try()
    assert threads == 1 and "not measured" in how


def test_oversubscription_suggests_threads_from_measured_load() -> None:
    found = {f.rule: f for f in diagnose(_issue_ctx(busy=0.02)).findings}
    over = found["thread-oversubscription"]
    assert over.fired and over.what_ifs == ("threads=2",)
    assert over.evidence["dataloader_workers_busy_cores"] == pytest.approx(0.02)
    assert "busy over the measured steps" in str(over.evidence["threads_sized_from"])


def test_bf16_on_a_conv_model_is_also_measured_with_channels_last() -> None:
    planned = plan_what_ifs("list", (("bf16", None),), _issue_ctx(busy=0.0), ())
    specs = [p.spec for p in planned]
    assert specs == [
        {"kind": "autocast", "dtype": "bfloat16"},
        {"kind": "autocast", "dtype": "bfloat16", "channels_last": True},
    ]
    assert [p.name for p in planned] == ["bf16", "bf16"]
    assert planned[1].label == "autocast bfloat16 + channels_last"
    plain = plan_what_ifs("list", (("bf16", None),), _issue_ctx(busy=0.0, conv=False), ())
    assert [p.spec for p in plain] == [{"kind": "autocast", "dtype": "bfloat16"}]


def _ok(name: str, label: str, s: float, low: float, high: float) -> WhatIfResult:
    return WhatIfResult(
        name=name, label=label, status="ok", speedup=s, speedup_low=low, speedup_high=high
    )


def test_the_better_variant_is_the_figure_and_keeps_the_rule_standing() -> None:
    results = [
        _ok("bf16", "autocast bfloat16", 0.32, 0.30, 0.34),
        _ok("bf16", "autocast bfloat16 + channels_last", 1.10, 1.02, 1.20),
    ]
    paired = pair_variants(results)
    assert paired[1].details["figure"] is True and paired[0].details["figure"] is False
    assert "also measured: autocast bfloat16 + channels_last 1.10x" in paired[0].notes[-1]
    assert "this is the figure" in paired[1].notes[-1]
    diagnosis = diagnose(_issue_ctx(busy=0.02))
    assert refute_by_what_ifs(diagnosis, paired).bottleneck == diagnosis.bottleneck


def test_a_named_bottleneck_whose_every_variant_loses_is_not_the_bottleneck() -> None:
    diagnosis = diagnose(_issue_ctx(busy=0.02))
    assert diagnosis.bottleneck == "missing-mixed-precision"
    both_slower = pair_variants(
        [
            _ok("bf16", "autocast bfloat16", 0.32, 0.30, 0.34),
            _ok("bf16", "autocast bfloat16 + channels_last", 0.8, 0.75, 0.85),
        ]
    )
    out = refute_by_what_ifs(diagnosis, both_slower)
    assert out.bottleneck != "missing-mixed-precision"


def test_worker_load_is_children_cpu_over_wall_time() -> None:
    cpu = iter([10.0, 10.3])
    clock = iter([100.0, 115.0])
    load = WorkerLoad(read=lambda: next(cpu), clock=lambda: next(clock))
    load.begin()
    assert load.end() == pytest.approx(0.02)
    assert WorkerLoad(read=lambda: None).end() is None


def test_channels_last_injection_converts_the_model_and_4d_inputs() -> None:
    torch = pytest.importorskip("torch")
    spec: dict[str, Any] = {"kind": "autocast", "dtype": "bfloat16", "channels_last": True}
    assert describe(spec) == "autocast bfloat16 + channels_last"
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU())
    injector = Injector(spec, 4)
    x = torch.randn(2, 3, 8, 8)
    changed = injector.before_forward(model, (x,), {})
    assert changed is not None
    (y,), _ = changed
    assert y.is_contiguous(memory_format=torch.channels_last)
    assert model[0].weight.is_contiguous(memory_format=torch.channels_last)
    out = model(y)
    injector.after_forward(model, out)
    assert injector.applied and any("channels_last" in n for n in injector.notes)
