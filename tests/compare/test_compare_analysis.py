"""compare: matching configurations, per-metric ratio tests with Holm, verdicts, bad input."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence

import numpy as np
import pytest

from accelscope.compare.analysis import Comparison, Row, RunData, Verdict, compare_runs, verdict_for
from accelscope.compare.metrics import (
    METRICS,
    ConfigObservations,
    Observation,
    comparable_kinds,
    config_identity,
    describe_machine,
    observations,
)
from accelscope.errors import BadInputError
from accelscope.hardware.fingerprint import Environment
from accelscope.measurement.stats import (
    BETWEEN_PROCESSES_RULE,
    ProcessRatio,
    RatioBasis,
    RatioEstimate,
    bootstrap_ratio,
    holm_adjust,
)
from accelscope.result import Accuracy, Result, Status
from accelscope.store.sqlite import Document
from accelscope.testing import fake_environment, fake_result, fixed_environment

# --- building runs ------------------------------------------------------------------------------


def _samples(median: float, sigma: float, n: int, seed: int) -> tuple[float, ...]:
    rng = np.random.default_rng(seed)
    return tuple(float(x) for x in median * np.exp(rng.normal(0.0, sigma, n)))


def _result(
    samples: Sequence[float],
    *,
    batch: int = 8,
    digest: str = "zoo:resnet50:v1",
    environment: Environment | None = None,
    peak_bytes: float | None = None,
    accuracy: float | None = None,
) -> Result:
    base = fake_result(environment or fixed_environment(), batch=batch)
    assert base.measurement is not None and base.memory is not None
    assert base.accuracy is not None
    return dataclasses.replace(
        base,
        spec=dataclasses.replace(base.spec, model_digest=digest),
        measurement=dataclasses.replace(base.measurement, samples_s=tuple(samples)),
        memory=(
            base.memory
            if peak_bytes is None
            else dataclasses.replace(base.memory, rss_peak_bytes=int(peak_bytes))
        ),
        accuracy=(
            base.accuracy
            if accuracy is None
            else dataclasses.replace(base.accuracy, metric_value=accuracy)
        ),
    )


def _run(run_id: str, *results: Result, kind: str = "bench", model: str = "resnet50") -> RunData:
    return RunData(
        run_id=run_id,
        kind=kind,
        model=model,
        configs=tuple(observations(kind, results, [])),
    )


def _capacity_run(
    run_id: str, capacity: float, *, fingerprint: str = "fp-1", digest: str = "sha:aaa"
) -> RunData:
    document = Document(
        kind="capacity",
        created_at="2026-11-20T22:00:00+00:00",
        payload={
            "model": "resnet50",
            "label": "eager/fp32/b8/t2",
            "spec": {"model": "resnet50", "model_digest": digest, "batch_size": 8},
            "scenario": "server",
            "sla_p99_s": 0.05,
            "capacity_qps": capacity,
            "environment_fingerprint": fingerprint,
        },
    )
    return RunData(
        run_id=run_id,
        kind="load",
        model="resnet50",
        configs=tuple(observations("load", [], [document])),
    )


def _row(comparison: Comparison, metric: str, label: str | None = None) -> Row:
    found = [
        row
        for row in comparison.rows
        if row.metric == METRICS[metric].name and (label is None or row.label == label)
    ]
    assert len(found) == 1, [r.metric for r in comparison.rows]
    return found[0]


BASE = _samples(0.8, 0.01, 200, seed=1)


def _runs(
    prefix: str, medians: Sequence[float], *, sigma: float = 0.01, seed: int = 0
) -> list[RunData]:
    """One run per median: each run its own process, whose level drifts (``medians``)."""
    return [
        _run(f"{prefix}{i}", _result(_samples(median, sigma, 200, seed=seed + i)))
        for i, median in enumerate(medians)
    ]


# --- metrics: observations and identity ---------------------------------------------------------


def test_observations_of_a_result() -> None:
    result = fake_result(fixed_environment(), batch=8)
    assert result.measurement is not None
    [config] = observations("bench", [result], [])
    assert config.label == "eager/bf16/b8/t2/channels_last=true"
    assert config.model == "resnet50"
    assert config.model_digest == "zoo:resnet50:v1"
    assert config.fingerprint == fixed_environment().fingerprint()
    assert config.machine == "Intel(R) Xeon(R) Platinum 8480+, 2 logical cores, 24 GiB, NVIDIA H200"
    assert config.libraries == (("numpy", "2.4.6"), ("torch", "2.13.0"))
    assert config.key == config_identity(result)
    assert set(config.metrics) == {
        "time_per_item_p50",
        "time_per_item_p99",
        "peak_memory",
        "accuracy",
    }
    # samples are per call; the observations are per item (batch 8)
    per_item = config.metrics["time_per_item_p50"].samples
    assert per_item == tuple(s / 8 for s in result.measurement.samples_s)
    assert config.metrics["peak_memory"].value == 123456789.0  # rss: no CUDA peak
    assert config.metrics["accuracy"].value == 0.97


def test_observations_prefer_the_cuda_peak_and_skip_missing_parts() -> None:
    result = fake_result(fixed_environment())
    assert result.memory is not None
    with_cuda = dataclasses.replace(
        result,
        memory=dataclasses.replace(result.memory, cuda_allocated_peak_bytes=5_000),
        accuracy=Accuracy(metric_name="top1_accuracy", metric_value=None),
    )
    [config] = observations("measure", [with_cuda], [])
    assert config.metrics["peak_memory"].value == 5000.0
    assert "accuracy" not in config.metrics
    bare = dataclasses.replace(result, memory=None, accuracy=None)
    [config] = observations("bench", [bare], [])
    assert set(config.metrics) == {"time_per_item_p50", "time_per_item_p99"}


def test_observations_skip_failed_results_and_keep_the_last_of_a_spec() -> None:
    first = _result([1.0, 1.0])
    last = _result([2.0, 2.0])
    failed = dataclasses.replace(
        fake_result(fixed_environment(), batch=16), status=Status.FAILED, measurement=None
    )
    unmeasured = dataclasses.replace(fake_result(fixed_environment(), batch=4), measurement=None)
    found = observations("bench", [first, failed, last, unmeasured], [])
    assert len(found) == 1
    assert found[0].metrics["time_per_item_p50"].samples == (0.25, 0.25)


def test_config_identity_ignores_model_name_and_digest() -> None:
    result = fake_result(fixed_environment(), batch=8)
    renamed = dataclasses.replace(
        result, spec=dataclasses.replace(result.spec, model="other.onnx", model_digest="sha:x")
    )
    assert config_identity(renamed) == config_identity(result)
    assert renamed.spec.key != result.spec.key
    other_batch = fake_result(fixed_environment(), batch=16)
    assert config_identity(other_batch) != config_identity(result)


def test_observation_statistic() -> None:
    samples = Observation(samples=(1.0, 2.0, 3.0, 4.0, 5.0))
    assert samples.statistic(METRICS["time_per_item_p50"]) == 3.0
    assert samples.statistic(METRICS["time_per_item_p99"]) == pytest.approx(4.96)
    assert Observation(value=7.5).statistic(METRICS["peak_memory"]) == 7.5
    with pytest.raises(ValueError, match="no value for peak memory"):
        Observation().statistic(METRICS["peak_memory"])


def test_metric_registry() -> None:
    kinds = comparable_kinds()
    assert kinds == tuple(sorted(kinds))
    assert {"bench", "llm", "load", "measure"} <= set(kinds)
    assert METRICS["time_per_item_p50"].percentile == 50.0
    assert METRICS["time_per_item_p99"].percentile == 99.0
    assert METRICS["accuracy"].higher_is_better and METRICS["capacity"].higher_is_better
    assert not METRICS["peak_memory"].higher_is_better
    assert METRICS["peak_memory"].percentile is None
    assert METRICS["ttft_p99"].percentile == 99.0 and not METRICS["ttft_p99"].higher_is_better
    assert METRICS["goodput_tokens_per_s"].higher_is_better


def test_capacity_documents() -> None:
    other = Document(kind="roofline", created_at="t", payload={})
    document = Document(
        kind="capacity",
        created_at="t",
        payload={
            "model": "resnet50",
            "label": "eager/fp32/b8/t2",
            "spec": {"model": "resnet50", "model_digest": "sha:abc", "batch_size": 8},
            "scenario": "server",
            "sla_p99_s": 0.025,
            "capacity_qps": 123.5,
            "environment_fingerprint": "fp-1",
        },
    )
    [config] = observations("load", [], [other, document])
    assert config.label == "eager/fp32/b8/t2 at p99 <= 25 ms"
    assert config.model == "resnet50"
    assert config.model_digest == "sha:abc"
    assert config.fingerprint == "fp-1"
    assert dict(config.metrics) == {"capacity": Observation(value=123.5)}
    # the digest is not part of the identity, the SLA and the scenario are
    [same] = _capacity_run("x", 1.0, digest="sha:zzz").configs
    assert same.key == _capacity_run("y", 1.0).configs[0].key


# --- verdict_for --------------------------------------------------------------------------------


def _estimate(ratio: float, low: float, high: float, p: float = 0.001) -> ProcessRatio:
    """Evidence from 3 runs per side (claimable) with the given interval."""
    estimate = RatioEstimate(
        ratio=ratio, low=low, high=high, p_value=p, confidence=0.95, method="m", units="u"
    )
    return ProcessRatio(
        ratio=ratio, basis=RatioBasis.RUNS, baseline_count=3, candidate_count=3, estimate=estimate
    )


def _one_run_each(ratio: float) -> ProcessRatio:
    return ProcessRatio(
        ratio=ratio,
        basis=RatioBasis.RUNS,
        baseline_count=1,
        candidate_count=1,
        estimate=None,
        why="one run per side",
    )


@pytest.mark.parametrize(
    ("metric", "estimate", "p_adjusted", "verdict"),
    [
        ("time_per_item_p50", _estimate(1.2, 1.1, 1.3), 0.001, Verdict.SLOWER),
        ("time_per_item_p50", _estimate(1.2, 1.1, 1.3), 0.2, Verdict.INCONCLUSIVE),
        ("time_per_item_p50", _estimate(0.8, 0.75, 0.85), 0.001, Verdict.FASTER),
        ("time_per_item_p50", _estimate(1.01, 0.99, 1.03), 0.5, Verdict.NO_CHANGE),
        # significant but inside the band: no change, not slower
        ("time_per_item_p50", _estimate(1.03, 1.02, 1.04), 0.001, Verdict.NO_CHANGE),
        ("time_per_item_p50", _estimate(1.0, 0.8, 1.25), 0.9, Verdict.INCONCLUSIVE),
        ("peak_memory", _estimate(1.2, 1.1, 1.3), 0.001, Verdict.WORSE),
        ("peak_memory", _estimate(0.8, 0.75, 0.85), 0.001, Verdict.BETTER),
        ("accuracy", _estimate(0.8, 0.75, 0.85), 0.001, Verdict.WORSE),
        ("accuracy", _estimate(1.2, 1.1, 1.3), 0.001, Verdict.BETTER),
        ("capacity", _estimate(0.99, 0.97, 1.01), 0.3, Verdict.NO_CHANGE),
        ("capacity", _estimate(1.0, 0.0, 1.2), 0.9, Verdict.INCONCLUSIVE),
    ],
)
def test_verdict_for(metric: str, estimate: ProcessRatio, p_adjusted: float, verdict: str) -> None:
    assert verdict_for(METRICS[metric], estimate, p_adjusted, 0.05, 0.95) == verdict


def test_verdict_for_untested_rows() -> None:
    metric = METRICS["peak_memory"]
    assert verdict_for(metric, None, None, 0.05, 0.95) == Verdict.NOT_TESTED
    assert verdict_for(metric, _estimate(2.0, 1.9, 2.1), None, 0.05, 0.95) == Verdict.NOT_TESTED


@pytest.mark.parametrize("ratio", [0.5, 0.73, 1.0, 2.0])
def test_verdict_for_one_run_per_side_cannot_tell_whatever_the_ratio(ratio: float) -> None:
    # no interval holds the drift between processes: not even a tiny p-value makes a claim
    for metric in ("time_per_item_p50", "peak_memory", "accuracy", "capacity"):
        verdict = verdict_for(METRICS[metric], _one_run_each(ratio), 1e-12, 0.05, 0.95)
        assert verdict == Verdict.CANNOT_TELL


def test_verdict_for_band_follows_the_threshold() -> None:
    estimate = _estimate(1.08, 1.07, 1.09)
    metric = METRICS["time_per_item_p50"]
    assert verdict_for(metric, estimate, 0.001, 0.05, 0.95) == Verdict.SLOWER
    assert verdict_for(metric, estimate, 0.001, 0.10, 0.95) == Verdict.NO_CHANGE


# --- compare_runs: one run per side -------------------------------------------------------------


def test_changed_model_file_still_matches() -> None:
    baseline = _run("A", _result(BASE, digest="sha256:1111111111111111aaaa"))
    candidate = _run("B", _result(BASE, digest="sha256:2222222222222222bbbb"))
    comparison = compare_runs([baseline], [candidate])
    assert comparison.unmatched == ()
    assert {row.label for row in comparison.rows} == {"eager/bf16/b8/t2/channels_last=true"}
    assert "the model file changed (digest sha256:11111 -> sha256:22222)" in comparison.notes
    assert comparison.baseline_runs == ("A",) and comparison.candidate_runs == ("B",)
    assert comparison.kind == "bench" and comparison.model == "resnet50"


def test_same_digest_gives_no_model_note() -> None:
    comparison = compare_runs([_run("A", _result(BASE))], [_run("B", _result(BASE))])
    assert not any("model file" in note for note in comparison.notes)


def test_one_run_per_side_cannot_tell_even_when_the_samples_are_tight() -> None:
    # The A/A check that found this: two runs of identical code, one process each, came out
    # "faster, 0.73 (95 % CI 0.72-0.75), p = 0": the samples within each run pin their own
    # medians, not the drift between the two processes. One run per side: cannot tell.
    baseline = _run("A", _result(BASE))
    candidate = _run("B", _result([s * 0.73 for s in BASE]))
    comparison = compare_runs([baseline], [candidate])
    row = _row(comparison, "time_per_item_p50")
    assert row.verdict == Verdict.CANNOT_TELL
    assert row.ratio == pytest.approx(0.73)  # the point figure is still shown
    assert row.estimate is None and row.p_adjusted is None
    assert row.evidence is not None and not row.evidence.claimable
    assert row.evidence.counts_text == "1 vs 1 runs"
    assert "not measured" in row.evidence.why
    assert {r.verdict for r in comparison.rows} == {Verdict.CANNOT_TELL}
    assert comparison.cannot_tell == len(comparison.rows) == 4  # p50, p99, memory, accuracy
    [note] = [n for n in comparison.notes if n.startswith("cannot tell")]
    assert "cannot tell (4 of 4 rows): one run per side" in note
    assert "A1,A2,A3 B1,B2,B3" in note and "accelscope gate" in note
    assert comparison.unit.startswith("runs (one per side")
    assert comparison.rule == BETWEEN_PROCESSES_RULE


def test_one_run_per_side_cannot_tell_a_slowdown_either() -> None:
    comparison = compare_runs([_run("A", _result(BASE))], [_run("B", _result(BASE))])
    assert _row(comparison, "time_per_item_p50").verdict == Verdict.CANNOT_TELL
    slower = compare_runs([_run("A", _result(BASE))], [_run("B", _result([s * 2 for s in BASE]))])
    row = _row(slower, "time_per_item_p50")
    assert row.verdict == Verdict.CANNOT_TELL and row.ratio == pytest.approx(2.0)
    memory = _row(slower, "peak_memory")
    assert memory.baseline == memory.candidate == 123456789.0
    assert memory.ratio == 1.0 and memory.verdict == Verdict.CANNOT_TELL


def test_three_runs_per_side_with_real_drift_widen_the_interval() -> None:
    # Identical code, each run's level drifting by up to ~20 % between processes (as measured
    # on the shared 2-vCPU VMs): the runs' interval holds that drift and claims nothing, where
    # the samples pooled within the runs would have claimed a change.
    baseline = _runs("A", [0.80, 0.92, 0.71], seed=1)
    candidate = _runs("B", [0.66, 0.78, 0.72], seed=11)
    comparison = compare_runs(baseline, candidate)
    row = _row(comparison, "time_per_item_p50")
    assert row.verdict in (Verdict.INCONCLUSIVE, Verdict.NO_CHANGE)
    assert row.estimate is not None and row.estimate.units == "processes (3 vs 3)"
    assert row.estimate.low < 1.0 < row.estimate.high
    pooled = bootstrap_ratio(
        [s for run in baseline for s in run.configs[0].metrics["time_per_item_p50"].samples],
        [s for run in candidate for s in run.configs[0].metrics["time_per_item_p50"].samples],
    )
    assert pooled.separated  # what the old rule (samples as the unit) would have claimed
    # on the log scale the runs' interval is more than ten times as wide as the samples' one
    assert np.log(row.estimate.high / row.estimate.low) > 10 * np.log(pooled.high / pooled.low)


def test_a_true_twofold_slowdown_with_three_runs_per_side_is_still_claimed() -> None:
    drift = [1.00, 1.15, 0.90]  # the same drift between processes on both sides
    baseline = _runs("A", [0.4 * d for d in drift], seed=1)
    candidate = _runs("B", [0.8 * d for d in reversed(drift)], seed=11)
    comparison = compare_runs(baseline, candidate)
    row = _row(comparison, "time_per_item_p50")
    assert row.verdict == Verdict.SLOWER
    assert row.ratio == pytest.approx(2.0, rel=0.02)
    assert row.estimate is not None and 1.05 < row.estimate.low < 2.0 < row.estimate.high
    assert row.p_adjusted is not None and row.p_adjusted < 0.05
    assert comparison.cannot_tell == 0
    assert comparison.unit == "runs (3 vs 3, Welch t on log figures)"
    faster = compare_runs(candidate, baseline)
    assert _row(faster, "time_per_item_p50").verdict == Verdict.FASTER


def test_identical_levels_with_three_runs_per_side_are_no_change() -> None:
    comparison = compare_runs(
        _runs("A", [0.80, 0.81, 0.79], seed=1), _runs("B", [0.80, 0.79, 0.81], seed=11)
    )
    row = _row(comparison, "time_per_item_p50")
    assert row.verdict == Verdict.NO_CHANGE
    assert row.estimate is not None
    assert 1 / 1.05 <= row.estimate.low <= 1.0 <= row.estimate.high <= 1.05


def test_wide_drift_between_runs_is_inconclusive() -> None:
    comparison = compare_runs(
        _runs("A", [0.5, 1.0, 0.7], seed=1), _runs("B", [0.9, 0.6, 0.8], seed=11)
    )
    row = _row(comparison, "time_per_item_p50")
    assert row.verdict == Verdict.INCONCLUSIVE
    assert row.estimate is not None
    assert row.estimate.low < 1 / 1.05 and row.estimate.high > 1.05


def test_a_configuration_in_one_run_of_a_side_cannot_tell() -> None:
    baseline = [
        _run("A0", _result(BASE, batch=8), _result(BASE, batch=16)),
        _run("A1", _result(BASE, batch=8)),
        _run("A2", _result(BASE, batch=8)),
    ]
    candidate = [
        _run("B0", _result(BASE, batch=8), _result(BASE, batch=16)),
        _run("B1", _result(BASE, batch=8)),
        _run("B2", _result(BASE, batch=8)),
    ]
    comparison = compare_runs(baseline, candidate)
    b16 = "eager/bf16/b16/t2/channels_last=true"
    assert _row(comparison, "time_per_item_p50", b16).verdict == Verdict.CANNOT_TELL
    b8 = _row(comparison, "time_per_item_p50", "eager/bf16/b8/t2/channels_last=true")
    assert b8.estimate is not None and b8.verdict == Verdict.NO_CHANGE
    assert "the others cannot tell" in comparison.unit
    assert any("fewer than two runs of a side" in note for note in comparison.notes)


def test_holm_adjusts_across_all_tested_rows() -> None:
    baseline = [
        _run(f"A{i}", _result(_samples(0.8, 0.01, 50, i), batch=8), _result(BASE, batch=16))
        for i in range(3)
    ]
    candidate = [
        _run(
            f"B{i}",
            _result(_samples(0.8 * 1.03, 0.01, 50, 10 + i), batch=8),
            _result([s * (1.2 + 0.01 * i) for s in BASE], batch=16),
        )
        for i in range(3)
    ]
    comparison = compare_runs(baseline, candidate)
    tested = [row for row in comparison.rows if row.estimate is not None]
    assert len(tested) == len(comparison.rows) == 8  # p50, p99, memory, accuracy of two
    raw = [row.estimate.p_value for row in tested if row.estimate is not None]
    adjusted = [row.p_adjusted for row in tested]
    assert adjusted == pytest.approx(holm_adjust(raw))
    for row in tested:
        assert row.estimate is not None and row.p_adjusted is not None
        assert row.p_adjusted >= row.estimate.p_value


def test_cannot_tell_rows_are_left_out_of_holm() -> None:
    comparison = compare_runs([_run("A", _result(BASE))], [_run("B", _result(BASE))])
    assert all(row.p_adjusted is None for row in comparison.rows)


def test_three_runs_per_side_use_welch_and_test_scalars() -> None:
    baseline = [
        _run(f"A{i}", _result(_samples(0.8, 0.01, 50, seed=i), peak_bytes=p, accuracy=acc))
        for i, (p, acc) in enumerate([(1.00e9, 0.90), (1.01e9, 0.91), (0.99e9, 0.905)])
    ]
    candidate = [
        _run(f"B{i}", _result(_samples(0.8, 0.01, 50, seed=10 + i), peak_bytes=p, accuracy=acc))
        for i, (p, acc) in enumerate([(1.30e9, 0.80), (1.31e9, 0.81), (1.29e9, 0.805)])
    ]
    comparison = compare_runs(baseline, candidate)
    assert comparison.unit == "runs (3 vs 3, Welch t on log figures)"
    assert not any("one run per side" in note for note in comparison.notes)
    for row in comparison.rows:
        assert row.estimate is not None
        assert "Welch" in row.estimate.method
        assert row.estimate.units == "processes (3 vs 3)"
    memory = _row(comparison, "peak_memory")
    assert memory.baseline == 1.00e9 and memory.candidate == 1.30e9
    assert memory.verdict == Verdict.WORSE
    accuracy = _row(comparison, "accuracy")
    assert accuracy.baseline == 0.905 and accuracy.candidate == 0.805
    assert accuracy.ratio == pytest.approx(
        (0.80 * 0.81 * 0.805) ** (1 / 3) / (0.9 * 0.91 * 0.905) ** (1 / 3)
    )
    assert accuracy.verdict == Verdict.WORSE
    assert _row(comparison, "time_per_item_p50").verdict == Verdict.NO_CHANGE


def test_lower_capacity_is_worse() -> None:
    baseline = [_capacity_run(f"A{i}", qps) for i, qps in enumerate([100.0, 101.0, 99.0])]
    candidate = [_capacity_run(f"B{i}", qps) for i, qps in enumerate([80.0, 81.0, 79.0])]
    comparison = compare_runs(baseline, candidate)
    assert comparison.kind == "load"
    [row] = comparison.rows
    assert row.metric == "capacity at the p99 SLA"
    assert row.unit == "q/s"
    assert row.label == "eager/fp32/b8/t2 at p99 <= 50 ms"
    assert row.baseline == 100.0 and row.candidate == 80.0
    assert row.verdict == Verdict.WORSE
    # one test only: Holm changes nothing
    assert row.estimate is not None and row.p_adjusted == row.estimate.p_value


def test_one_capacity_run_per_side_cannot_tell() -> None:
    # was "not tested": one value per side has no spread between processes either, and the
    # one rule for such ratios calls that "cannot tell" (with what would tell)
    comparison = compare_runs([_capacity_run("A", 100.0)], [_capacity_run("B", 50.0)])
    [row] = comparison.rows
    assert row.verdict == Verdict.CANNOT_TELL
    assert row.ratio == 0.5


def test_a_zero_capacity_is_not_tested() -> None:
    baseline = [_capacity_run(f"A{i}", qps) for i, qps in enumerate([100.0, 101.0, 99.0])]
    candidate = [_capacity_run(f"B{i}", qps) for i, qps in enumerate([0.0, 81.0, 79.0])]
    [row] = compare_runs(baseline, candidate).rows
    assert row.verdict == Verdict.NOT_TESTED and row.evidence is None


def test_unmatched_configurations_are_listed() -> None:
    baseline = _run("A", _result(BASE, batch=8), _result(BASE, batch=16))
    candidate = _run("B", _result(BASE, batch=8), _result(BASE, batch=4))
    comparison = compare_runs([baseline], [candidate])
    assert comparison.unmatched == (
        "eager/bf16/b16/t2/channels_last=true",
        "eager/bf16/b4/t2/channels_last=true",
    )
    assert {row.label for row in comparison.rows} == {"eager/bf16/b8/t2/channels_last=true"}


def test_library_change_is_noted() -> None:
    environment = fixed_environment()
    newer = dataclasses.replace(environment, libraries=(("numpy", "2.4.6"), ("torch", "2.14.0")))
    assert newer.fingerprint() == environment.fingerprint()
    comparison = compare_runs(
        [_run("A", _result(BASE, environment=environment))],
        [_run("B", _result(BASE, environment=newer))],
    )
    assert "library versions changed: torch 2.13.0 -> 2.14.0" in comparison.notes


def test_comparison_to_dict_is_json_ready() -> None:
    comparison = compare_runs([_run("A", _result(BASE))], [_run("B", _result(BASE))])
    data = comparison.to_dict()
    json.dumps(data)
    assert data["statistical_unit"] == comparison.unit
    assert data["correction"] == "Holm across all tested rows"
    assert data["threshold"] == 0.05 and data["confidence"] == 0.95
    assert len(data["rows"]) == len(comparison.rows)
    assert data["rule"] == BETWEEN_PROCESSES_RULE
    assert "A1,A2,A3 B1,B2,B3" in data["what_would_tell"]
    row = data["rows"][0]
    assert row["verdict"] == "cannot tell" and row["estimate"] is None
    assert row["between_processes"] == {
        "basis": "runs",
        "baseline_runs": 1,
        "candidate_runs": 1,
        "claimable": False,
        "why": comparison.rows[0].evidence.why if comparison.rows[0].evidence else None,
    }
    three = compare_runs(_runs("A", [0.8, 0.81, 0.79]), _runs("B", [0.8, 0.79, 0.81], seed=9))
    data = three.to_dict()
    json.dumps(data)
    assert data["what_would_tell"] is None
    assert data["rows"][0]["estimate"]["method"].startswith("Welch")
    assert data["rows"][0]["between_processes"]["claimable"] is True


# --- compare_runs: bad input --------------------------------------------------------------------


def _one_line(error: pytest.ExceptionInfo[BadInputError]) -> str:
    message = str(error.value)
    assert message and "\n" not in message
    return message


def test_mixed_kinds_are_refused() -> None:
    with pytest.raises(BadInputError) as error:
        compare_runs([_run("A", _result(BASE))], [_run("B", _result(BASE), kind="measure")])
    assert _one_line(error) == "cannot compare a bench run with a measure run (A vs B)"
    with pytest.raises(BadInputError) as error:
        compare_runs(
            [_run("A", _result(BASE)), _run("A2", _result(BASE), kind="measure")],
            [_run("B", _result(BASE))],
        )
    assert "the baseline runs are of different kinds (bench, measure)" in _one_line(error)


def test_unsupported_kind_is_refused() -> None:
    doctor = RunData(run_id="D", kind="doctor", model="resnet50", configs=())
    with pytest.raises(BadInputError) as error:
        compare_runs([_run("A", _result(BASE))], [doctor])
    assert _one_line(error) == (
        f"run D is a doctor run; compare works on {', '.join(comparable_kinds())} runs"
    )


def test_empty_side_is_refused() -> None:
    with pytest.raises(BadInputError, match="no baseline run given"):
        compare_runs([], [_run("B", _result(BASE))])


def test_different_models_are_refused() -> None:
    with pytest.raises(BadInputError) as error:
        compare_runs([_run("A", _result(BASE))], [_run("B", _result(BASE), model="mobilenet_v3")])
    message = _one_line(error)
    assert "different models (mobilenet_v3, resnet50)" in message


def test_nothing_in_common_is_refused() -> None:
    with pytest.raises(BadInputError) as error:
        compare_runs([_run("A", _result(BASE, batch=8))], [_run("B", _result(BASE, batch=16))])
    assert _one_line(error) == (
        "the runs have no measured configuration in common "
        "(baseline: eager/bf16/b8/t2/channels_last=true; "
        "candidate: eager/bf16/b16/t2/channels_last=true)"
    )


def test_different_machines_are_refused_unless_allowed() -> None:
    zen3 = fake_environment("zen3")
    baseline = _run("A", _result(BASE))
    candidate = _run("B", _result(BASE, environment=zen3))
    with pytest.raises(BadInputError) as error:
        compare_runs([baseline], [candidate])
    message = _one_line(error)
    assert "different machines" in message
    assert fixed_environment().fingerprint() in message and zen3.fingerprint() in message
    assert "--allow-env-change" in message

    comparison = compare_runs([baseline], [candidate], allow_env_change=True)
    xeon = "Intel(R) Xeon(R) Platinum 8480+, 2 logical cores, 24 GiB, NVIDIA H200"
    epyc = "AMD EPYC 7R13 Processor, 2 logical cores, 24 GiB"
    assert describe_machine(_result(BASE, environment=zen3)) == epyc
    assert f"different machines, compared on request: {xeon} vs {epyc}" in comparison.notes
    assert comparison.rows


@pytest.mark.parametrize("threshold", [0.0, 1.0, -0.05, 1.5])
def test_threshold_out_of_range(threshold: float) -> None:
    with pytest.raises(BadInputError) as error:
        compare_runs([_run("A", _result(BASE))], [_run("B", _result(BASE))], threshold=threshold)
    assert _one_line(error).startswith("the threshold must be between 0 and 100 %")


def test_direct_config_observations() -> None:
    def config(value: float, fingerprint: str = "fp") -> ConfigObservations:
        return ConfigObservations(
            key="k",
            label="cfg",
            model="m",
            model_digest="",
            fingerprint=fingerprint,
            machine="box",
            libraries=(),
            metrics={"peak_memory": Observation(value=value)},
        )

    def run(run_id: str, value: float) -> RunData:
        return RunData(run_id=run_id, kind="bench", model="m", configs=(config(value),))

    comparison = compare_runs(
        [run("A1", 100.0), run("A2", 100.2)], [run("B1", 100.1), run("B2", 100.3)]
    )
    [row] = comparison.rows
    assert row.metric == "peak memory"
    assert row.baseline == pytest.approx(100.1) and row.candidate == pytest.approx(100.2)
    assert row.verdict == Verdict.NO_CHANGE
    assert comparison.unit == "runs (2 vs 2, Welch t on log figures)"
    assert comparison.notes == ()


# --- llm figures whose definition changed ---------------------------------------------------


def _llm_config(ttft: float, definitions: dict[str, str] | None, seed: int) -> ConfigObservations:
    return ConfigObservations(
        key="rate 4",
        label="rate 4",
        model="",
        model_digest="",
        fingerprint="",
        machine="",
        libraries=(),
        metrics={
            "ttft_p50": Observation(samples=_samples(ttft, 0.05, 60, seed)),
            "tpot_p50": Observation(samples=_samples(0.01, 0.05, 60, seed + 1)),
        },
        definitions=definitions,
    )


def _llm_runs(
    before: dict[str, str] | None, after: dict[str, str] | None
) -> tuple[list[RunData], list[RunData]]:
    sides = []
    for ttft, definitions, seed in ((0.1, before, 1), (0.1, after, 11)):
        sides.append(
            [
                RunData(
                    run_id=f"r{seed + i}",
                    kind="llm",
                    model="m",
                    configs=(_llm_config(ttft, definitions, seed + i),),
                )
                for i in range(2)
            ]
        )
    return sides[0], sides[1]


def test_a_figure_whose_definition_changed_is_noted_and_not_tested() -> None:
    old = {"ttft_s": "first chunk - scheduled arrival", "tpot_s": "(last - first) / (N - 1)"}
    new = {**old, "tpot_s": "(last - first) / (N - k1)"}
    comparison = compare_runs(*_llm_runs(old, new))
    verdicts = {row.metric: row.verdict for row in comparison.rows}
    assert verdicts["TPOT p50"] == Verdict.NOT_TESTED  # shown, never a verdict
    assert verdicts["TTFT p50"] != Verdict.NOT_TESTED
    [note] = [n for n in comparison.notes if "definition changed" in n]
    assert note.startswith("TPOT p50, TPOT p99: not tested")
    assert "(N - 1)" in note and "(N - k1)" in note


def test_the_same_definitions_compare_every_figure_and_an_older_run_is_noted() -> None:
    same = {"ttft_s": "a", "tpot_s": "b"}
    comparison = compare_runs(*_llm_runs(same, dict(same)))
    assert {row.metric for row in comparison.rows} == {"TTFT p50", "TPOT p50"}
    assert not [n for n in comparison.notes if "definition" in n]
    older = compare_runs(*_llm_runs(None, same))
    assert {row.metric for row in older.rows} == {"TTFT p50", "TPOT p50"}
    assert any(n.startswith("the baseline stored no definitions") for n in older.notes)
