"""plan/projection/llm_serving.py and ``plan llm``: the serving floor's invariants and
monotonicity, its all-reduce, the three MLPerf LLM benchmarks it is calibrated on, the
calibration's leave-one-out (each system projected from the others: the 80 % intervals held at
least 75 % of the 41 Server rows when measured, 85 %, with a median |error| of 7.7 %), the
ranking, and the command end to end with its one-line refusals.

Covers: accelscope.plan.projection.llm_serving.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import statistics
from pathlib import Path
from typing import Any

import pytest

from accelscope.plan.accelerators import AcceleratorSpec, load_accelerators
from accelscope.plan.catalog import load_catalog
from accelscope.plan.llm_memory import load_model_config, shape_from_config
from accelscope.plan.projection.llm_serving import (
    ACTIVATION_BYTES,
    ALLREDUCES_PER_LAYER,
    MLPERF_GROUP,
    MLPERF_SLO,
    OperatingPoint,
    ServedModel,
    ServingRun,
    ServingSlo,
    ServingWorkload,
    StepOverhead,
    TpotPoint,
    best_point,
    calibrate_serving,
    fit_step_overhead,
    leave_one_out,
    llama2_70b_shape,
    mlperf_benchmarks,
    operating_point,
    project_serving,
    served_model,
    serving_plan,
    shipped_serving_calibration,
    tightened_serving,
    tpot_floor,
    widened,
)
from accelscope.plan.projection.published import load_published
from accelscope.plan.projection.tighten import RUN_TO_RUN_LOG_SD
from accelscope.plan.projection.validation import COVERAGE, summarise
from accelscope.testing import CliRunner, assert_one_line_error

LLAMA_70B_CONFIG = {
    "model_type": "llama",
    "hidden_size": 8192,
    "num_hidden_layers": 80,
    "num_attention_heads": 64,
    "num_key_value_heads": 8,
    "intermediate_size": 28672,
    "vocab_size": 32000,
    "tie_word_embeddings": False,
    "hidden_act": "silu",
}
H100 = "NVIDIA H100 SXM 80GB"
WORKLOAD = ServingWorkload(1024, 256)


@pytest.fixture(scope="module")
def bf16_70b() -> ServedModel:
    return served_model(llama2_70b_shape(), "bf16", name="llama2-70b")


def test_values_are_checked_where_they_are_built(bf16_70b: ServedModel) -> None:
    with pytest.raises(ValueError, match="must be >= 1"):
        ServingWorkload(0, 10)
    with pytest.raises(ValueError, match="positive"):
        ServingSlo(0.0, 0.1)
    with pytest.raises(ValueError, match="active_params"):
        dataclasses.replace(bf16_70b, active_params=bf16_70b.params * 2)
    with pytest.raises(ValueError, match="unknown"):
        dataclasses.replace(bf16_70b, dtype="fp6")
    spec = load_accelerators().get(H100)
    point = operating_point(bf16_70b, spec, WORKLOAD, MLPERF_SLO, 4)
    assert point is not None
    with pytest.raises(ValueError, match="degree"):
        dataclasses.replace(point, tp=3)
    with pytest.raises(ValueError, match="concurrency"):
        dataclasses.replace(point, concurrency=point.max_concurrency_memory + 1)
    with pytest.raises(ValueError, match="efficiency"):
        operating_point(bf16_70b, spec, WORKLOAD, MLPERF_SLO, 4, eta=0.0)


def test_the_llama_70b_shape_and_its_kv_cache(bf16_70b: ServedModel) -> None:
    assert 68e9 < bf16_70b.params < 70e9  # Llama-2-70B: 69.0 B parameters
    assert bf16_70b.kv_bytes_per_token == 2 * 80 * 8 * 128 * 2  # K and V, 80 layers, GQA 8
    assert bf16_70b.active_params < bf16_70b.params  # the embedding lookup multiplies nothing


def test_a_70b_model_in_bf16_needs_two_80_gb_gpus(bf16_70b: ServedModel) -> None:
    spec = load_accelerators().get(H100)
    assert operating_point(bf16_70b, spec, WORKLOAD, MLPERF_SLO, 1) is None
    point = best_point(bf16_70b, spec, WORKLOAD, MLPERF_SLO)
    assert point is not None and point.tp >= 2
    assert point.tpot_s <= MLPERF_SLO.tpot_s and point.ttft_s <= MLPERF_SLO.ttft_s


def test_more_bandwidth_gives_more_tokens_per_second(bf16_70b: ServedModel) -> None:
    spec = load_accelerators().get(H100)
    faster = spec.model_copy(
        update={"memory_bandwidth_bytes_per_s": spec.memory_bandwidth_bytes_per_s * 2}
    )
    slow, fast = (best_point(bf16_70b, s, WORKLOAD, MLPERF_SLO) for s in (spec, faster))
    assert slow is not None and fast is not None
    assert fast.tokens_per_s_per_device > slow.tokens_per_s_per_device


def test_a_tighter_tpot_bound_allows_less_concurrency(bf16_70b: ServedModel) -> None:
    spec = load_accelerators().get(H100)
    points: list[OperatingPoint] = []
    for tpot in (0.2, 0.1, 0.05, 0.03):
        point = operating_point(bf16_70b, spec, WORKLOAD, ServingSlo(10.0, tpot), 8)
        assert point is not None
        points.append(point)
    concurrency = [p.concurrency for p in points]
    assert concurrency == sorted(concurrency, reverse=True) and concurrency[0] > concurrency[-1]
    assert all(p.tpot_s <= bound for p, bound in zip(points, (0.2, 0.1, 0.05, 0.03), strict=True))


def test_the_leave_one_out_over_mlperf_systems_holds_its_coverage() -> None:
    """Measured 2026-11-29: 41 rows of the three benchmarks (29 Llama-2-70B, 9 Mixtral, 3
    Llama-3.1-405B), median |error| 7.7 %, 80 % coverage 85 %, median high/low 1.45. The
    floor: coverage at least 75 %, median |error| at most 15 %, median width below 2."""
    calibration = shipped_serving_calibration()
    assert len(calibration.rows) >= 35 and not calibration.left_out
    assert len({r.result.family for r in calibration.rows}) >= 8
    (total,) = summarise(leave_one_out(calibration))
    assert total.count == len(calibration.rows)
    assert total.coverage >= 0.75, total
    assert total.median_abs_error <= 0.15, total
    assert total.median_width < 2.0, total


def test_the_three_mlperf_llm_benchmarks_are_read_with_their_sources() -> None:
    """Each benchmark's model from its config values, its Server bounds and its dataset's mean
    prompt length (computed from per-sample counts, cited by commit and path); every one has
    rows in the shipped calibration, each row at its own benchmark's workload."""
    by = {b.benchmark: b for b in mlperf_benchmarks()}
    assert set(by) == {"llama2-70b", "mixtral-8x7b", "llama3.1-405b"}
    mixtral, big = by["mixtral-8x7b"].model, by["llama3.1-405b"].model
    assert mixtral.moe and 46e9 < mixtral.params < 47e9 and 12e9 < mixtral.active_params < 13e9
    assert not big.moe and 405e9 < big.params < 406e9
    assert by["llama3.1-405b"].slo == ServingSlo(6.0, 0.175)
    assert by["llama2-70b"].slo == by["mixtral-8x7b"].slo == MLPERF_SLO
    for b in by.values():
        assert b.mean_input_tokens < b.max_input_tokens
        assert "mlperf.conf" in b.slo_source and ".csv" in b.input_source
        assert any(len(w) == 40 and all(c in "0123456789abcdef" for c in w)
                   for w in b.input_source.replace("@", " ").split())  # fmt: skip
    assert by["llama2-70b"].matches("llama2-70b-99.9")
    assert by["llama3.1-405b"].matches("llama3_1-405b")  # v5.0's spelling
    assert by["llama3.1-405b"].matches("llama3.1-405b")  # v5.1's
    for other in ("llama2-70b-interactive-99", "llama3.1-405b-interactive", "llama2-7b", ""):
        assert not any(b.matches(other) for b in by.values()), other
    calibration = shipped_serving_calibration()
    for row in calibration.rows:
        assert row.workload == calibration.workloads[row.benchmark.group]
    assert {r.benchmark.benchmark for r in calibration.rows} == set(by)
    assert calibration.workloads[MLPERF_GROUP].input_tokens == by["llama2-70b"].mean_input_tokens
    assert llama2_70b_shape() == by["llama2-70b"].shape


def test_a_moe_reads_the_mixtral_level_and_a_long_prompt_the_405b_one(
    bf16_70b: ServedModel,
) -> None:
    calibration = shipped_serving_calibration()
    mixtral = next(b for b in mlperf_benchmarks() if b.benchmark == "mixtral-8x7b").model
    assert calibration.level_for(mixtral, WORKLOAD).benchmark == "mixtral-8x7b"
    assert calibration.level_for(bf16_70b, WORKLOAD).benchmark == "llama2-70b"
    long = ServingWorkload(8000, 500)
    assert calibration.level_for(bf16_70b, long).benchmark == "llama3.1-405b"
    projection = project_serving(
        bf16_70b, load_accelerators().get(H100), long, ServingSlo(6.0, 0.175)
    )
    assert projection.basis.endswith("at the llama3.1-405b rows' level")


def test_the_levels_fall_back_and_a_benchmark_without_samples_is_left_out() -> None:
    """Where no MoE benchmark has rows a MoE reads the nearest dense level (and the basis
    says which); a benchmark whose rows give no samples/s has no output length: its rows are
    left out, each with why, and the others still calibrate."""
    table, accelerators = load_published(), load_accelerators()
    mixtral = next(b for b in mlperf_benchmarks() if b.benchmark == "mixtral-8x7b")
    stripped = dataclasses.replace(
        table,
        results=tuple(
            r.model_copy(update={"samples_value": None}) if mixtral.matches(r.benchmark) else r
            for r in table.results
        ),
    )
    calibration = calibrate_serving(stripped, accelerators)
    assert {r.benchmark.benchmark for r in calibration.rows} == {"llama2-70b", "llama3.1-405b"}
    dropped = [why for r, why in calibration.left_out if mixtral.matches(r.benchmark)]
    assert dropped and all(
        "no published mixtral-8x7b row gives its samples/s" in w for w in dropped
    )
    assert calibration.level_for(mixtral.model, WORKLOAD).benchmark == "llama2-70b"
    projection = project_serving(
        mixtral.model, accelerators.get(H100), WORKLOAD, MLPERF_SLO, calibration
    )
    assert "at the llama2-70b rows' level" in projection.basis


def test_the_allreduce_is_priced_by_degree_and_link(bf16_70b: ServedModel) -> None:
    """Two all-reduces a layer of 16-bit activations, a ring's 2 (TP-1)/TP over the link: none
    at degree 1 or without a figure, and what it adds is exactly that, at each degree."""
    assert bf16_70b.allreduce_bytes_per_token == 80 * ALLREDUCES_PER_LAYER * 8192 * ACTIVATION_BYTES
    h100 = load_accelerators().get(H100)
    unlinked = h100.model_copy(update={"interconnect_bytes_per_s": None})
    link = h100.interconnect_bytes_per_s
    assert link is not None
    for tp in (1, 2, 4, 8):
        with_link, without = (
            tpot_floor(bf16_70b, spec, WORKLOAD, 16, tp=tp, eta=0.5) for spec in (h100, unlinked)
        )
        ring = 2 * (tp - 1) / tp * bf16_70b.allreduce_bytes_per_token / (link * 0.5)
        per_step = 16 * ring + 16 / WORKLOAD.output_tokens * WORKLOAD.input_tokens * ring
        assert with_link - without == pytest.approx(per_step, rel=1e-9)
    # priced, a higher degree can lose: over PCIe (L40S) and on H100's NVLink at bf16,
    # eight devices serve fewer tokens each than four; unpriced, eight never lost
    for name in ("NVIDIA L40S", H100):
        spec = load_accelerators().get(name)
        free = spec.model_copy(update={"interconnect_bytes_per_s": None})
        rates = {
            (tp, linked): point.tokens_per_s_per_device
            for tp in (4, 8)
            for linked, part in ((True, spec), (False, free))
            for point in [operating_point(bf16_70b, part, WORKLOAD, MLPERF_SLO, tp, eta=0.5)]
            if point is not None
        }
        assert rates[8, True] < rates[4, True] and rates[8, False] >= rates[4, False], rates


def test_the_ranking_says_whether_the_cheapest_is_told_apart(bf16_70b: ServedModel) -> None:
    accelerators, catalog = load_accelerators(), load_catalog()
    eight_b = served_model(
        shape_from_config({**LLAMA_70B_CONFIG, "hidden_size": 4096, "num_hidden_layers": 32,
                           "num_attention_heads": 32, "intermediate_size": 14336,
                           "vocab_size": 128256}),
        "bf16",
    )  # fmt: skip
    slo = ServingSlo(2.0, 0.05)
    far = serving_plan(
        eight_b, [accelerators.get(n) for n in ("NVIDIA B200 (HGX, 1000 W)", "NVIDIA T4")],
        WORKLOAD, slo, catalog, "c",
    )  # fmt: skip
    assert far.ranking.startswith("decided: NVIDIA B200"), far.ranking
    near = serving_plan(
        eight_b, [accelerators.get(n) for n in ("NVIDIA L4", "NVIDIA A10G")],
        WORKLOAD, slo, catalog, "c",
    )  # fmt: skip
    assert near.ranking.startswith("not decided:") and "--from-run" in near.ranking, near.ranking
    none = serving_plan(
        eight_b, [accelerators.get("NVIDIA L4")], WORKLOAD, ServingSlo(2.0, 0.001), catalog, "c"
    )
    assert none.ranking.startswith("no option meets it: none of the 1 accelerators"), none


def test_a_family_without_an_mlperf_row_gets_a_wider_interval(bf16_70b: ServedModel) -> None:
    """The efficiency's interval is wider where the family has no row (on tokens/s the low end
    may meet no SLO at all, which the interval says as 0)."""
    accelerators = load_accelerators()
    widths = {}
    for name in (H100, "NVIDIA L4"):
        projection = project_serving(bf16_70b, accelerators.get(name), WORKLOAD, MLPERF_SLO)
        assert projection.point is not None
        rate = projection.point.tokens_per_s_per_device
        assert projection.low_tokens_per_s_per_device <= rate
        assert rate <= projection.high_tokens_per_s_per_device
        widths[name] = projection.eta_high / projection.eta_low
    assert projection.rows == 0 and "no MLPerf LLM row" in projection.basis
    assert widths["NVIDIA L4"] > 1.5 * widths[H100]


def _config(tmp_path: Path) -> Path:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(LLAMA_70B_CONFIG), encoding="utf-8")
    return path


def test_plan_llm_end_to_end(tmp_path: Path, cli: CliRunner) -> None:
    code, out, err = cli(
        "plan",
        "llm",
        _config(tmp_path),
        "--accelerators",
        f"{H100},google-tpu-v5e",
        "--slo",
        "ttft=2s,tpot=200ms",
        "--input-tokens",
        "1024",
        "--output-tokens",
        "256",
        "--json",
    )
    assert code == 0, err
    doc = json.loads(out)
    assert doc["mode"] == "llm" and doc["dtype"] == "bf16"
    h100, tpu = doc["options"]
    assert h100["accelerator"] == H100 and h100["tp"] >= 2
    assert h100["low_tokens_per_s_per_device"] <= h100["tokens_per_s_per_device"]
    assert h100["tokens_per_s_per_device"] <= h100["high_tokens_per_s_per_device"]
    assert h100["priced_by"] == "p5.48xlarge"
    low, usd, high = (h100[f"{k}usd_per_million_output_tokens"] for k in ("low_", "", "high_"))
    assert low <= usd <= high
    assert "calibrated on" in h100["basis"] and h100["calibration_rows"] >= 5
    assert tpu["tp"] is None and "does not fit" in tpu["why"]  # 16 GB chips, 8 at most
    assert doc["ranking"] == ""  # one option priced: nothing to rank against
    code, out, err = cli(
        "plan", "llm", _config(tmp_path), "--accelerators", "nvidia-l4,nvidia-b200"
    )  # fmt: skip
    assert code == 0, err
    assert "tokens/s/device" in out and "no MLPerf LLM row" in out
    assert "ranking: decided: NVIDIA B200" in " ".join(out.split()), out


def test_save_stores_a_plan_run_that_runs_show_prints(tmp_path: Path, cli: CliRunner) -> None:
    store = tmp_path / "s.db"
    args = ("plan", "llm", _config(tmp_path), "--accelerators", "nvidia-l4", "--store", store)
    code, out, err = cli(*args)
    assert code == 0, err
    assert not store.exists() and "stored run" not in out  # stored only when asked
    code, out, err = cli(*args, "--save")
    assert code == 0, err
    assert "stored run" in out
    code, shown, err = cli("runs", "show", "latest", "--store", store)
    assert code == 0, err
    assert "tokens/s/device" in shown and "no MLPerf LLM row" in shown


LLM_STORE = Path(__file__).resolve().parents[1] / "data" / "store-llm-2026-11.sqlite"
"""An llm run with a capacity search (a fake server: 280.4 good output tokens/s at concurrency
2, p90 TTFT <= 200 ms and TPOT <= 50 ms), stored in 2026-11 (tests/data/make_llm_store.py)."""
CAPACITY_RUN = "20261126-064700-99b6"


def test_a_measured_llm_run_narrows_its_family_only(tmp_path: Path, cli: CliRunner) -> None:
    store = tmp_path / "s.db"
    store.write_bytes(LLM_STORE.read_bytes())
    config = Path(__file__).resolve().parents[2] / "examples/plan/llama-3.1-8b-config.json"
    args = ("plan", "llm", config, "--accelerators", "nvidia-l4,nvidia-l40s", "--json")
    code, out, err = cli(*args, "--store", store)
    assert code == 0, err
    before = {o["family"]: o for o in json.loads(out)["options"]}
    measured = ("--from-run", CAPACITY_RUN, "--measured-on", "nvidia-l4", "--store", store)
    code, out, err = cli(*args, *measured)
    assert code == 0, err
    after = {o["family"]: o for o in json.loads(out)["options"]}
    assert f"narrowed by your run {CAPACITY_RUN} on NVIDIA L4" in after["nvidia-l4"]["basis"]
    assert "narrowed" not in after["nvidia-l40s"]["basis"]

    def width(option: dict[str, Any]) -> float:
        high, low = option["high_tokens_per_s_per_device"], option["low_tokens_per_s_per_device"]
        return float(high) / float(low)

    assert width(after["nvidia-l4"]) < width(before["nvidia-l4"])  # no published L4 row
    assert width(after["nvidia-l40s"]) == pytest.approx(width(before["nvidia-l40s"]))
    code, _, err = cli(*args, "--from-run", CAPACITY_RUN, "--store", store)
    assert_one_line_error(code, err, "--from-run and --measured-on go together")
    code, _, err = cli(*args, *measured[:-2], "--store", tmp_path / "none.db")
    assert_one_line_error(code, err, "no results store")
    too_big = tmp_path / "l70.json"
    too_big.write_text(json.dumps(LLAMA_70B_CONFIG), encoding="utf-8")
    code, _, err = cli("plan", "llm", too_big, "--accelerators", "nvidia-l4", *measured)
    assert_one_line_error(code, err, "beyond the model's reach")


@pytest.mark.parametrize(
    ("args", "mention"),
    [
        (("--slo", "ttft=fast"), "--slo ttft=fast"),
        (("--slo", "e2e=10s"), "e2e"),
        (("--accelerators", "nvidia-z9"), "no accelerator 'nvidia-z9'"),
        (("--accelerators", "intel-xeon-amx"), "is a CPU"),
        (("--dtype", "fp6"), "--dtype 'fp6'"),
        (("--slo-percentile", "90"), "--slo-percentile"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    tmp_path: Path, cli: CliRunner, args: tuple[str, ...], mention: str
) -> None:
    code, _, err = cli("plan", "llm", _config(tmp_path), *args)
    assert_one_line_error(code, err, mention)


def test_a_missing_config_is_one_line_and_exit_2(tmp_path: Path, cli: CliRunner) -> None:
    code, _, err = cli("plan", "llm", tmp_path / "absent.json")
    assert_one_line_error(code, err, "no such file")


def test_the_tpot_floor_is_the_operating_point_s_and_scales_as_one_over_eta(
    bf16_70b: ServedModel,
) -> None:
    spec = load_accelerators().get(H100)
    point = operating_point(bf16_70b, spec, WORKLOAD, MLPERF_SLO, 4, eta=0.5)
    assert point is not None
    at = tpot_floor(bf16_70b, spec, WORKLOAD, point.concurrency, tp=4, eta=0.5)
    assert at == pytest.approx(point.tpot_s)
    assert tpot_floor(bf16_70b, spec, WORKLOAD, 8, tp=4, eta=0.25) == pytest.approx(
        2 * tpot_floor(bf16_70b, spec, WORKLOAD, 8, tp=4, eta=0.5)
    )
    with pytest.raises(ValueError, match="batch must be >= 1"):
        tpot_floor(bf16_70b, spec, WORKLOAD, 0)


L4 = "NVIDIA L4"
LLAMA_8B_CONFIG = load_model_config(
    Path(__file__).resolve().parents[2] / "examples" / "plan" / "llama-3.1-8b-config.json"
)


def _l4_run(model: ServedModel, points: tuple[TpotPoint, ...]) -> ServingRun:
    spec = load_accelerators().get(L4)
    return ServingRun(
        run_id="r1",
        spec=spec,
        model=model,
        workload=WORKLOAD,
        slo=ServingSlo(2.0, 0.2),
        tokens_per_s_per_device=50.0,
        devices=1,
        points=points,
    )


def test_a_fixed_step_cost_is_fitted_from_two_loads_and_carried_to_the_projection() -> None:
    """A server whose every decode step pays 20 ms beside the floor at eta 0.5: two measured
    loads give both back, the family's efficiency moves to 0.5, and the projection at any other
    load pays the 20 ms (the one-efficiency model could match only one load)."""
    model = served_model(shape_from_config(LLAMA_8B_CONFIG), "bf16", name="llama-8b")
    spec = load_accelerators().get(L4)
    truth_s, truth_eta = 0.020, 0.5

    def measured(batch: int) -> float:
        return tpot_floor(model, spec, WORKLOAD, batch, eta=truth_eta, overhead_s=truth_s)

    floors = [tpot_floor(model, spec, WORKLOAD, b) for b in (1, 16)]
    fitted = fit_step_overhead(floors, [measured(1), measured(16)])
    assert fitted == pytest.approx((truth_s, truth_eta))
    run = _l4_run(model, (TpotPoint(1, measured(1)), TpotPoint(16, measured(16))))
    calibration = tightened_serving([run])
    assert calibration.overhead_s("nvidia-l4") == pytest.approx(truth_s)
    assert calibration.overhead_s("nvidia-l40s") == 0.0  # the measured family only
    assert "(2 loads: a fixed 20 ms a step, fitted)" in calibration.overheads["nvidia-l4"].label
    projection = project_serving(model, spec, WORKLOAD, ServingSlo(2.0, 0.2), calibration)
    point = projection.point
    assert point is not None and projection.eta_low < truth_eta < projection.eta_high
    assert point.tpot_s == pytest.approx(
        tpot_floor(
            model, spec, WORKLOAD, point.concurrency, tp=point.tp, eta=projection.eta,
            overhead_s=truth_s,
        )
    )  # fmt: skip
    assert "a fixed 20 ms a step" in projection.basis
    # the line's own spread widens the interval, the more the further beyond the loads measured
    line = calibration.overheads["nvidia-l4"]
    inside, beyond = (tpot_floor(model, spec, WORKLOAD, b) for b in (4, 256))
    assert 0 < line.relative_sd(inside) < RUN_TO_RUN_LOG_SD < line.relative_sd(beyond)
    slo = ServingSlo(2.0, 0.2)
    ends = [
        best_point(model, spec, WORKLOAD, slo, eta, overhead_s=truth_s)
        for eta in (projection.eta_low, projection.eta_high)
    ]  # the efficiency's interval alone, at the fitted cost
    assert ends[0] is not None and ends[1] is not None
    assert projection.low_tokens_per_s_per_device < ends[0].tokens_per_s_per_device
    assert projection.high_tokens_per_s_per_device > ends[1].tokens_per_s_per_device


def test_widening_adds_a_spread_in_quadrature_on_the_log_scale() -> None:
    z = 1.2815515655446004  # the 80 % interval's normal quantile
    low, high = widened(100.0, 100.0 / 1.1, 110.0, 0.0)
    assert (low, high) == pytest.approx((100.0 / 1.1, 110.0))
    low, high = widened(100.0, 100.0, 100.0, 0.05)
    assert (low, high) == pytest.approx((100.0 * math.exp(-z * 0.05), 100.0 * math.exp(z * 0.05)))
    assert widened(100.0, 0.0, 120.0, 0.05)[0] == 0.0  # nothing met the SLO at the low end
    with pytest.raises(ValueError, match="low <= point <= high"):
        widened(100.0, 120.0, 130.0, 0.05)


def test_loads_that_cannot_tell_the_cost_from_the_efficiency_keep_one_efficiency() -> None:
    model = served_model(shape_from_config(LLAMA_8B_CONFIG), "bf16", name="llama-8b")
    assert fit_step_overhead([0.05], [0.08]) is None  # one load
    assert fit_step_overhead([0.05, 0.05], [0.08, 0.09]) is None  # one floor twice
    assert fit_step_overhead([0.05, 0.10], [0.09, 0.08]) is None  # TPOT falls with the load
    assert fit_step_overhead([0.05, 0.10], [0.04, 0.15]) is None  # a negative cost
    assert fit_step_overhead([0.05, 0.10], [0.1, 0.1004]) is None  # eta 125: the TPOT is flat
    with pytest.raises(ValueError, match="one measured TPOT per floor"):
        fit_step_overhead([0.05, 0.1], [0.08])
    flat = _l4_run(model, (TpotPoint(1, 0.1), TpotPoint(4, 0.1)))
    assert tightened_serving([flat]).overheads == {}  # the run's goodput gives its one eta
    with pytest.raises(ValueError, match="TPOT must be positive"):
        TpotPoint(4, 0.0)
    with pytest.raises(ValueError, match="concurrency must be >= 1"):
        TpotPoint(0, 0.1)
    with pytest.raises(ValueError, match="step overhead must be positive"):
        StepOverhead(0.0, "x", (0.05, 0.1), (0.08, 0.2))
    with pytest.raises(ValueError, match="two loads or more"):
        StepOverhead(0.01, "x", (0.05, 0.05), (0.08, 0.2))
    with pytest.raises(ValueError, match="step overhead must be >= 0 s"):
        tpot_floor(model, load_accelerators().get(L4), WORKLOAD, 1, overhead_s=-0.01)


def test_a_run_measured_at_several_concurrencies_fits_its_step_cost_through_the_cli(
    tmp_path: Path, cli: CliRunner
) -> None:
    """The recorded capacity run's trials (concurrency 1, 2 and 4) given the TPOTs an L4 would
    show with a fixed 20 ms a step at eta 0.5 on this run's own workload: ``plan llm
    --from-run`` reads the trials, fits the cost back and says so on the L4's options."""
    import sqlite3

    from accelscope.commands.plan.workflow import llm_capacity, llm_tpot_points

    store = tmp_path / "s.db"
    store.write_bytes(LLM_STORE.read_bytes())
    capacity, _ = llm_capacity(CAPACITY_RUN, store)
    assert capacity.prompt_tokens_mean and capacity.output_tokens_mean
    workload = ServingWorkload(capacity.prompt_tokens_mean, capacity.output_tokens_mean)
    model = served_model(shape_from_config(LLAMA_8B_CONFIG), "bf16", name="llama-8b")
    spec = load_accelerators().get(L4)
    with sqlite3.connect(store) as db:
        rows = db.execute(
            "SELECT id, payload_json FROM documents WHERE run_id = ? AND kind = 'llm-trial'",
            (CAPACITY_RUN,),
        ).fetchall()
        for row_id, text in rows:
            trial = json.loads(text)
            batch = trial["arrivals"]["concurrency"]
            if batch is None:  # the capacity search's rate trial: no concurrency to fit
                continue
            truth = tpot_floor(model, spec, workload, batch, eta=0.5, overhead_s=0.020)
            trial["summary"]["metrics"]["tpot_s"]["p50"] = truth
            db.execute(
                "UPDATE documents SET payload_json = ? WHERE id = ?", (json.dumps(trial), row_id)
            )
    points = llm_tpot_points(CAPACITY_RUN, store)
    assert [p.concurrency for p in points] == [1, 2, 4]
    config = Path(__file__).resolve().parents[2] / "examples/plan/llama-3.1-8b-config.json"
    code, out, err = cli(
        "plan", "llm", config, "--accelerators", "nvidia-l4", "--from-run", CAPACITY_RUN,
        "--measured-on", "nvidia-l4", "--store", store, "--json",
    )  # fmt: skip
    assert code == 0, err
    (option,) = json.loads(out)["options"]
    assert (
        f"your run {CAPACITY_RUN} on NVIDIA L4 (3 loads: a fixed 20 ms a step" in (option["basis"])
    )


# The model benchmarks/plan_llm_cpu_tighten.py served on vLLM's CPU build: build_tiny_llama with
# hidden 1024, 8 layers, 16 heads of 64, 4 KV heads, MLP 2816; its BPE tokenizer came out at 153
# tokens (the recorded 90,508,288 parameters pin it).
_CPU_LLAMA = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 1024,
    "num_hidden_layers": 8,
    "num_attention_heads": 16,
    "num_key_value_heads": 4,
    "intermediate_size": 2816,
    "vocab_size": 153,
    "tie_word_embeddings": False,
    "hidden_act": "silu",
}
_CPU_RUN = Path(__file__).resolve().parents[2] / "benchmarks/results/plan_llm_cpu_tighten.json"


def test_the_recorded_cpu_vllm_tpots_are_projected_within_their_intervals() -> None:
    """The TPOTs measured on the real vLLM (CPU build, concurrency 1-16, two rounds; the
    figures of docs/BENCHMARKS.md), replayed on every run: each pair of loads plays the user's
    run, ``tightened_serving`` fits the fixed step cost, and the three other loads are projected
    (TPOT = c + floor / eta, the interval widened by the line's own spread as
    ``project_serving`` widens it). Recorded 2026-11-29 (the calibration on the three
    benchmarks, the sourced prompt lengths): median |error| 9.1 %, coverage 93 % of 30."""
    recorded = json.loads(_CPU_RUN.read_text(encoding="utf-8"))
    model = served_model(shape_from_config(_CPU_LLAMA), "fp32", name="llama-90m")
    assert model.params == recorded["params"]
    source = {"source": "measured by benchmarks/plan_llm_cpu_tighten.py", "date": "2026-11-28"}
    spec = AcceleratorSpec.model_validate(
        {
            "name": "this CPU", "family": "this-cpu", "kind": "cpu", "vendor": "AMD",
            "memory_bytes": 24 * 2**30,
            "memory_bandwidth_bytes_per_s": recorded["bandwidth_bytes_per_s"],
            "peak_ops_per_s": {"fp32": recorded["fp32_flops_per_s"]},
            "sources": {
                "memory_bytes": source, "memory_bandwidth_bytes_per_s": source,
                "peak_ops_per_s": source,
            },
        }
    )  # fmt: skip
    workload = ServingWorkload(64, 32)
    measured = {int(c): statistics.median(v) for c, v in recorded["tpot_s"].items()}
    errors, held = [], []
    for pair in itertools.combinations(sorted(measured), 2):
        run = ServingRun(
            run_id=f"pair {pair}", spec=spec, model=model, workload=workload,
            slo=ServingSlo(60.0, 10.0), devices=1,
            tokens_per_s_per_device=pair[1] / measured[pair[1]],
            points=tuple(TpotPoint(c, measured[c]) for c in pair),
        )  # fmt: skip
        calibration = tightened_serving([run])
        line = calibration.overheads["this-cpu"]
        level = calibration.level_for(model, workload)
        prediction = calibration.model.predict(level.group, "this-cpu", level.benchmark)
        low, high = prediction.interval(COVERAGE)
        for c in set(measured) - set(pair):
            floor = tpot_floor(model, spec, workload, c)
            point = line.seconds + floor / prediction.point
            fast, slow = widened(
                point, line.seconds + floor / high, line.seconds + floor / low,
                line.relative_sd(floor),
            )  # fmt: skip
            errors.append(abs(point / measured[c] - 1))
            held.append(fast <= measured[c] <= slow)
    assert len(errors) == 30
    assert statistics.median(errors) <= 0.10, sorted(errors)
    assert sum(held) / len(held) >= 0.80, held
