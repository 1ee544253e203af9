"""The GPU doctor archetypes (examples/doctor/gpu/) are real programs: each runs a few steps on
the CPU at ``--small`` sizes (their verdicts are claimed on a GPU, where the validation runs
them live and records their traces), and the trace recorder the validation uses turns an
unmodified script into a gzipped Kineto trace with one ``ProfilerStep#N`` span per optimizer
step. No accelscope code runs here: these are the inputs of the doctor's GPU validation, the
programs whose verdicts the rules must name and the traces the Kineto reader reads.

Covers: accelscope.doctor.rules, accelscope.doctor.kineto."""

from __future__ import annotations

import gzip
import json
import runpy
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ARCHETYPES = sorted(
    p for p in (ROOT / "examples" / "doctor" / "gpu").glob("*.py") if not p.name.startswith("_")
)


def test_there_are_ten_archetypes() -> None:
    assert len(ARCHETYPES) >= 10, [p.name for p in ARCHETYPES]


@pytest.mark.parametrize("script", ARCHETYPES, ids=lambda p: p.stem)
def test_each_archetype_runs_on_the_cpu(
    script: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys, "argv", [str(script), "--device", "cpu", "--small", "--steps", "2"])
    monkeypatch.syspath_prepend(str(script.parent))
    runpy.run_path(str(script), run_name="__main__")
    doc = " ".join(script.read_text().split('"""')[1].lower().split())
    assert "expected verdict" in doc  # each one says what doctor must name


def test_the_recorder_writes_profiler_steps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks" / "gpu"))
    from record_trace import record  # type: ignore[import-not-found]

    out = tmp_path / "trace.json.gz"
    script = ROOT / "examples" / "doctor" / "gpu" / "launch_bound.py"
    monkeypatch.syspath_prepend(str(script.parent))
    steps = record(out, script, ["--device", "cpu", "--small", "--steps", "50"], wait=1, active=2)
    assert steps == 4  # 1 skipped, 1 warm-up, 2 recorded: the script ended there, not at 50
    events = json.loads(gzip.decompress(out.read_bytes()))["traceEvents"]
    spans = [e["name"] for e in events if str(e.get("name", "")).startswith("ProfilerStep#")]
    assert len(spans) == 2
    assert any(e.get("cat") == "cpu_op" and e.get("name") == "aten::linear" for e in events)
