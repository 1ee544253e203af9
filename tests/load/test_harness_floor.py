"""The harness floor: measured with a null system under test on the real-time path at the start
of every load run, stored with it, and shown in the terminal, the JSON and the HTML report;
runs stored before it existed still read and render. Bounds are sanity bounds, not speed.

Covers: accelscope.load.floor, accelscope.commands.load.workflow, accelscope.commands.load.view,
accelscope.commands.load.html, accelscope.commands.load.verdict."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from accelscope.commands.load.html import render_load_report
from accelscope.commands.load.verdict import harness_floor_text
from accelscope.commands.load.view import load_view
from accelscope.commands.load.workflow import capacity_document, floor_notes, summary_document
from accelscope.hardware.fingerprint import Environment
from accelscope.load.batcher import NO_BATCHING
from accelscope.load.clock import SimClock
from accelscope.load.executor import SimulatedExecutor
from accelscope.load.fakes import FixedService
from accelscope.load.floor import FLOOR_QUERIES, HarnessFloor, measure_harness_floor
from accelscope.load.scenarios import run_server
from accelscope.load.summary import Distribution, Scenario, TrialSettings
from accelscope.serialise import dump, load
from accelscope.spec import Precision, RunSpec
from accelscope.store.sqlite import ResultStore
from accelscope.testing import CliRunner

TINY = """\
import torch


def make():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
"""
ARGS = (
    "--input",
    "x:N,16:float32",
    "--min-duration",
    "0.2s",
    "--min-queries",
    "60",
    "--threads",
    "1",
    "--rate",
    "100",
    "--no-batching",
)
SETTINGS = TrialSettings(min_queries=600, min_duration_s=1.0, seed=1, query_timeout_s=1.0)


def _floor(p50_s: float = 60e-6, p99_s: float = 210e-6) -> HarnessFloor:
    latency = Distribution(
        count=400, mean_s=70e-6, p50_s=p50_s, p90_s=100e-6, p99_s=p99_s, max_s=400e-6
    )
    return HarnessFloor(
        queries=400,
        rate_per_s=500.0,
        instances=1,
        latency=latency,
        lag=Distribution(
            count=400, mean_s=10e-6, p50_s=5e-6, p90_s=20e-6, p99_s=50e-6, max_s=90e-6
        ),
        duration_s=0.8,
    )


def test_the_floor_is_measured_on_the_real_path_with_a_null_sut() -> None:
    floor = measure_harness_floor(queries=150, rate_per_s=1000.0)
    assert floor.queries == 150 and floor.instances == 1 and floor.rate_per_s == 1000.0
    latency = floor.latency
    assert latency.count == 150
    assert 0.0 <= latency.p50_s <= latency.p90_s <= latency.p99_s <= latency.max_s
    assert latency.p50_s < 0.5  # a sanity bound: a null query takes microseconds, not seconds
    assert floor.lag.count == 150 and floor.lag.p50_s >= 0.0
    assert floor.duration_s > 0.0
    assert load(HarnessFloor, json.loads(json.dumps(dump(floor)))) == floor
    two = measure_harness_floor(2, queries=60, rate_per_s=1000.0)
    assert two.instances == 2 and two.rate_per_s == 2000.0 and two.latency.count == 60


def test_the_floor_sentence() -> None:
    text = harness_floor_text(dump(_floor()))
    assert text == (
        "harness floor: p50 0.060 ms, p99 0.210 ms per query (null system under test, 400 "
        "queries at 500 q/s) — service times well above this are measured faithfully"
    )
    slow = harness_floor_text(dump(_floor(p50_s=0.0012, p99_s=0.0035)))
    assert slow is not None and "p50 1.20 ms, p99 3.50 ms" in slow
    assert harness_floor_text(None) is None
    assert harness_floor_text({}) is None


def test_a_note_when_the_service_time_is_near_the_floor() -> None:
    executor = SimulatedExecutor(FixedService(0.0004), SimClock())
    fast = run_server(executor, 100.0, NO_BATCHING, SETTINGS)
    (note,) = floor_notes(_floor(), [fast])  # 0.06 ms is 15 % of 0.4 ms
    assert "0.060 ms" in note and "0.400 ms" in note
    slow = run_server(
        SimulatedExecutor(FixedService(0.005), SimClock()), 100.0, NO_BATCHING, SETTINGS
    )
    assert floor_notes(_floor(), [slow]) == []
    assert floor_notes(None, [fast]) == []


def _documents(environment: Environment, floor: HarnessFloor | None) -> dict[str, Any]:
    executor = SimulatedExecutor(FixedService(0.004), SimClock())
    trials = [run_server(executor, rate, NO_BATCHING, SETTINGS, 0.05) for rate in (50.0, 150.0)]
    spec = RunSpec(model="m", backend="eager", precision=Precision.FP32, batch_size=1, threads=1)
    capacity = capacity_document("m", spec, 0.05, environment, trials, None, floor)
    return {"trials": [t.to_dict() for t in trials], "capacity": capacity}


def test_stored_documents_carry_the_floor_and_old_ones_still_render(
    environment: Environment,
) -> None:
    new = _documents(environment, _floor())
    assert new["capacity"]["harness_floor"] == dump(_floor())
    summary = summary_document(
        Scenario.SERVER,
        RunSpec(model="m", backend="eager", precision=Precision.FP32, batch_size=1, threads=1),
        _floor(),
    )
    assert summary["harness_floor"]["latency"]["p50_s"] == 60e-6
    old = _documents(environment, None)
    del old["capacity"]["harness_floor"]  # as stored before the field existed
    for docs, shown in ((new, True), (old, False)):
        html = render_load_report(
            title="t",
            model="m",
            label="l",
            scenario="server",
            sla_p99_s=0.05,
            trials=docs["trials"],
            capacity=docs["capacity"],
        )
        assert ("harness floor: p50 0.060 ms" in html) is shown
        console = Console(width=200, record=True)
        console.print(
            load_view(
                title="t",
                scenario="server",
                sla_p99_s=0.05,
                trials=docs["trials"],
                capacity=docs["capacity"],
            )
        )
        text = console.export_text()
        assert "Capacity at p99" in text
        assert ("harness floor: p50 0.060 ms, p99 0.210 ms per query" in text) is shown


def test_runs_show_reads_an_old_load_run_without_a_floor(
    environment: Environment, tmp_path: Path, cli: CliRunner
) -> None:
    store = tmp_path / "r.db"
    docs = _documents(environment, None)
    del docs["capacity"]["harness_floor"]
    with ResultStore(store) as opened:
        run_id = opened.start_run(
            "load", "m", "accelscope load m", environment, {"scenario": "server", "sla_p99_s": 0.05}
        )
        for trial in docs["trials"]:
            opened.add_document(run_id, "load-trial", trial)
        opened.add_document(run_id, "capacity", docs["capacity"])
        opened.finish_run(run_id, "complete")
    code, out, _ = cli("runs", "show", run_id, "--store", store)
    assert code == 0
    assert "Capacity at p99" in out and "harness floor" not in out


@pytest.fixture
def tiny(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)
    (tmp_path / "tiny.py").write_text(TINY)
    return f"{tmp_path / 'tiny.py'}:make"


def test_every_load_run_reports_its_floor(tiny: str, tmp_path: Path, cli: CliRunner) -> None:
    store, report = tmp_path / "r.db", tmp_path / "load.html"
    common = ["load", tiny, *ARGS, "--store", str(store), "--report", str(report)]
    code, out, _ = cli(*common, "--json")
    assert code == 0
    document = json.loads(out)
    floor = document["harness_floor"]
    assert floor["queries"] == FLOOR_QUERIES and floor["instances"] == 1
    latency = floor["latency"]
    assert 0.0 <= latency["p50_s"] <= latency["p99_s"] < 1.0
    assert "harness floor: p50" in report.read_text()
    with ResultStore(store) as opened:
        run = opened.get_run(document["run_id"])
    (summary,) = run.documents_of("load-summary")
    assert summary["harness_floor"] == floor and summary["scenario"] == "server"
    code, out, _ = cli("runs", "show", document["run_id"], "--store", store)
    assert code == 0 and "harness floor: p50" in out
    code, out, err = cli(*common)
    assert code == 0
    assert "harness floor: p50" in out  # under the verdict
    assert "harness floor: p50" in err  # as it is measured, before the trials
    assert "per query (null system under test, 400 queries at 500 q/s)" in out
