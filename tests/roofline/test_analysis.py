"""Classification, aggregation, model-level figures, profiler-event matching, documents."""

from __future__ import annotations

import json

import pytest

from accelscope.documents import RooflineProfile
from accelscope.errors import BadInputError
from accelscope.roofline.analysis import build_profile, classify, peak_for
from accelscope.roofline.ceilings import Ceilings
from accelscope.roofline.counting import OpRecord
from accelscope.roofline.timing import ProfiledEvent, match_event_times, per_call_times
from roofline_helpers import BANDWIDTH, PEAK, make_ceilings


def test_classify_by_ridge_point_and_overhead_rule() -> None:
    # AI 1000 FLOP/B (right of the ridge at 100): 1e9 FLOPs, 1e6 B, floor 1 ms
    assert classify(1e9, 1e6, 2e-3, 1, PEAK, BANDWIDTH) == "compute-bound"
    # AI 1 FLOP/B: floor = bytes/bw = 1e6/1e10 = 100 us; measured 200 us
    assert classify(1e6, 1e6, 2e-4, 1, PEAK, BANDWIDTH) == "memory-bound"
    # floor 1 us (1e4 B), measured 20 us per call: 5 % of the floor and < 50 us -> overhead
    assert classify(1e4, 1e4, 20e-6, 1, PEAK, BANDWIDTH) == "overhead-bound"
    # same 5 % efficiency but 2 ms per call: a slow kernel, classed by the ridge
    assert classify(1e6, 1e6, 2e-3, 1, PEAK, BANDWIDTH) == "memory-bound"
    assert classify(1e6, 1e6, 0.0, 1, PEAK, BANDWIDTH) == "unmeasured"


def test_peak_for_uses_threads_and_fp32_stand_in() -> None:
    ceilings = make_ceilings()
    assert peak_for(ceilings, "bf16") == (4 * PEAK, "bf16")
    assert peak_for(ceilings, "fp32", threads=1) == (PEAK / 2, "fp32")
    assert peak_for(ceilings, "int64") == (PEAK, "fp32")
    assert peak_for(ceilings, "int8") == (PEAK, "fp32")  # no int8 peak measured


def _records() -> list[OpRecord]:
    return [
        OpRecord(
            name="aten::linear",
            category="matmul",
            dtype="fp32",
            flops=2e9,
            read_bytes=1_000_000,
            written_bytes=1_000_000,
        ),
        OpRecord(
            name="aten::view",
            category="view",
            dtype="fp32",
            flops=0.0,
            read_bytes=0,
            written_bytes=0,
        ),
        OpRecord(
            name="aten::relu",
            category="elementwise",
            dtype="fp32",
            flops=1e6,
            read_bytes=4_000_000,
            written_bytes=4_000_000,
        ),
        OpRecord(
            name="aten::linear",
            category="matmul",
            dtype="fp32",
            flops=2e9,
            read_bytes=1_000_000,
            written_bytes=1_000_000,
        ),
        OpRecord(
            name="aten::fft_fft",
            category="uncounted",
            dtype="fp32",
            flops=None,
            read_bytes=1_000,
            written_bytes=1_000,
        ),
    ]


def test_profile_aggregates_and_sums() -> None:
    times = [4e-3, 0.0, 1e-3, 4e-3, None]
    profile = build_profile(
        model="m",
        backend="eager",
        precision="fp32",
        batch_size=2,
        device="cpu",
        threads=2,
        ceilings=make_ceilings(),
        records=_records(),
        times_s=times,
        measured_time_s=0.012,
    )
    names = [(op.name, op.calls) for op in profile.operators]
    assert names == [("aten::linear", 2), ("aten::relu", 1), ("aten::fft_fft", 1)]
    linear = profile.operators[0]
    # 4e9 FLOPs / 1e12 = 4 ms compute floor; 4e6 B / 1e10 = 0.4 ms memory floor
    assert linear.floor_time_s == pytest.approx(4e-3)
    assert linear.efficiency == pytest.approx(0.5)
    assert linear.bound == "compute-bound"
    assert linear.achieved_flops_per_s == pytest.approx(4e9 / 8e-3)
    relu = profile.operators[1]
    assert relu.floor_time_s == pytest.approx(8e6 / BANDWIDTH)  # 0.8 ms
    assert relu.bound == "memory-bound"
    assert profile.total_flops == pytest.approx(4e9 + 1e6)
    assert profile.floor_time_s == pytest.approx(4e-3 + 8e-4 + 2e3 / BANDWIDTH)
    assert profile.gap == pytest.approx(0.012 / profile.floor_time_s)
    assert profile.mfu == pytest.approx((4e9 + 1e6) / 0.012 / PEAK)
    assert profile.uncounted == ["aten::fft_fft"]
    assert profile.top_lost(1)[0].name == "aten::linear"  # 8 ms measured vs 4 ms floor
    assert any("1 call(s) had no profiler event" in n for n in profile.notes)
    assert profile.above_ceiling == []


def test_operator_above_its_roof_is_flagged() -> None:
    records = [
        OpRecord(
            name="aten::conv2d",
            category="conv",
            dtype="fp32",
            flops=2e9,
            read_bytes=10,
            written_bytes=10,
        )
    ]
    profile = build_profile(
        model="m",
        backend="eager",
        precision="fp32",
        batch_size=1,
        device="cpu",
        threads=2,
        ceilings=make_ceilings(),
        records=records,
        times_s=[1e-3],
        measured_time_s=1e-3,
    )
    # 2e9 FLOPs in 1 ms = 2e12 FLOP/s > the 1e12 ceiling
    assert [op.name for op in profile.above_ceiling] == ["aten::conv2d"]


def test_roofline_document_has_the_contract_keys_and_round_trips() -> None:
    profile = build_profile(
        model="m",
        backend="eager",
        precision="fp32",
        batch_size=2,
        device="cpu",
        threads=2,
        ceilings=make_ceilings(),
        records=_records(),
        times_s=[4e-3, 0.0, 1e-3, 4e-3, 1e-5],
        measured_time_s=0.012,
    )
    data = json.loads(json.dumps(profile.document().model_dump(mode="json"), allow_nan=False))
    for key in (
        "model",
        "backend",
        "precision",
        "batch_size",
        "device",
        "environment_fingerprint",
        "measured_time_s",
        "floor_time_s",
        "total_flops",
        "total_bytes",
        "ceilings",
        "operators",
    ):
        assert key in data, key
    for key in ("name", "dtype", "calls", "flops", "bytes", "measured_time_s"):
        assert key in data["operators"][0]
    for key in (
        "device",
        "device_name",
        "environment_fingerprint",
        "measured_at",
        "matmul_flops_per_s",
        "bandwidth_bytes_per_s",
        "bandwidth_detail_bytes_per_s",
        "theoretical",
    ):
        assert key in data["ceilings"], key
    assert set(data["ceilings"]["theoretical"]) >= {
        "flops_per_s",
        "bandwidth_bytes_per_s",
        "derivation",
    }
    again = type(profile).from_document(RooflineProfile.from_payload(data))
    assert again.floor_time_s == pytest.approx(profile.floor_time_s)
    assert again.ceilings == profile.ceilings


def test_ceilings_from_payload_names_the_bad_key() -> None:
    data = make_ceilings().model_dump(mode="json")
    del data["bandwidth_bytes_per_s"]
    with pytest.raises(BadInputError, match="bandwidth_bytes_per_s"):
        Ceilings.from_payload(data)
    with pytest.raises(BadInputError, match="matmul_flops_per_s"):
        Ceilings.from_payload({**data, "bandwidth_bytes_per_s": 1.0, "matmul_flops_per_s": [1]})
    with pytest.raises(BadInputError, match="JSON object"):
        Ceilings.from_payload([])


def _event(name: str, start_us: float, end_us: float, nested: bool = False) -> ProfiledEvent:
    """An event given in µs, as torch.profiler reports them (ProfiledEvent holds seconds)."""
    us = 1e-6
    return ProfiledEvent(
        name=name,
        start_s=start_us * us,
        end_s=end_us * us,
        device_time_s=(end_us - start_us) / 2 * us,
        nested=nested,
    )


def test_events_match_calls_in_order_skipping_nested_and_missing() -> None:
    # dispatch order: autocast's cast runs inside conv2d's profiler scope (no top-level event)
    names = ["aten::to", "aten::conv2d", "aten::relu_", "aten::to", "aten::add"]
    events = [
        _event("aten::conv2d", 0, 100),
        _event("aten::to", 5, 20, nested=True),
        _event("aten::_convolution", 20, 90, nested=True),
        _event("aten::relu_", 110, 120),
        _event("aten::to", 130, 140),
        _event("aten::add", 150, 170),
        _event("aten::empty", 171, 172),
    ]
    times = match_event_times(names, events)
    assert times[0] is None and times[1] == pytest.approx(100e-6)
    assert times[2] == pytest.approx(10e-6)
    assert times[3] == pytest.approx(10e-6) and times[4] == pytest.approx(20e-6)
    on_device = match_event_times(names, events, device=True)
    assert on_device[1] == pytest.approx(50e-6)


def test_per_call_times_take_the_median_over_repeats() -> None:
    names = ["a", "b"]
    times = [1.0, None, 3.0, 2.0, 2.0, 4.0]  # three repeats of (a, b)
    assert per_call_times(names, times, 3) == [2.0, 3.0]
