"""doctor on torch.profiler traces recorded by others on real GPUs (an A100, a V100, an MI250, a
two-rank job; HTA's test data, MIT: tests/data/public-traces/README.md): windows that hold
CUDA context creation or a compile are not diagnosed and never named a steady-state bottleneck;
steady windows keep the verdicts their events support; every one gives one verdict by
``--trace`` and by the live path.

Covers: accelscope.doctor.trace_diagnosis, accelscope.doctor.trace_quality,
accelscope.doctor.kineto, accelscope.doctor.verdict."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest
from test_causes import live_context

from accelscope.doctor.kineto import read_live_trace
from accelscope.doctor.profile import DeviceTraceRecord
from accelscope.doctor.trace_diagnosis import RankDiagnosis, diagnose_ranks
from accelscope.doctor.verdict import diagnose

PUBLIC = Path(__file__).resolve().parents[1] / "data" / "public-traces"


@functools.cache
def _rank(name: str) -> RankDiagnosis:
    """The trace's diagnosis, read once per test process (two of them are 1.2 MB)."""
    (rank,) = diagnose_ranks(PUBLIC / name).ranks
    return rank


@pytest.mark.parametrize(
    ("name", "seconds"),
    [
        ("critical_path_alexnet_benchmark_result_2869224_1695835535_trace.json.gz", 29.9),
        ("critical_path_simple_add_benchmark_result_493459_1694039959_trace.json.gz", 24.6),
    ],
)
def test_cuda_context_creation_in_the_window_is_named_never_a_bottleneck(
    name: str, seconds: float
) -> None:
    rank = _rank(name)
    v = rank.verdict
    assert v.bottleneck == "not_diagnosed" and v.reported == ()
    assert f"CUDA context creation: {seconds} s" in v.headline
    assert {f.kind for f in rank.quality.flags} >= {"one_off", "few_steps"}
    assert "torch.profiler.schedule" in v.advice  # how to profile steady steps


def test_a_compile_no_event_covers_is_not_called_launch_bound() -> None:
    rank = _rank("triton_example_triton_example.json.gz")
    v = rank.verdict
    assert v.bottleneck == "not_diagnosed" and v.reported == ()
    assert "13.3 s" in v.headline and "unexplained_host" in {f.kind for f in rank.quality.flags}


def test_a_steady_v100_training_window_is_device_bound_in_fp32() -> None:
    rank = _rank("ns_resolution_trace_rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz")
    v = rank.verdict
    assert rank.timeline.trace.device_name == "Tesla V100-SXM2-32GB"
    assert rank.quality.flags == () and len(rank.quality.steady) == 5
    assert v.bottleneck == "compute" and v.matrix_precision == "fp32"
    assert v.kernel_share >= 0.8 and "bf16" in v.advice


def test_readbacks_of_a_distributed_embedding_job_are_named() -> None:
    v = _rank("negative_queue_length_values_check_rank0.json.gz").verdict
    assert v.bottleneck == "sync" and dict(v.ranked)["sync"] == pytest.approx(0.44, abs=0.01)
    assert dict(v.ranked)["communication"] == pytest.approx(0.15, abs=0.01)


def test_two_sampled_steps_of_a_two_rank_job_are_mixed_and_say_why() -> None:
    rank = _rank("trace_filter_sampled_rank-0.json.gz")
    assert rank.verdict.bottleneck == "mixed"
    assert [c for c, _ in rank.verdict.reported] == ["launch"]
    assert "few_steps" in {f.kind for f in rank.quality.flags}


def test_the_mi250_toy_loop_names_nothing_from_its_outlier_first_step() -> None:
    rank = _rank("amd_trace_mi250_minitoy_train_ROCm6_2_kineto.json.gz")
    kinds = {f.kind for f in rank.quality.flags}
    assert {"outlier_step", "few_steps"} <= kinds
    assert rank.verdict.bottleneck == "mixed" and rank.verdict.reported == ()


@pytest.mark.parametrize("path", sorted(PUBLIC.glob("*.json.gz")), ids=lambda p: p.name[:24])
def test_each_public_trace_gives_one_verdict_live_and_by_trace(path: Path) -> None:
    rank = _rank(path.name)
    raw = read_live_trace({"status": "recorded", "path": str(path), "steps": 3})
    live = diagnose(live_context(DeviceTraceRecord.from_dict(json.loads(json.dumps(raw)))))
    assert live.timeline == rank.verdict
