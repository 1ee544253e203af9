"""``plan --fleet AUDIT_RUN``: buy or recover against a stored audit of the fixture fleet, end to
end through the CLI, and the bad inputs (a run that is not an audit, no audit, no store).

Covers: accelscope.commands.plan.workflow, accelscope.commands.plan.view,
accelscope.commands.plan.html, accelscope.audit.recover."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from accelscope.plan.fleet import HOURS_PER_MONTH
from accelscope.testing import CliRunner, assert_one_line_error
from accelscope.testing.fleet import dumps_query_range, fleet

L4_PER_H = 0.8048  # g6.xlarge in the bundled catalog: one L4
PLAN = (
    "--model",
    "my-service",
    "--traffic",
    "peak=100qps",
    "--sla-p99",
    "100ms",
    "--here",
    "g6.xlarge",
)
PLAN += ("--capacity", "120qps", "--only", "g6.xlarge")


@pytest.fixture
def store(tmp_path: Path, cli: CliRunner) -> Path:
    export = tmp_path / "fleet.json"
    export.write_text(dumps_query_range(fleet(step_s=600.0)))
    db = tmp_path / "s.db"
    code, _, err = cli("audit", "--from", export, "--store", db)
    assert code == 0, err
    return db


def test_the_idle_l4_carries_the_traffic(store: Path, cli: CliRunner) -> None:
    code, out, err = cli("plan", *PLAN, "--fleet", "latest", "--store", store, "--json")
    assert code == 0, err
    found = json.loads(out)["fleet"]
    assert {c["family"] for c in found["classes"]} == {"A100", "L4"}
    (path,) = found["paths"]
    # 100 qps with 20 % headroom on 120 qps instances: one g6.xlarge every hour; the notebook's
    # idle L4 (all week) carries it, nothing is rented or bought
    assert path["option"] == "g6.xlarge" and path["capacity_source"] == "given"
    assert path["needed_gpus_by_hour"] == [1] * 24
    assert path["recovered_gpus_by_hour"] == [1.0] * 24
    assert path["rented_instances_by_hour"] == [0] * 24 and path["buy_instances"] == 0
    assert path["all_new_usd_per_month"] == pytest.approx(L4_PER_H * HOURS_PER_MONTH)
    assert path["recover_usd_per_month"] == 0.0
    code, out, err = cli("plan", *PLAN, "--fleet", "latest", "--store", store)
    assert code == 0, err
    assert "buy or recover: against audit run" in out
    assert "recover 24 GPU-hours a day of L4" in out
    report = store.parent / "plan.html"
    code, _, err = cli("plan", *PLAN, "--fleet", "latest", "--store", store, "--report", report)
    assert code == 0, err
    html = report.read_text(encoding="utf-8")
    assert '<section id="fleet">' in html and "Buy or recover: against audit run" in html
    assert "g6.xlarge (given)" in html and "idle GPU-h/day" in html


def test_bad_fleet_runs_are_one_line(store: Path, tmp_path: Path, cli: CliRunner) -> None:
    code, out, _ = cli("plan", *PLAN, "--store", store, "--json")  # stores a plan run
    plan_run = json.loads(out)["run_id"]
    code, _, err = cli("plan", *PLAN, "--fleet", plan_run, "--store", store)
    assert_one_line_error(code, err, "is a plan run, not an audit run")
    code, _, err = cli("plan", *PLAN, "--fleet", "nosuchrun", "--store", store)
    assert_one_line_error(code, err, "no run 'nosuchrun'")
    empty = tmp_path / "empty.db"
    code, _, err = cli("plan", *PLAN, "--store", empty)  # a store with a plan run only
    assert code == 0, err
    code, _, err = cli("plan", *PLAN, "--fleet", "latest", "--store", empty)
    assert_one_line_error(code, err, "holds no audit run")
    code, _, err = cli("plan", *PLAN, "--fleet", "latest", "--store", tmp_path / "none.db")
    assert_one_line_error(code, err, "no results store")
