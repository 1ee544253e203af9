"""benchmarks/gpu/bench_sweep.py without a GPU: the dry run plans ResNet-50's default GPU sweep on
a fake H100, and the step turns a ``bench --json`` document into one row per configuration with
its two throughputs and compile time.

Covers: accelscope.commands.bench.workflow, accelscope.sweep.gpu_default."""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

PATH = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu" / "bench_sweep.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpu_bench_sweep", PATH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_bench_sweep"] = module  # dataclasses resolve their module by name
    spec.loader.exec_module(module)
    return module


bs = _load()


def test_the_dry_run_plans_the_rows_the_gpu_run_measures() -> None:
    plan = bs.dry_run(bs.SWEEPS[0])
    assert plan["gpu"] == "NVIDIA H100 80GB HBM3"
    by_label = {c["label"]: c for c in plan["configurations"]}
    assert by_label["eager/fp32/b256/t1/inputs=pinned"]["runs"]  # 256 fits in 80 GB
    bf16 = "eager/bf16/b256/t1/channels_last=true/cudnn_benchmark=true/weights=cast"
    assert "eager/fp32/b256/t1" in by_label
    assert by_label[bf16]["runs"]
    fp8 = [c for label, c in by_label.items() if label.startswith("compile/fp8/")]
    assert fp8 and all("not Linear-heavy" in c["skip_reason"] for c in fp8)
    assert {label.split("/")[2] for label in by_label} == {"b256"}  # the first case's batch


@dataclass
class _Command:
    doc: dict[str, Any]
    ok: bool = True

    def json(self) -> Any:
        return self.doc

    def why(self) -> str:
        return "exit 1"


@dataclass
class _Outcome:
    step: str
    status: str
    summary: str = ""
    note: str = ""
    figures: dict[str, Any] = field(default_factory=dict)
    tables: list[Any] = field(default_factory=list)
    commands: list[str] = field(default_factory=list)


@dataclass
class _Run:
    doc: dict[str, Any]
    gpu: bool = True
    store: str = "/tmp/r.db"
    argv: list[str] = field(default_factory=list)

    def cli(self, *args: str, timeout_s: float, label: str) -> _Command:
        self.argv = list(args)
        return _Command(self.doc)

    def record_command(self, outcome: _Outcome, result: _Command) -> None:
        outcome.commands.append(" ".join(self.argv))


def _result(backend: str, rate: float, pinned: bool, prepare_s: float) -> dict[str, Any]:
    options = [["weights", "cast"], *([["inputs", "pinned"]] if pinned else [])]
    return {
        "status": "ok",
        "status_reason": "",
        "prepare_s": prepare_s,
        "spec": {"backend": backend, "precision": "bf16", "batch_size": 256, "options": options},
        "measurement": {"samples_s": [256 / rate] * 3, "items_per_call": 256},
    }


def test_the_step_pairs_each_row_with_its_copy_twin() -> None:
    standing = {
        "best": "compile/bf16/b256/t1",
        "best_items_per_s": 30000.0,
        "records": [
            {
                "benchmark": "MLPerf Inference v4.0, closed division, datacenter",
                "scenario": "Offline",
                "items_per_s": 88714.3,
                "share": 30000.0 / 88714.3,
            }
        ],
        "floor_items_per_s": 120000.0,
        "floor_share": 0.25,
        "floor_derivation": "d",
    }
    doc = {
        "verdict": "compile bf16 wins",
        "best": "k",
        "standing": standing,
        "results": [
            _result("eager", 8000.0, False, 0.5),
            _result("eager", 6000.0, True, 0.5),
            _result("compile", 30000.0, False, 55.0),
        ],
    }
    run = _Run(doc)
    case = bs.SWEEPS[0]
    out = bs.bench_sweep_step(run, 300.0, case, _Outcome, lambda *a: a)
    assert run.argv[:6] == ["bench", "resnet50", "--device", "cuda", "--batch", "256"]
    assert "--json" in run.argv and out.status == "ok"
    [(_title, _columns, rows)] = out.tables
    assert rows == [
        ["eager/bf16/b256/weights=cast", "8,000", "6,000", "—", "ok"],
        ["compile/bf16/b256/weights=cast", "30,000", "—", "55 s", "ok"],
    ]
    assert out.figures["rows"]["compile/bf16/b256/weights=cast"]["compile_s"] == 55.0
    assert out.summary == (
        "resnet50: best compile/bf16/b256/t1 30,000/s; 34% of MLPerf Inference v4.0 Offline "
        "(88,714/s); 25% of the roofline floor (120,000/s)"
    )
    assert out.note == "compile bf16 wins"
