"""Measure, then tighten (plan/projection/tighten.py, EfficiencyModel.updated): a user's measured
run narrows its family's interval by the posterior update, labelled; nothing else moves; and
the narrowed intervals still hold left-out published rows."""

from __future__ import annotations

import dataclasses
import json
import math
import statistics
from pathlib import Path

import numpy as np
import pytest

from accelscope.documents import LoadCapacity, RooflineProfile
from accelscope.hardware.fingerprint import Environment
from accelscope.plan.catalog import load_catalog
from accelscope.plan.fleet import PlanSettings
from accelscope.plan.projection.calibration import shipped_calibration
from accelscope.plan.projection.efficiency import (
    EfficiencyModel,
    Measured,
    Observation,
)
from accelscope.plan.projection.tighten import (
    RUN_TO_RUN_LOG_SD,
    UserRun,
    tighten_leave_one_out,
    tightened,
)
from accelscope.plan.service import CapacityPlan, Evidence, build_plan
from accelscope.plan.traffic import load_traffic
from accelscope.store.sqlite import ResultStore
from accelscope.testing import CliRunner
from plan_helpers import capacity_payload, roofline_payload


def _hand_model() -> EfficiencyModel:
    """One group whose mean is known exactly (-1), one family ``a`` on class ``c``: family
    effect 0.1 (variance 0.03), family x class effect 0 (variance 0.01), sigma 0.1."""
    return EfficiencyModel(
        groups=("g",),
        families=("a",),
        pairs=(("a", "c"),),
        coefficients=np.array([-1.0, 0.1, 0.0]),
        covariance=np.diag([0.0, 0.03, 0.01]),
        group_rows={"g": 5},
        family_rows={"a": 5},
        class_rows={("a", "c"): 5},
        sigma={"c": 0.1},
        sigma_pooled=0.1,
        tau_family=0.2,
        tau_class=0.3,
        dof=1e6,
        observations=5,
    )


def test_one_measurement_is_the_normal_normal_posterior_computed_by_hand() -> None:
    # theta = u + v: prior N(0.1, 0.04); the run says theta = -0.5 - (-1) = 0.5 with variance
    # sigma^2 + its own 0.03 = 0.04. Posterior: mean (0.1 + 0.5) / 2 = 0.3, variance 0.02;
    # the next system adds sigma^2: predictive sd sqrt(0.03)
    model = _hand_model()
    run = Measured(Observation("g", "a", "c", -0.5), 0.03, "your run R on box")
    after = model.updated([run])
    prediction = after.predict("g", "a", "c")
    assert prediction.log_mean == pytest.approx(-1.0 + 0.3)
    assert prediction.log_sd == pytest.approx(math.sqrt(0.03))
    before = model.predict("g", "a", "c")
    assert before.log_sd == pytest.approx(math.sqrt(0.05))
    # the gain splits by the prior variances: 3/4 to the family, 1/4 to the family x class
    assert after.coefficients[1:] == pytest.approx([0.1 + 0.15, 0.05])
    assert prediction.basis.endswith("; narrowed by your run R on box")
    assert before.basis == "a published on c (5 rows)"
    assert after.family_rows == model.family_rows  # published counts stay published


def test_the_group_means_share_goes_to_the_family_so_its_level_moves_as_the_full_update() -> None:
    # the group mean now uncertain too (variance 0.01): the level m + u + v has prior variance
    # 0.05, the run's R is 0.04, innovation variance 0.09. The full update moves the level by
    # 0.05 / 0.09 of the innovation 0.4 and leaves it variance 0.05 x 0.04 / 0.09; here the
    # group mean stays, the family effect takes its share
    model = dataclasses.replace(_hand_model(), covariance=np.diag([0.01, 0.03, 0.01]))
    after = model.updated([Measured(Observation("g", "a", "c", -0.5), 0.03, "your run R")])
    prediction = after.predict("g", "a", "c")
    assert prediction.log_mean == pytest.approx(-0.9 + 0.4 * 0.05 / 0.09)
    assert prediction.log_sd == pytest.approx(math.sqrt(0.01 + 0.05 * 0.04 / 0.09))
    assert after.group_mean == {"g": -1.0}
    assert after.coefficients[1:] == pytest.approx([0.1 + 0.4 * 0.04 / 0.09, 0.4 * 0.01 / 0.09])


def test_a_family_no_row_has_enters_with_its_prior_and_narrows_most() -> None:
    # family b: prior u ~ N(0, 0.04), v ~ N(0, 0.09); innovation variance 0.13 + 0.01 + 0
    model = _hand_model()
    before = model.predict("g", "b", "c")
    assert before.log_sd == pytest.approx(math.sqrt(0.01 + 0.04 + 0.09))
    after = model.updated([Measured(Observation("g", "b", "c", -0.3), 0.0, "your run S on x")])
    prediction = after.predict("g", "b", "c")
    shrink = 0.13 / 0.14
    assert prediction.log_mean == pytest.approx(-1.0 + shrink * 0.7)
    assert prediction.log_sd == pytest.approx(math.sqrt(0.01 + 0.13 - 0.13**2 / 0.14))
    assert prediction.basis == "no published calibration for b; narrowed by your run S on x"
    assert after.predict("g", "a", "c") == model.predict("g", "a", "c")


def test_other_families_and_the_group_means_do_not_move() -> None:
    model = shipped_calibration().model
    xeon_before = model.predict("resnet50/Server", "intel-xeon-amx", "conv")
    # an eager run e (2.7x) below what the submitters' stacks reached
    far_below = Observation("resnet50/Server", "intel-xeon-amx", "conv", xeon_before.log_mean - 1.0)
    after = model.updated([Measured(far_below, RUN_TO_RUN_LOG_SD**2, "your run R on c7i")])
    assert after.group_mean == model.group_mean
    for family in model.families:
        if family != "intel-xeon-amx":
            assert after.predict("resnet50/Server", family, "conv") == model.predict(
                "resnet50/Server", family, "conv"
            )
    xeon_after = after.predict("resnet50/Server", "intel-xeon-amx", "conv")
    assert xeon_after.log_mean < xeon_before.log_mean
    assert xeon_after.log_sd < xeon_before.log_sd
    assert np.allclose(after.covariance, after.covariance.T)
    assert np.all(np.linalg.eigvalsh(after.covariance) > -1e-12)


@pytest.mark.parametrize(
    ("variance", "value", "label", "match"),
    [
        (-0.01, -1.0, "r", "log variance"),
        (math.nan, -1.0, "r", "log variance"),
        (0.0, math.inf, "r", "log value"),
        (0.0, -1.0, "", "label"),
    ],
)
def test_a_bad_measurement_is_refused_where_it_is_built(
    variance: float, value: float, label: str, match: str
) -> None:
    with pytest.raises(ValueError, match=match):
        Measured(Observation("g", "a", "c", value), variance, label)


def test_a_group_the_table_lacks_is_refused() -> None:
    with pytest.raises(ValueError, match="no published group 'x/Server'"):
        _hand_model().updated([Measured(Observation("x/Server", "a", "c", 0.0), 0.0, "r")])


def test_a_user_run_needs_an_id_and_a_positive_capacity() -> None:
    c7i = load_catalog().get("c7i.large")
    with pytest.raises(ValueError, match="positive"):
        UserRun(run_id="R", instance=c7i, items_per_s_per_device=0.0, scenario="Server")
    with pytest.raises(ValueError, match="id"):
        UserRun(run_id="", instance=c7i, items_per_s_per_device=1.0, scenario="Server")


def _profile(device: str = "cpu") -> RooflineProfile:
    payload = roofline_payload()
    payload["device"] = payload["ceilings"]["device"] = device
    return RooflineProfile.from_payload(payload)


def test_no_run_with_a_published_footing_narrows_nothing() -> None:
    c6i = load_catalog().get("c6i.2xlarge")  # no datasheet part: no footing
    run = UserRun(run_id="R", instance=c6i, items_per_s_per_device=50.0, scenario="Server")
    assert tightened(_profile(), [run]) is None


def _plan(tmp_path: Path, evidence: Evidence, here: str, only: tuple[str, ...]) -> CapacityPlan:
    extra = tmp_path / "four-l4.toml"
    shipped = (Path(__file__).parents[3] / "src/accelscope/plan/data/catalog.toml").read_text()
    block = shipped[shipped.index('type = "g6.xlarge"') : shipped.index("[[instance.published]]")]
    four = block.replace('"g6.xlarge"', '"g6.12xlarge"').replace(
        "accelerator_count = 1", "accelerator_count = 4"
    )
    extra.write_text("[[instance]]\n" + four)
    return build_plan(
        "resnet50",
        load_catalog([extra]),
        load_traffic("peak=300qps"),
        PlanSettings(0.1),
        evidence,
        here=here,
        only=only,
    )


def _options(plan: CapacityPlan) -> dict[str, tuple[str, float, float, float]]:
    found = {}
    for cost in plan.options:
        capacity = cost.option.capacity
        assert capacity is not None
        p = capacity.published
        if p is not None:
            found[cost.option.name] = (
                capacity.label,
                p.qps_per_instance,
                p.low_qps_per_instance,
                p.high_qps_per_instance,
            )
    return found


def test_a_load_run_on_an_l4_narrows_the_l4_family_and_says_so(tmp_path: Path) -> None:
    payload = capacity_payload()
    payload.update(device="cuda", capacity_qps=3000.0)
    load = LoadCapacity.from_payload(payload)
    only = ("g6.12xlarge", "g6e.xlarge", "p5.48xlarge")
    profile = _profile("cuda")
    plain = _options(
        _plan(tmp_path, Evidence(profile=profile, sources=("roofline run A",)), "g6.xlarge", only)
    )
    measured = Evidence(
        profile=profile, capacities=(load,), sources=("roofline run A", "load run L42")
    )
    plan = _plan(tmp_path, measured, "g6.xlarge", only)
    narrowed = _options(plan)
    here = next(c for c in plan.options if c.option.name == "g6.xlarge")
    assert here.option.capacity is not None and here.option.capacity.basis == "measured"
    label, point, low, high = narrowed["g6.12xlarge"]
    assert label.endswith("narrowed by your run L42 on g6.xlarge")
    _, point_before, low_before, high_before = plain["g6.12xlarge"]
    assert "narrowed" not in plain["g6.12xlarge"][0]
    # L4 has no published ResNet-50 row: the class effect's whole prior narrows, and the
    # point moves most of the way (shrinkage) to the run's level: 4 L4s at 3,000 each
    assert high / low < 0.6 * (high_before / low_before)
    assert 12000.0 < point < point_before
    assert math.log(point / 12000.0) < 0.25 * math.log(point_before / 12000.0)
    # other families: unchanged, not labelled
    for name in ("g6e.xlarge", "p5.48xlarge"):
        assert narrowed[name] == plain[name]
    capacity = next(c for c in plan.options if c.option.name == "g6.12xlarge").option.capacity
    assert capacity is not None and capacity.detail["narrowed_by"] == "your run L42 on g6.xlarge"
    assert capacity.published is not None and "yours as measured" in capacity.published.stack


def test_a_bench_run_here_narrows_as_offline_and_a_plan_without_one_is_unchanged(
    tmp_path: Path,
) -> None:
    from accelscope.plan.service import BenchFigure

    figure = BenchFigure(label="eager/bf16/b8", items_per_s=120.0, p99_s=0.05)
    only = ("c7i.2xlarge", "g6.xlarge")
    plain = _options(_plan(tmp_path, Evidence(profile=_profile()), "c7i.large", only))
    evidence = Evidence(profile=_profile(), bench=(figure,), sources=("bench run B7",))
    narrowed = _options(_plan(tmp_path, evidence, "c7i.large", only))
    label, *_ = narrowed["c7i.2xlarge"]
    assert label.endswith("narrowed by your run B7 on c7i.large")
    assert narrowed["g6.xlarge"] == plain["g6.xlarge"]
    before_width = plain["c7i.2xlarge"][3] / plain["c7i.2xlarge"][2]
    after_width = narrowed["c7i.2xlarge"][3] / narrowed["c7i.2xlarge"][2]
    # 14 published Xeon ResNet-50 rows: one run measured Offline barely changes the Server
    # interval's width, but moves its point towards the run (120/s on c7i.large: below it)
    assert after_width == pytest.approx(before_width, rel=1e-3)
    assert narrowed["c7i.2xlarge"][1] < plain["c7i.2xlarge"][1]


def test_a_family_with_published_rows_keeps_its_coverage_and_errs_less() -> None:
    held = tighten_leave_one_out(shipped_calibration(), unpublished=False)
    assert len(held) >= 100
    before = [t.before for t in held]
    after = [t.after for t in held]
    covered = sum(h.covered for h in after) / len(after)
    assert covered >= 0.68, covered
    assert statistics.median(abs(h.error) for h in after) < statistics.median(
        abs(h.error) for h in before
    )
    assert statistics.median(h.width for h in after) <= statistics.median(h.width for h in before)


def test_the_narrowed_intervals_still_hold_left_out_published_rows() -> None:
    held = tighten_leave_one_out(shipped_calibration(), unpublished=True)
    assert len(held) >= 100
    before = [t.before for t in held]
    after = [t.after for t in held]
    width = lambda hs: statistics.median(h.width for h in hs)  # noqa: E731
    error = lambda hs: statistics.median(abs(h.error) for h in hs)  # noqa: E731
    coverage = lambda hs: sum(h.covered for h in hs) / len(hs)  # noqa: E731
    assert width(after) < 0.5 * width(before)
    assert error(after) < 0.6 * error(before)
    assert coverage(after) >= 0.68, coverage(after)
    assert all("narrowed by published row" in h.basis for h in after)


def test_a_measured_llm_run_narrows_its_familys_serving_interval_only() -> None:
    from accelscope.plan.accelerators import load_accelerators
    from accelscope.plan.projection.llm_serving import (
        MLPERF_DTYPE,
        MLPERF_GROUP,
        MLPERF_SLO,
        ServingRun,
        llama2_70b_shape,
        project_serving,
        served_model,
        shipped_serving_calibration,
        tightened_serving,
    )

    accelerators = load_accelerators()
    l4, h100 = accelerators.get("NVIDIA L4"), accelerators.get("NVIDIA H100 SXM 80GB")
    model = served_model(llama2_70b_shape(), MLPERF_DTYPE, name="llama2-70b")
    workload = shipped_serving_calibration().workloads[MLPERF_GROUP]
    before = project_serving(model, l4, workload, MLPERF_SLO)
    assert before.point is not None
    measured = 0.7 * before.point.tokens_per_s_per_device
    run = ServingRun(
        run_id="V9",
        spec=l4,
        model=model,
        workload=workload,
        slo=MLPERF_SLO,
        tokens_per_s_per_device=measured,
        devices=8,
    )
    calibration = tightened_serving([run])
    after = project_serving(model, l4, workload, MLPERF_SLO, calibration)
    assert after.point is not None
    assert after.basis.endswith("; narrowed by your run V9 on NVIDIA L4")
    width = lambda p: p.high_tokens_per_s_per_device / p.low_tokens_per_s_per_device  # noqa: E731
    # L4 has no MLPerf LLM row: the family's whole prior narrows to near the run's level
    assert width(after) < 0.6 * width(before)
    assert measured < after.point.tokens_per_s_per_device < before.point.tokens_per_s_per_device
    assert after.low_tokens_per_s_per_device < measured
    other, unchanged = (
        project_serving(model, h100, workload, MLPERF_SLO, c) for c in (calibration, None)
    )
    assert (other.eta, other.eta_low, other.eta_high) == pytest.approx(
        (unchanged.eta, unchanged.eta_low, unchanged.eta_high), rel=1e-9
    )  # another family: untouched but for the last bits of the solve
    assert other.basis == unchanged.basis
    with pytest.raises(ValueError, match="run V9"):
        tightened_serving([dataclasses.replace(run, tokens_per_s_per_device=1e12)])


def test_the_cli_names_the_stored_load_run_that_narrowed_each_option(
    tmp_path: Path, environment: Environment, cli: CliRunner
) -> None:
    db = tmp_path / "r.db"
    with ResultStore(db) as store:
        ids = {}
        for kind, doc_kind, payload in (
            ("roofline", "roofline", roofline_payload()),
            ("load", "capacity", capacity_payload()),
        ):
            ids[kind] = store.start_run(kind, "resnet50", "test", environment, {})
            store.add_document(ids[kind], doc_kind, payload)
            store.finish_run(ids[kind], "complete")
    args = ("plan", "--model", "resnet50", "--traffic", "peak=300qps", "--sla-p99", "100ms")
    code, out, err = cli(*args, "--here", "c7i.large", "--store", db, "--no-store", "--json")
    assert code == 0, err
    options = {o["name"]: o["capacity"] for o in json.loads(out)["options"]}
    narrowed = f"narrowed by your run {ids['load']} on c7i.large"
    for name in ("c7i.2xlarge", "c7i.8xlarge", "m7i.2xlarge"):  # the same Xeon datasheet
        assert options[name]["label"].endswith(narrowed), options[name]["label"]
    assert "narrowed" not in options["g6.xlarge"]["label"]
    code, out, err = cli(*args, "--store", db, "--no-store", "--json")  # no --here: nothing
    assert code == 0, err
    assert not any(
        "narrowed" in (o["capacity"] or {}).get("label", "") for o in json.loads(out)["options"]
    )


def test_node_type_results_and_counted_work_narrow_too(tmp_path: Path) -> None:
    from accelscope.plan.service import BenchFigure

    figure = BenchFigure(label="trt/int8/b8@l4-pool", items_per_s=3000.0, p99_s=0.01, device="cuda")
    only = ("g6.12xlarge",)
    cluster = Evidence(
        profile=_profile("cuda"),
        by_instance={"g6.xlarge": (figure,)},
        sources=("bench run R5", "run R5 on node type l4-pool as g6.xlarge"),
    )
    label, *_ = _options(_plan(tmp_path, cluster, "", only))["g6.12xlarge"]
    assert label.endswith("narrowed by your run R5 on g6.xlarge")
    # no roofline run: the work counted without one (here the profile's own) is projected,
    # widened as a static projection is, and narrowed by the bench run measured --here
    static = Evidence(static=_profile("cuda"), bench=(figure,), sources=("bench run B8",))
    plain = _options(_plan(tmp_path, Evidence(static=_profile("cuda")), "g6.xlarge", only))
    narrowed = _options(_plan(tmp_path, static, "g6.xlarge", only))
    label, _, low, high = narrowed["g6.12xlarge"]
    assert label.startswith("estimate, static") and label.endswith("your run B8 on g6.xlarge")
    _, _, low_before, high_before = plain["g6.12xlarge"]
    assert high / low < 0.6 * (high_before / low_before)
