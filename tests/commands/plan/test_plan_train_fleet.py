"""``plan train --fleet AUDIT_RUN`` (issue 43): a synchronous training run set against a stored
audit of the fixture fleet (two L4s, one idle all week; A100s and a MIG slice): the hours with
enough idle GPUs at once, the GPU-hours a day, the days on recovered capacity alone, what is
recovered and rented within a deadline, and the $ of each path; the bad inputs as one line.

Covers: accelscope.audit.recover, accelscope.commands.plan.train,
accelscope.cli._plan."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from accelscope.audit.recover import FleetClass, TrainRecovery, train_buy_or_recover
from accelscope.plan.traffic import HOURS
from accelscope.testing import CliRunner, assert_one_line_error
from accelscope.testing.fleet import dumps_query_range, fleet

REPO = Path(__file__).resolve().parents[3]
LLAMA_8B = REPO / "examples" / "plan" / "llama-3.1-8b-config.json"
SMALL = {  # a ~0.1 B Llama-style decoder: trains on one L4
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 768,
    "intermediate_size": 2048,
    "num_attention_heads": 12,
    "num_key_value_heads": 12,
    "num_hidden_layers": 12,
    "vocab_size": 32000,
    "max_position_embeddings": 2048,
    "tie_word_embeddings": False,
}
ONE_L4 = ("--devices", "1", "--sharding", "ddp", "--accelerators", "nvidia-l4")
ONE_L4 += ("--seq-len", "1k", "--tokens", "1B")


@pytest.fixture
def store(tmp_path: Path, cli: CliRunner) -> Path:
    export = tmp_path / "fleet.json"
    export.write_text(dumps_query_range(fleet(step_s=600.0)))
    db = tmp_path / "s.db"
    code, _, err = cli("audit", "--from", export, "--store", db)
    assert code == 0, err
    return db


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(SMALL))
    return path


def _plan(cli: CliRunner, *args: object) -> dict[str, Any]:
    code, out, err = cli("plan", "train", *args, "--json")
    assert code == 0, err
    doc: dict[str, Any] = json.loads(out)
    return doc


def test_the_idle_l4_trains_it_all_given_the_days(
    store: Path, config: Path, cli: CliRunner
) -> None:
    doc = _plan(cli, config, *ONE_L4, "--fleet", "latest", "--store", store)
    (option,) = doc["options"]
    assert option["fits"] is True
    (path,) = doc["recovery"]
    assert doc["fleet_run"] and path["family"] == "L4" and path["devices"] == 1
    assert path["hours_of_day"] == list(range(HOURS))  # the notebook's L4: idle all day
    assert path["recovered_gpu_h_per_day"] == 24
    needed = option["time_s"] / 3600
    assert path["needed_gpu_h"] == pytest.approx(needed)
    assert path["days_on_recovered"] == pytest.approx(needed / 24)
    # no deadline: all of it on the idle L4 (over those days), nothing rented
    assert path["recovered_gpu_h"] == pytest.approx(needed) and path["rented_gpu_h"] == 0
    assert path["rent_all_usd"] == pytest.approx(needed * option["usd_per_device_hour"])
    assert path["recover_usd"] == 0
    assert path["source"].startswith("audited: run ")


def test_a_deadline_splits_recovered_and_rented(store: Path, config: Path, cli: CliRunner) -> None:
    free = _plan(cli, config, *ONE_L4, "--fleet", "latest", "--store", store)
    days = free["recovery"][0]["days_on_recovered"]
    deadline_h = 24 * days / 2  # half the days the idle L4 would need on its own
    doc = _plan(
        cli, config, *ONE_L4, "--deadline", f"{deadline_h:.6f}h", "--fleet", "latest",
        "--store", store,
    )  # fmt: skip
    (path,) = doc["recovery"]
    assert path["recovered_gpu_h"] == pytest.approx(24 * deadline_h / 24, rel=1e-6)
    assert path["rented_gpu_h"] == pytest.approx(path["needed_gpu_h"] / 2, rel=1e-6)
    assert path["recover_usd"] == pytest.approx(path["rent_all_usd"] / 2, rel=1e-6)
    code, out, err = cli(
        "plan", "train", config, *ONE_L4, "--deadline", f"{deadline_h:.6f}h", "--fleet",
        "latest", "--store", store,
    )  # fmt: skip
    assert code == 0, err
    assert "buy or recover: against audit run" in out
    assert "cheapest path: NVIDIA L4: recover" in out


def test_a_run_needing_more_gpus_at_once_than_are_idle_rents_them(
    store: Path, cli: CliRunner
) -> None:
    doc = _plan(
        cli, LLAMA_8B, "--accelerators", "NVIDIA A100 SXM 40GB", "--tokens", "1B",
        "--fleet", "latest", "--store", store,
    )  # fmt: skip
    (path,) = doc["recovery"]  # 8 A100s at once: the fleet never has them idle together
    assert path["family"] == "A100" and path["hours_of_day"] == []
    assert path["days_on_recovered"] is None and path["recovered_gpu_h"] == 0
    assert path["recover_usd"] == pytest.approx(path["rent_all_usd"])
    code, out, err = cli(
        "plan", "train", LLAMA_8B, "--accelerators", "NVIDIA A100 SXM 40GB", "--tokens", "1B",
        "--fleet", "latest", "--store", store,
    )  # fmt: skip
    assert code == 0, err
    assert "never" in out


def test_bad_fleet_runs_are_one_line(
    store: Path, config: Path, tmp_path: Path, cli: CliRunner
) -> None:
    plan = ("plan", "--model", "m", "--traffic", "peak=100qps", "--sla-p99", "100ms")
    plan += ("--here", "g6.xlarge", "--capacity", "120qps", "--only", "g6.xlarge")
    code, out, err = cli(*plan, "--store", store, "--json")  # stores a plan run
    assert code == 0, err
    plan_run = json.loads(out)["run_id"]
    code, _, err = cli("plan", "train", config, *ONE_L4, "--fleet", plan_run, "--store", store)
    assert_one_line_error(code, err, "is a plan run, not an audit run")
    code, _, err = cli("plan", "train", config, *ONE_L4, "--fleet", "nosuch", "--store", store)
    assert_one_line_error(code, err, "no run 'nosuch'")
    none = tmp_path / "none.db"
    code, _, err = cli("plan", "train", config, *ONE_L4, "--fleet", "latest", "--store", none)
    assert_one_line_error(code, err, "no results store")


def _l4(idle: tuple[float, ...]) -> FleetClass:
    return FleetClass(
        family="L4",
        models=("NVIDIA L4",),
        gpus=4,
        idle_gpus_by_hour=idle,
        spare_gpus_by_hour=(0.0,) * HOURS,
        unmeasured_gpus=0,
        busy_not_useful_gpu_h_per_day=0,
        useful_gpu_h_per_day=24,
        cost_usd_per_day=96,
        usd_per_gpu_hour=1,
        price_source="test",
        source="audited: test",
    )


def test_train_buy_or_recover_counts_hours_with_enough_gpus_at_once() -> None:
    idle = tuple(4.0 if h < 6 else 1.0 for h in range(HOURS))  # 4 idle from 00 to 06 UTC
    kwargs = {"accelerator": "NVIDIA L4", "time_low_s": 30 * 3600.0, "time_high_s": 60 * 3600.0}
    path = train_buy_or_recover(
        devices=2, time_s=40 * 3600.0, usd_per_gpu_hour=0.8, price_source="catalog",
        fleet=(_l4(idle),), deadline_s=2 * 86400.0, **kwargs,  # type: ignore[arg-type]
    )  # fmt: skip
    assert path is not None
    assert path.hours_of_day == (0, 1, 2, 3, 4, 5) and path.recovered_gpu_h_per_day == 12
    assert path.needed_gpu_h == 80 and path.days_on_recovered == pytest.approx(80 / 12)
    assert path.recovered_gpu_h == 24 and path.rented_gpu_h == 56  # 2 days x 12 GPU-h
    assert path.recover_usd == pytest.approx(56 * 0.8) and path.rent_all_usd == 64
    assert path.meets_deadline is True  # 40 h of wall time within 48 h
    assert path.fleet_usd_per_useful_gpu_hour_before == 4.0
    assert path.fleet_usd_per_useful_gpu_hour_after == pytest.approx(96 / 36)
    assert path.saved_usd == pytest.approx(24 * 0.8)
    late = train_buy_or_recover(
        devices=2, time_s=40 * 3600.0, usd_per_gpu_hour=0.8, price_source="catalog",
        fleet=(_l4(idle),), deadline_s=86400.0, **kwargs,  # type: ignore[arg-type]
    )  # fmt: skip
    assert late is not None and late.meets_deadline is False
    other = train_buy_or_recover(
        devices=2, time_s=40 * 3600.0, usd_per_gpu_hour=0.8, price_source="catalog",
        fleet=(_l4(idle),), **{**kwargs, "accelerator": "NVIDIA H100 SXM 80GB"},  # type: ignore[arg-type]
    )  # fmt: skip
    assert other is None  # the fleet has no H100


def test_train_recovery_invariants_raise() -> None:
    with pytest.raises(ValueError, match="devices"):
        train_buy_or_recover(
            accelerator="NVIDIA L4", devices=0, time_s=1.0, time_low_s=1.0, time_high_s=1.0,
            usd_per_gpu_hour=1.0, price_source="x", fleet=(),
        )  # fmt: skip
    with pytest.raises(ValueError, match="low <= point <= high"):
        train_buy_or_recover(
            accelerator="NVIDIA L4", devices=1, time_s=1.0, time_low_s=2.0, time_high_s=3.0,
            usd_per_gpu_hour=1.0, price_source="x", fleet=(),
        )  # fmt: skip
    with pytest.raises(ValueError, match="deadline"):
        train_buy_or_recover(
            accelerator="NVIDIA L4", devices=1, time_s=1.0, time_low_s=1.0, time_high_s=1.0,
            usd_per_gpu_hour=1.0, price_source="x", fleet=(), deadline_s=math.nan,
        )  # fmt: skip
    good = {
        "accelerator": "NVIDIA L4", "family": "L4", "devices": 1, "needed_gpu_h": 10.0,
        "needed_gpu_h_low": 8.0, "needed_gpu_h_high": 12.0, "hours_of_day": (1, 2),
        "recovered_gpu_h_per_day": 2.0, "days_on_recovered": 5.0, "deadline_s": None,
        "recovered_gpu_h": 10.0, "rented_gpu_h": 0.0, "usd_per_gpu_hour": 1.0,
        "price_source": "x", "rent_all_usd": 10.0, "recover_usd": 0.0,
        "fleet_usd_per_useful_gpu_hour_before": None,
        "fleet_usd_per_useful_gpu_hour_after": None, "source": "audited",
    }  # fmt: skip
    TrainRecovery(**good)  # type: ignore[arg-type]
    for change, message in (
        ({"rented_gpu_h": 1.0}, "add up"),
        ({"hours_of_day": (1, 1)}, "distinct"),
        ({"recovered_gpu_h_per_day": 3.0}, "devices x the hours"),
        ({"needed_gpu_h_low": 11.0}, "interval"),
        ({"recover_usd": 11.0}, "cannot cost more"),
    ):
        with pytest.raises(ValueError, match=message):
            TrainRecovery(**{**good, **change})  # type: ignore[arg-type]
