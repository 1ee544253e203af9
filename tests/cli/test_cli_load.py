"""``accelscope load`` through the real CLI, in-process, on a tiny factory model (eager)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from accelscope.hardware.fingerprint import Environment
from accelscope.load import scenarios
from accelscope.spec import Precision, RunSpec
from accelscope.store.sqlite import ResultStore
from accelscope.testing import CliRunner, assert_one_line_error, fake_result

TINY = """\
import torch


def make():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
"""
INPUT = ("--input", "x:N,16:float32")
QUICK = ("--min-duration", "0.3s", "--min-queries", "200", "--threads", "1")
CONTRACT_KEYS = {
    "model",
    "label",
    "spec",
    "scenario",
    "sla_p99_s",
    "capacity_qps",
    "batching",
    "environment_fingerprint",
    "device",
    "valid",
}


@pytest.fixture
def tiny(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)
    (tmp_path / "tiny.py").write_text(TINY)
    return f"{tmp_path / 'tiny.py'}:make"


@pytest.mark.parametrize(
    ("extra", "mention"),
    [
        (["--scenario", "bursty"], "unknown scenario"),
        (["--sla-p99", "fast"], "fast"),
        (["--sla-p99", "-5ms"], "-5ms"),
        (["--rate", "-3"], "--rate"),
        (["--rate", "0"], "--rate"),
        (["--rate", "lots"], "--rate"),
        ([], "needs --rate"),
        (["--search"], "--search needs --sla-p99"),
        (["--sla-p99", "100ms", "--rate", "5", "--search"], "not both"),
        (["--scenario", "offline", "--rate", "5"], "server scenario"),
        (["--sla-p99", "100ms", "--query-timeout", "10ms"], "--query-timeout"),
        (["--rate", "5", "--min-queries", "0"], "min queries"),
        (["--rate", "5", "--burstiness-cv", "0"], "CV"),
        (["--rate", "5", "--batch", "0"], "batch"),
        (["--rate", "5", "--backend", "warp-drive"], "warp-drive"),
        (["--rate", "5", "--precision", "fp7"], "fp7"),
        (["--rate", "5", "--from-run", "nope"], "--from-run"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_writes_nothing(
    tiny: str, tmp_path: Path, cli: CliRunner, extra: list[str], mention: str
) -> None:
    store = tmp_path / "r.db"
    code, _out, err = cli("load", tiny, *INPUT, *QUICK, "--store", str(store), *extra)
    assert_one_line_error(code, err, mention)
    assert not store.exists()
    assert not (tmp_path / "cwd" / ".accelscope").exists()


def test_bad_config_file_is_one_line(tiny: str, tmp_path: Path, cli: CliRunner) -> None:
    config = tmp_path / "load.toml"
    config.write_text('[load]\nscenario = "server"\nwarp = 9\n')
    code, _out, err = cli("load", tiny, *INPUT, "--config", str(config))
    assert_one_line_error(code, err, "load.warp")
    config.write_text("[load]\nrate = 'fast'\n")
    code, _out, err = cli("load", tiny, *INPUT, "--config", str(config))
    assert_one_line_error(code, err, "load.rate")
    code, _out, err = cli("load", tiny, *INPUT, "--config", str(tmp_path / "no.toml"))
    assert_one_line_error(code, err, "no.toml")


@pytest.mark.slow
def test_server_search_stores_trials_and_the_capacity_contract(
    tiny: str, tmp_path: Path, cli: CliRunner
) -> None:
    store = tmp_path / "r.db"
    report = tmp_path / "load.html"
    args = [
        "load",
        tiny,
        *INPUT,
        *QUICK,
        "--sla-p99",
        "100ms",
        "--batch",
        "4",
        "--store",
        str(store),
        "--report",
        str(report),
        "--json",
    ]
    code, out, err = cli(*args)
    assert code == 0, err
    document = json.loads(out)
    capacity = document["capacity"]
    assert set(capacity) >= CONTRACT_KEYS
    assert capacity["scenario"] == "server" and capacity["sla_p99_s"] == 0.1
    assert capacity["capacity_qps"] > 0 and capacity["valid"] is True
    assert RunSpec.from_dict(capacity["spec"]).backend == "eager"
    assert capacity["device"] == "cpu"
    assert {p["batching"]["max_batch"] for p in capacity["policies"]} == {1, 2, 4}
    assert capacity["harness_floor"] == document["harness_floor"]
    assert capacity["harness_floor"]["latency"]["p50_s"] >= 0.0
    with ResultStore(store) as opened:
        run = opened.get_run(document["run_id"])
    assert run.kind == "load" and run.status == "complete"
    assert run.documents_of("capacity") == [capacity]
    trials = run.documents_of("load-trial")
    assert len(trials) == len(document["trials"]) >= 3
    assert any(t["meets_sla"] for t in trials)
    html = report.read_text()
    assert "Content-Security-Policy" in html and "chart-curve" in html
    code, out, err = cli("runs", "show", document["run_id"], "--store", str(store))
    assert code == 0, err
    assert "Capacity at p99" in out and "meets SLA" in out


def test_scenarios_print_their_headline(tiny: str, cli: CliRunner) -> None:
    base = ["load", tiny, *INPUT, *QUICK, "--no-store", "--report", "r.html"]
    code, out, err = cli(*base, "--scenario", "single-stream")
    assert code == 0, err
    assert "Single-stream p90" in out
    code, out, err = cli(*base, "--scenario", "offline", "--batch", "8")
    assert code == 0, err
    assert "Offline throughput" in out
    code, out, err = cli(*base, "--rate", "100", "--no-batching")
    assert code == 0, err
    assert "Server at 100.0 queries/s" in out


def test_from_run_serves_the_bench_selection(
    tiny: str, tmp_path: Path, environment: Environment, cli: CliRunner
) -> None:
    store = tmp_path / "r.db"
    spec = RunSpec(model=tiny, backend="eager", precision=Precision.FP32, batch_size=2, threads=1)
    result = dataclasses.replace(fake_result(environment, batch=2), spec=spec, accuracy=None)
    with ResultStore(store) as opened:
        run_id = opened.start_run("bench", tiny, "accelscope bench", environment, {})
        opened.add_result(run_id, result)
        opened.finish_run(run_id, "complete")
    args = [
        "load",
        "--from-run",
        "latest",
        *INPUT,
        "--rate",
        "50",
        "--min-duration",
        "0.2s",
        "--min-queries",
        "50",
        "--store",
        str(store),
        "--report",
        "r.html",
        "--json",
    ]
    code, out, err = cli(*args)
    assert code == 0, err
    document = json.loads(out)
    assert document["label"] == "eager/fp32/b2/t1"
    assert document["trials"][0]["batching"]["max_batch"] == 2
    code, _out, err = cli(
        *args[:3], "--rate", "5", "--store", str(store), "--from-run", document["run_id"]
    )
    assert_one_line_error(code, err, "not a bench run")
    code, _out, err = cli("load", "--from-run", "zzz", "--rate", "5", "--store", str(store))
    assert_one_line_error(code, err, "no run 'zzz'")


def test_ctrl_c_exits_130_and_leaves_an_interrupted_run(
    tiny: str, tmp_path: Path, cli: CliRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    from accelscope.commands.load import workflow

    real = scenarios.run_server
    calls: list[int] = []

    def interrupting(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(workflow, "run_server", interrupting)
    store = tmp_path / "r.db"
    args = [
        "load",
        tiny,
        *INPUT,
        *QUICK,
        "--sla-p99",
        "50ms",
        "--store",
        str(store),
        "--report",
        "r.html",
    ]
    code, _out, err = cli(*args)
    assert code == 130, err
    with ResultStore(store) as opened:
        run = opened.get_run("latest")
    assert run.status == "interrupted"
    assert len(run.documents_of("load-trial")) == 2
    assert run.documents_of("capacity") == []


FLAKY = """\
import torch


class Picky(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(16, 4)

    def forward(self, x):
        if x.shape[0] > 1:
            raise RuntimeError("batches above 1 are not supported")
        return self.linear(x)


def make():
    torch.manual_seed(0)
    return Picky()
"""


def test_a_model_failing_at_its_batch_size_is_one_line_exit_1(
    tmp_path: Path, cli: CliRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The warm-up batches at every prepared size run before any trial, so a model that cannot
    run its batch fails with one line and no half-made run in the store."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "picky.py").write_text(FLAKY)
    store = tmp_path / "r.db"
    args = [
        "load",
        f"{tmp_path / 'picky.py'}:make",
        *INPUT,
        *QUICK,
        "--sla-p99",
        "50ms",
        "--batch",
        "4",
        "--store",
        str(store),
        "--report",
        "r.html",
        "-q",
    ]
    code, _out, err = cli(*args)
    assert code == 1, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "failed a warm-up batch of 4" in lines[0], err
    assert "batches above 1 are not supported" in lines[0]
    assert not store.exists()
