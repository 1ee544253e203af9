"""Energy in a capacity plan: the joules per item measured with an option's capacity (a load
run's capacity trial, a bench configuration), priced at $/kWh x PUE over the month's requests;
every other option "not measured: why"; the CLI's --energy-price and --pue."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from accelscope.errors import BadInputError
from accelscope.hardware.energy import EnergyFigure
from accelscope.hardware.fingerprint import Environment
from accelscope.plan.capacity import bench_capacity, given_capacity
from accelscope.plan.energy import EnergyPrice, figure_key, option_energy
from accelscope.store.sqlite import ResultStore
from accelscope.testing import CliRunner, assert_one_line_error
from plan_helpers import capacity_payload, roofline_payload

SOURCE = "NVML total-energy counter of GPU GPU-0 (NVIDIA L4), whole board"


def _figure(joules: float, items: int) -> EnergyFigure:
    return EnergyFigure(
        energy_j=joules,
        window_s=10.0,
        items=items,
        source=SOURCE,
        update_period_s=0.1,
        update_period_basis="assumed",
        resolution_j=0.001,
        uncertainty_j=joules / 100,
    )


def test_energy_priced_over_the_months_requests() -> None:
    capacity = bench_capacity(400.0, 0.02, "eager/bf16/b8/t8", 0.1)
    figures = {figure_key("bench", "eager/bf16/b8/t8"): _figure(500.0, 1000)}  # 0.5 J/item
    energy = option_energy(capacity, figures, 2e6, EnergyPrice(usd_per_kwh=0.12, pue=1.5))
    assert energy.joules_per_item == pytest.approx(0.5)
    kwh = 0.5 * 2e6 * 1.5 / 3.6e6
    assert energy.kwh_per_month == pytest.approx(kwh)
    assert energy.usd_per_month == pytest.approx(kwh * 0.12)
    assert energy.usd_per_million == pytest.approx(0.5 * 1e6 * 1.5 / 3.6e6 * 0.12)
    assert energy.uncertainty_rel == pytest.approx(0.01) and energy.source == SOURCE
    unpriced = option_energy(capacity, figures, 2e6, None)
    assert unpriced.kwh_per_month == pytest.approx(0.5 * 2e6 / 3.6e6)
    assert unpriced.usd_per_month is None and unpriced.usd_per_million is None


def test_energy_not_measured_says_why() -> None:
    bench = bench_capacity(400.0, 0.02, "eager/fp32/b8/t8", 0.1)
    assert "stored before" in option_energy(bench, {}, 1e6, None).reason
    missing = EnergyFigure.not_measured("no energy counter is read for CPU runs")
    cpu = option_energy(bench, {figure_key("bench", "eager/fp32/b8/t8"): missing}, 1e6, None)
    assert cpu.joules_per_item is None and cpu.reason == missing.reason
    given = option_energy(given_capacity(100.0), {}, 1e6, None)
    assert "given (--capacity)" in given.reason
    assert "no capacity" in option_energy(None, {}, 1e6, None).reason
    with pytest.raises(BadInputError, match=r"--pue must be 1\.0 or more"):
        EnergyPrice(usd_per_kwh=0.1, pue=0.9)


def _store(tmp_path: Path, environment: Environment) -> Path:
    path = tmp_path / "r.db"
    capacity = capacity_payload()
    capacity["capacity_trial"] = {
        "energy": _figure(2000.0, 10_000).model_dump(mode="json")
    }  # 0.2 J/query
    with ResultStore(path) as store:
        for kind, doc_kind, payload in (
            ("roofline", "roofline", roofline_payload()),
            ("load", "capacity", capacity),
        ):
            run_id = store.start_run(kind, "resnet50", "test", environment, {})
            store.add_document(run_id, doc_kind, payload)
            store.finish_run(run_id, "complete")
    return path


def test_plan_prices_the_energy_measured_with_the_load_capacity(
    tmp_path: Path, environment: Environment, cli: CliRunner
) -> None:
    db = _store(tmp_path, environment)
    args = ("plan", "--model", "resnet50", "--traffic", "peak=10qps", "--sla-p99", "100ms")
    args += ("--here", "c7i.large", "--store", db, "--no-store")
    code, out, err = cli(*args, "--energy-price", "$0.15/kWh", "--pue", "1.2", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["energy_price"] == {"usd_per_kwh": 0.15, "pue": 1.2}
    options = {o["name"]: o for o in doc["options"]}
    here = options["c7i.large"]["energy"]
    requests = 10.0 * 86400 * 730 / 24  # constant 10 qps for a month
    assert here["joules_per_item"] == pytest.approx(0.2)
    assert here["kwh_per_month"] == pytest.approx(0.2 * requests * 1.2 / 3.6e6)
    assert here["usd_per_month"] == pytest.approx(0.2 * requests * 1.2 / 3.6e6 * 0.15)
    projected = [o for o in doc["options"] if (o["capacity"] or {}).get("basis") == "projected"]
    assert projected and all(o["energy"]["joules_per_item"] is None for o in projected)
    assert all("not projected" in o["energy"]["reason"] for o in projected)
    code, out, _ = cli(*args, "--energy-price", "0.15")
    assert code == 0 and "energy of c7i.large: 0.2 J/item" in " ".join(out.split())
    assert "at $0.15/kWh x PUE 1" in " ".join(out.split())


def test_energy_flags_bad_input_is_one_line(tmp_path: Path, cli: CliRunner) -> None:
    args = ("plan", "--model", "m", "--traffic", "peak=1qps", "--sla-p99", "1s", "--no-store")
    code, _, err = cli(*args, "--pue", "1.4")
    assert_one_line_error(code, err, "--pue needs --energy-price")
    code, _, err = cli(*args, "--energy-price", "free")
    assert_one_line_error(code, err, "--energy-price")
    code, _, err = cli(*args, "--energy-price", "0.1", "--pue", "0.5")
    assert_one_line_error(code, err, "--pue must be 1.0 or more")
