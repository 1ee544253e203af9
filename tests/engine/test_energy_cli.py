"""measure on this machine's CPU: the results table has a J/item column that says "n/m", the
reason is said once under it, and the JSON result carries the figure with its reason.

Covers: accelscope.commands.measure.workflow, accelscope.engine.energy,
accelscope.hardware.energy."""

from __future__ import annotations

import json

from accelscope.testing import CliRunner


def test_measure_shows_energy_not_measured_with_why(cli: CliRunner) -> None:
    args = ("measure", "digits-cnn", "--batch", "4", "--budget", "0.2s", "--no-store")
    code, out, err = cli(*args)
    assert code == 0, err
    flat = " ".join(out.split())
    assert "J/item" in flat and "n/m" in flat
    assert "energy: not measured: no energy counter is read for CPU runs" in flat
    code, out, err = cli(*args, "--json")
    assert code == 0, err
    (result,) = json.loads(out)["results"]
    energy = result["energy"]
    assert energy["energy_j"] is None and energy["joules_per_item"] is None
    assert energy["reason"].startswith("no energy counter is read for CPU runs")
