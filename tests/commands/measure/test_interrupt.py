"""Ctrl-C in the middle: exit 130, one line, what was measured is kept, the store stays sound."""

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
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        if x.shape[0] == 2 and self.calls > 40:
            raise KeyboardInterrupt  # what Ctrl-C does inside a forward
        return self.linear(x)

def make():
    return InterruptAfter()
"""


def test_interrupt_keeps_finished_results(tmp_path: Path) -> None:
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
    deadline = time.monotonic() + 120
    # wait until the first configuration is committed, then interrupt the second one
    while time.monotonic() < deadline:
        if store_path.exists():
            try:
                count = sqlite3.connect(store_path).execute("SELECT COUNT(*) FROM results")
                if count.fetchone()[0] >= 1:
                    break
            except sqlite3.Error:
                pass
        if process.poll() is not None:
            break
        time.sleep(0.2)
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
