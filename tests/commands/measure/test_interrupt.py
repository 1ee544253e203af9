"""Ctrl-C in the middle: exit 130, one line, what was measured is kept, the store stays sound.

Covers: accelscope.commands.measure.workflow, accelscope.commands._lifecycle,
accelscope.store.sqlite."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from accelscope.commands.measure.workflow import MeasureRequest, measure
from accelscope.errors import InterruptedRunError
from accelscope.measurement.timer import TimerConfig
from accelscope.spec import TensorSpec
from accelscope.store.sqlite import ResultStore
from accelscope.testing import restore_default_sigint

FACTORY = """
import torch

class InterruptAfter(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(8, 8)
        self.batch2_calls = 0

    def forward(self, x):
        if x.shape[0] == 2:
            self.batch2_calls += 1
            if self.batch2_calls == 5:  # batch 1 is done; batch 2 is being measured
                raise KeyboardInterrupt  # what Ctrl-C does inside a forward
        return self.linear(x)

def make():
    return InterruptAfter()
"""


def test_interrupt_keeps_finished_results(tmp_path: Path) -> None:
    # the fault: KeyboardInterrupt in batch 2's 5th forward (counted, not timed)
    source = tmp_path / "model.py"
    source.write_text(FACTORY)
    store_path = tmp_path / "r.db"
    request = MeasureRequest(
        model=f"{source}:make",
        batch_sizes=(1, 2),
        inputs=(TensorSpec(name="x", shape=("N", 8)),),
        timer=TimerConfig(budget_s=0.2, warmup_min_s=0.0, max_samples=20),
        threads=1,
    )
    with pytest.raises(InterruptedRunError, match="1 result"):
        measure(request, store_path=store_path)
    with ResultStore(store_path) as store:
        run = store.get_run("latest")
    assert run.status == "interrupted"
    assert [r.spec.batch_size for r in run.results] == [1]


def _stored(store_path: Path) -> int:
    """Results committed to the store so far (0 before its tables exist)."""
    if not store_path.exists():
        return 0
    try:
        with contextlib.closing(sqlite3.connect(store_path)) as db:
            return int(db.execute("SELECT COUNT(*) FROM results").fetchone()[0])
    except sqlite3.Error:
        return 0


@pytest.mark.slow
def test_sigint_to_the_real_command(tmp_path: Path) -> None:
    store_path = tmp_path / "r.db"
    command = [
        sys.executable,
        "-m",
        "accelscope.cli",
        "measure",
        "digits-cnn",
        "--batch",
        "1,2",
        "--budget",
        "8s",
        "--target-ci",
        "0.0001%",
        "--store",
        str(store_path),
    ]
    process = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=restore_default_sigint,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    # the fault: SIGINT once batch 1's result is committed (batch 2 then measures for its 8 s)
    deadline = time.monotonic() + 120
    while _stored(store_path) < 1 and process.poll() is None:
        assert time.monotonic() < deadline, "no result stored within 120 s"
        time.sleep(0.2)
    assert process.poll() is None, "the command ended before it could be interrupted"
    assert _stored(store_path) == 1  # batch 1 is stored, batch 2 is being measured
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 130, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert lines == [lines[-1]] and "interrupted" in lines[-1]
    assert "Traceback" not in err
    show = ["runs", "show", "latest", "--store", str(store_path), "--json"]
    listing = subprocess.run(
        [sys.executable, "-m", "accelscope.cli", *show], capture_output=True, text=True, check=True
    )
    document = json.loads(listing.stdout)
    assert document["status"] == "interrupted"
    assert [r["spec"]["batch_size"] for r in document["results"]] == [1]
