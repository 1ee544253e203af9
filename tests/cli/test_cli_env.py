"""``accelscope env --probe``: the measured precision probes beside the ISA table, from the
per-machine cache next to the store (scripted here, so the test holds on any CPU)."""

from __future__ import annotations

import json
from pathlib import Path

from accelscope.engine.probe import cache_path, probe_pairs, probe_runtime_version
from accelscope.hardware.fingerprint import collect_environment
from accelscope.measurement.threads import available_cores
from accelscope.serialise import dump
from accelscope.spec import Precision
from accelscope.testing import CliRunner, fake_probe_table


def test_env_probe_reads_the_cache_and_says_what_decides(tmp_path: Path, cli: CliRunner) -> None:
    env = collect_environment()
    speedups = {
        (runtime, precision): 0.4 if precision is Precision.BF16 else 1.7
        for runtime in ("torch", "onnxruntime", "openvino")
        if probe_runtime_version(runtime)
        for precision in probe_pairs(runtime)
    }
    table = fake_probe_table(env, speedups, threads=available_cores())
    cached = cache_path(tmp_path / "probes", env.fingerprint(), available_cores())
    cached.parent.mkdir()
    cached.write_text(json.dumps(dump(table)))
    code, out, _ = cli("env", "--probe", "--store", tmp_path / "r.db")
    assert code == 0
    assert "precision fast paths" in out and "measured precision probes" in out
    assert "0.40x fp32" in out and "1.70x fp32" in out
    code, out, _ = cli("env", "--probe", "--json", "--store", tmp_path / "r.db")
    assert code == 0
    document = json.loads(out)
    kept = {(v["runtime"], v["precision"]) for v in document["probes"]["verdicts"]}
    assert kept == {(r, p.value) for r, p in speedups}
    assert not (tmp_path / "r.db").exists()  # env writes no store
