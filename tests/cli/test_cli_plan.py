"""The plan command end to end on a store of hand-made roofline/load documents: JSON, terminal
(every projection labelled 'estimate'), the stored run, runs show, the HTML report, api mode."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from accelscope.commands.plan.view import capacity_cell
from accelscope.hardware.fingerprint import Environment
from accelscope.store.sqlite import ResultStore
from accelscope.testing import CliRunner, assert_one_line_error
from plan_helpers import capacity_payload, roofline_payload


def _store(tmp_path: Path, environment: Environment) -> Path:
    path = tmp_path / "r.db"
    with ResultStore(path) as store:
        for kind, doc_kind, payload in (
            ("roofline", "roofline", roofline_payload()),
            ("load", "capacity", capacity_payload()),
        ):
            run_id = store.start_run(kind, "resnet50", "test", environment, {})
            store.add_document(run_id, doc_kind, payload)
            store.finish_run(run_id, "complete")
    return path


def test_plan_from_the_store(tmp_path: Path, environment: Environment, cli: CliRunner) -> None:
    db = _store(tmp_path, environment)
    args = (
        "plan",
        "--model",
        "resnet50",
        "--traffic",
        "peak=300qps",
        "--sla-p99",
        "100ms",
        "--here",
        "c7i.large",
        "--min-instances",
        "2",
        "--store",
        db,
    )
    code, out, err = cli(*args, "--json")
    assert code == 0, err
    doc = json.loads(out)
    options = {o["name"]: o for o in doc["options"]}
    here = options["c7i.large"]
    assert here["capacity"]["basis"] == "measured" and here["capacity"]["qps_per_instance"] == 40
    assert here["instances_at_peak"] == 9  # ceil(300 * 1.2 / 40)
    projected = [o for o in doc["options"] if (o["capacity"] or {}).get("basis") == "projected"]
    assert len(projected) == len([o for o in doc["options"] if o["capacity"]]) - 1
    assert all(o["capacity"]["label"].startswith("estimate") for o in projected)
    assert doc["recommendation"]["choice"] == doc["options"][0]["name"]
    assert {"roofline run", "load run"} <= {s.rsplit(" ", 1)[0] for s in doc["sources"]}
    # the run and its report
    with ResultStore(db) as store:
        run = store.get_run(doc["run_id"])
    assert run.kind == "plan" and run.documents_of("plan")[0]["options"] == doc["options"]
    html = Path(doc["report"]).read_text(encoding="utf-8")
    assert html.count('class="estimate">estimate<') == len(projected)
    # terminal: every projected capacity printed with its label
    code, out, _ = cli(*args, "--no-store")
    assert code == 0 and "recommendation:" in out
    flat = re.sub(r"\s+", " ", out)
    for option in projected:
        if option["feasible"]:
            cell = capacity_cell(option["capacity"])
            rate = cell.split(" qps")[0] + " qps"  # a long cell wraps inside its column
            assert "(estimate" in cell and rate in flat, cell
    assert "misses SLA (estimate)" in flat or all(o["feasible"] for o in projected)
    code, shown, _ = cli("runs", "show", doc["run_id"], "--store", db)
    assert code == 0 and "(estimate" in re.sub(r"\s+", " ", shown)


def test_bad_inputs_leave_no_store(tmp_path: Path, cli: CliRunner) -> None:
    db = tmp_path / "new.db"
    cases = [
        (("--traffic", "peak=3qps", "--sla-p99", "100ms"), "--model NAME"),
        (("--model", "m", "--sla-p99", "100ms"), "--traffic"),
        (("--model", "m", "--traffic", "peak=3qps"), "--sla-p99"),
        (("--model", "m", "--traffic", "peak=3qps", "--sla-p99", "fast"), "duration"),
        (
            ("--model", "m", "--traffic", "peak=3qps", "--sla-p99", "1s", "--headroom", "-5%"),
            "--headroom",
        ),
        (
            ("--model", "m", "--traffic", "peak=3qps", "--sla-p99", "1s", "--here", "x1.big"),
            "no instance type",
        ),
        (("--model", "m", "--traffic", "peak=3qps", "--sla-p99", "1s"), "nothing known"),
        (
            (
                "--model",
                "m",
                "--traffic",
                "peak=3qps",
                "--sla-p99",
                "1s",
                "--profile",
                tmp_path / "missing.json",
            ),
            "no such file",
        ),
    ]
    for args, expected in cases:
        code, out, err = cli("plan", *args, "--store", db)
        assert out == "", args
        assert_one_line_error(code, err, expected)
    assert not db.exists()


def test_profile_file_and_given_capacity(tmp_path: Path, cli: CliRunner) -> None:
    profile = tmp_path / "roofline.json"
    profile.write_text(json.dumps(roofline_payload()), encoding="utf-8")
    code, out, err = cli(
        "plan",
        "--model",
        "resnet50",
        "--traffic",
        "peak=50qps",
        "--sla-p99",
        "200ms",
        "--profile",
        profile,
        "--capacity",
        "30qps",
        "--only",
        "g6.xlarge,c7i.2xlarge",
        "--store",
        tmp_path / "r.db",
        "--no-store",
        "--json",
    )
    assert code == 0, err
    doc = json.loads(out)
    names = [o["name"] for o in doc["options"]]
    assert sorted(names) == ["c7i.2xlarge", "g6.xlarge", "this machine"]
    machine = next(o for o in doc["options"] if o["name"] == "this machine")
    assert machine["capacity"]["basis"] == "given" and machine["monthly_autoscaled"] is None
    assert not (tmp_path / "r.db").exists()


def test_api_mode(cli: CliRunner) -> None:
    code, out, err = cli(
        "plan",
        "api",
        "--tokens-per-month",
        "2B",
        "--input-price",
        "$3",
        "--output-price",
        "15",
        "--instance",
        "g6e.xlarge",
        "--throughput",
        "2000",
        "--json",
    )
    assert code == 0, err
    doc = json.loads(out)
    blended = 0.75 * 3 + 0.25 * 15
    assert doc["api_monthly"] == pytest.approx(2e9 / 1e6 * blended)
    assert doc["own_monthly"] == pytest.approx(1.861 * 730)
    assert doc["break_even_tokens_per_month"] == pytest.approx(1.861 * 730 / blended * 1e6)
    assert doc["cheaper"] == "own"
    code, out, _ = cli(
        "plan",
        "api",
        "--tokens-per-month",
        "1M",
        "--input-price",
        "0.1",
        "--output-price",
        "0.1",
        "--instance",
        "p5.48xlarge",
        "--throughput",
        "100",
    )
    assert code == 0 and "no break-even" in out
    code, _, err = cli(
        "plan",
        "api",
        "--tokens-per-month",
        "lots",
        "--input-price",
        "1",
        "--output-price",
        "1",
        "--instance",
        "g6.xlarge",
        "--throughput",
        "10",
    )
    assert_one_line_error(code, err, "--tokens-per-month")
