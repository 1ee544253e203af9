"""Sweep isolation: crashes, hangs and MemoryError become recorded failures; kill -9 + --resume.

Covers: accelscope.sweep.executor, accelscope.sweep.worker, accelscope.sweep.driver,
accelscope.commands.bench.workflow, accelscope.testing.faults."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from accelscope.commands.bench.workflow import BenchRequest, bench
from accelscope.engine.probe import cache_path
from accelscope.hardware.fingerprint import collect_environment
from accelscope.result import Cause, Status
from accelscope.serialise import dump
from accelscope.spec import Precision, TensorSpec
from accelscope.store.sqlite import ResultStore
from accelscope.testing import fake_probe_table, restore_default_sigint

FACTORY = """
import torch

def make():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
"""
INPUTS = (TensorSpec(name="x", shape=("N", 32)),)


@pytest.fixture
def factory(tmp_path: Path) -> str:
    path = tmp_path / "tiny.py"
    path.write_text(FACTORY)
    return f"{path}:make"


@pytest.mark.slow
def test_segfault_hang_and_memoryerror_are_recorded(tmp_path: Path, factory: str) -> None:
    # the faults: backends that crash, hang or raise MemoryError when they run (scripted)
    request = BenchRequest(
        model=factory,
        backends=("eager", "fault-segv", "fault-hang", "fault-memory"),
        precisions=(Precision.FP32,),
        batch_sizes=(4,),
        threads=(1,),
        inputs=INPUTS,
        plugins=("accelscope.testing.faults",),
        measure_budget_s=0.3,
        timeout_s=20.0,
        accuracy_samples=16,
        report_path=tmp_path / "report.html",
    )
    outcome = bench(request, store_path=tmp_path / "r.db")
    by_backend = {r.spec.backend: r for r in outcome.results}
    assert by_backend["eager"].status is Status.OK
    assert by_backend["fault-segv"].status is Status.FAILED
    assert "SIGSEGV" in by_backend["fault-segv"].status_reason
    assert by_backend["fault-hang"].status is Status.FAILED
    assert by_backend["fault-hang"].status_reason.startswith("timeout")
    assert by_backend["fault-memory"].status is Status.FAILED
    assert "out of memory" in by_backend["fault-memory"].status_reason
    # each decided where it happened: the executor saw the crash and the timeout, the worker
    # the out-of-memory error
    causes = {backend: result.cause for backend, result in by_backend.items()}
    assert causes == {
        "eager": None,
        "fault-segv": Cause.CRASHED,
        "fault-hang": Cause.TIMEOUT,
        "fault-memory": Cause.OUT_OF_MEMORY,
    }
    assert outcome.selection.best_key == by_backend["eager"].spec.key
    with ResultStore(tmp_path / "r.db") as store:
        run = store.get_run("latest")
    assert run.status == "complete" and run.result_count == 4
    assert (tmp_path / "report.html").is_file()


def _count(path: Path) -> int:
    try:
        with sqlite3.connect(path) as db:
            return int(db.execute("SELECT COUNT(*) FROM results WHERE status='ok'").fetchone()[0])
    except sqlite3.Error:
        return 0


@pytest.mark.slow
def test_kill_9_mid_sweep_then_resume(tmp_path: Path, factory: str) -> None:
    store = tmp_path / "r.db"
    args = [
        sys.executable,
        "-m",
        "accelscope.cli",
        "bench",
        factory,
        "--input",
        "x:N,32",
        "--backend",
        "eager",
        "--precision",
        "fp32,bf16",
        "--batch",
        "1,2",
        "--threads",
        "1",
        "--measure-budget",
        "1s",
        "--accuracy-samples",
        "16",
        "--confirm-rounds",
        "0",
        "--store",
        str(store),
        "--report",
        str(tmp_path / "r.html"),
    ]
    # what the bf16 probe measured is scripted (the cache next to the store): 1.5x fp32, so all
    # four configurations are measured on any CPU. A probe measured here, beside another busy
    # process, could read bf16 slower: bf16 was then skipped and the sweep ended with its second
    # result, before the kill.
    env = collect_environment()
    cached = cache_path(tmp_path / "probes", env.fingerprint(), 1)
    cached.parent.mkdir()
    table = fake_probe_table(env, {("torch", Precision.BF16): 1.5}, threads=1)
    cached.write_text(json.dumps(dump(table)))
    first = subprocess.Popen([*args, "--quiet"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    # the fault: kill -9 once two of the four configurations are stored (a third measures)
    deadline = time.monotonic() + 180
    while _count(store) < 2 and first.poll() is None:
        assert time.monotonic() < deadline, "two results were not stored within 180 s"
        time.sleep(0.2)
    assert first.poll() is None, "the sweep ended before it could be killed"
    os.kill(first.pid, signal.SIGKILL)
    first.wait(timeout=30)
    with ResultStore(store) as opened:  # opens clean after a kill -9
        interrupted = opened.get_run("latest")
        done_before = {r.spec.key: r.created_at for r in interrupted.results}
    assert interrupted.status == "running" and len(done_before) >= 2
    integrity = sqlite3.connect(store).execute("PRAGMA integrity_check").fetchone()[0]
    assert integrity == "ok"
    second = subprocess.run(
        [*args, "--resume", "--json"], capture_output=True, text=True, timeout=300
    )
    assert second.returncode == 0, second.stderr
    document = json.loads(second.stdout)
    assert document["run_id"] == interrupted.id
    with ResultStore(store) as opened:
        resumed = opened.get_run(interrupted.id)
    assert resumed.status == "complete"
    keys = [r.spec.key for r in resumed.results]
    assert len(keys) == len(set(keys)) == 4  # every config exactly once: none measured again
    for result in resumed.results:
        if result.spec.key in done_before:
            assert result.created_at == done_before[result.spec.key]


@pytest.mark.slow
def test_out_of_memory_ends_the_batch_axis_not_the_sweep(tmp_path: Path, factory: str) -> None:
    # the fault: a backend that raises MemoryError from batch 4 up (scripted)
    request = BenchRequest(
        model=factory,
        backends=("eager", "fault-oom-big"),
        precisions=(Precision.FP32,),
        batch_sizes=(2, 4, 8),
        threads=(1,),
        inputs=INPUTS,
        plugins=("accelscope.testing.faults",),
        measure_budget_s=0.3,
        accuracy_samples=16,
        report_path=tmp_path / "report.html",
    )
    outcome = bench(request, store_path=None)
    status = {r.spec.label(): (r.status, r.status_reason) for r in outcome.results}
    causes = {r.spec.label(): r.cause for r in outcome.results}
    assert causes["fault-oom-big/fp32/b4/t1"] is causes["fault-oom-big/fp32/b8/t1"]
    assert causes["fault-oom-big/fp32/b4/t1"] is Cause.OUT_OF_MEMORY
    assert status["fault-oom-big/fp32/b2/t1"][0] is Status.OK
    assert status["fault-oom-big/fp32/b4/t1"] == (Status.FAILED, "out of memory (MemoryError)")
    assert status["fault-oom-big/fp32/b8/t1"][0] is Status.SKIPPED
    assert "batch 4 already ran out of memory" in status["fault-oom-big/fp32/b8/t1"][1]
    assert all(status[f"eager/fp32/b{b}/t1"][0] is Status.OK for b in (2, 4, 8))


@pytest.mark.slow
def test_ctrl_c_stops_a_sweep_cleanly(tmp_path: Path, factory: str) -> None:
    store = tmp_path / "r.db"
    args = [
        sys.executable,
        "-m",
        "accelscope.cli",
        "bench",
        factory,
        "--input",
        "x:N,32",
        "--backend",
        "eager",
        "--precision",
        "fp32,bf16",
        "--batch",
        "1,2,4,8",
        "--threads",
        "1",
        "--measure-budget",
        "2s",
        "--accuracy-samples",
        "16",
        "--store",
        str(store),
        "--report",
        str(tmp_path / "r.html"),
        "--quiet",
    ]
    process = subprocess.Popen(
        args,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=restore_default_sigint,
    )
    # the fault: SIGINT once the first of the eight configurations is stored
    deadline = time.monotonic() + 180
    while _count(store) < 1 and process.poll() is None:
        assert time.monotonic() < deadline, "no result was stored within 180 s"
        time.sleep(0.2)
    assert process.poll() is None, "the sweep ended before it could be interrupted"
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 130, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "interrupted" in lines[0] and "--resume" in lines[0]
    with ResultStore(store) as opened:
        run = opened.get_run("latest")
    assert run.status == "interrupted" and 1 <= run.result_count < 8
