"""What-if parsing, planning (skips with reasons), speedup bounds and the recommendation."""

from __future__ import annotations

import pytest
from test_doctor_rules import _ctx, _facts, _probe, _step

from accelscope.doctor.breakdown import Rate
from accelscope.doctor.whatif import (
    WhatIfResult,
    parse_what_ifs,
    plan_what_ifs,
    recommend,
    speedup,
)
from accelscope.errors import BadInputError


def test_parse() -> None:
    assert parse_what_ifs("AUTO") == ("auto", ())
    assert parse_what_ifs("workers=4, bf16") == ("list", (("workers", 4), ("bf16", None)))
    for bad in ("bogus", "bf16=2", "workers=0", "workers=x", ","):
        with pytest.raises(BadInputError):
            parse_what_ifs(bad)


def test_plan_skips_what_cannot_apply() -> None:
    ctx = _ctx([_step(0.02, input=0.015)] * 3, _probe(10, 0.001, 0.0), facts=_facts(workers=0))
    planned = {p.name: p for p in plan_what_ifs("all", (), ctx, ())}
    assert planned["workers"].spec == {"kind": "dataloader", "set": {"num_workers": 2}}
    assert "CUDA" in planned["pin_memory"].reason and planned["pin_memory"].spec is None
    assert "workers" in planned["prefetch"].reason
    assert planned["fp16"].spec is None  # no fp16 fast path on this fake CPU
    assert planned["bf16"].spec == {"kind": "autocast", "dtype": "bfloat16"}
    assert planned["batch"].spec == {"kind": "batch", "factor": 4}
    auto = plan_what_ifs("auto", (), ctx, ("workers", "cache", "workers"))
    assert [p.name for p in auto] == ["workers", "cache"]


def test_speedup_bounds_and_recommendation() -> None:
    ratio, low, high = speedup(Rate(100, 90, 110), Rate(200, 190, 220))
    assert ratio == pytest.approx(2.0) and low == pytest.approx(190 / 110)
    assert high == pytest.approx(220 / 90)

    def ok(name: str, s: float, low: float, caveat: str = "") -> WhatIfResult:
        return WhatIfResult(
            name=name,
            label=name,
            status="ok",
            speedup=s,
            speedup_low=low,
            speedup_high=s * 1.1,
            caveat=caveat,
        )

    best, text = recommend(
        [
            ok("workers", 1.9, 1.7),
            ok("cache", 8.0, 7.0, "changes results: freezes augmentation"),
            ok("prefetch", 1.05, 0.9),
        ]
    )
    assert best == "workers" and "1.90x" in text
    assert recommend([ok("prefetch", 1.05, 0.9)])[0] is None
