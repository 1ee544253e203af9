"""A GPU bench's two throughputs per row (inputs on the device; the host copy included), its best
figure against the published records and the roofline floor, and ``bench --dry-run`` on a fake
H100: in the table, the report and the catalog the records come from.

Covers: accelscope.commands.bench.standing, accelscope.commands.bench.copies,
accelscope.commands.bench.view, accelscope.commands.bench.html, accelscope.plan.records."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from torch import nn

from accelscope.commands.bench.copies import copy_pairs
from accelscope.commands.bench.html import render_bench_report
from accelscope.commands.bench.standing import best_resident, floor_for, standing
from accelscope.commands.bench.view import bench_view
from accelscope.errors import BadInputError
from accelscope.hardware.fingerprint import Environment, collect_environment
from accelscope.measurement.record import Measurement
from accelscope.models.base import LoadedModel, ModelFormat, Task
from accelscope.plan.records import load_records, records_for
from accelscope.result import Result, Status
from accelscope.spec import Device, Precision, RunSpec, TensorSpec
from accelscope.sweep.gpu_default import PINNED
from accelscope.sweep.select import select
from accelscope.testing.fake_gpus import H100_SXM, FakeGpus


@pytest.fixture
def h100() -> Environment:
    with FakeGpus([H100_SXM]):
        return collect_environment()


def _row(env: Environment, rate: float, *, pinned: bool = False, **fields: object) -> Result:
    values: dict[str, object] = dict(
        model="resnet50",
        backend="eager",
        precision=Precision.BF16,
        batch_size=64,
        threads=1,
        device=Device.CUDA,
        options=(("weights", "cast"), *((PINNED,) if pinned else ())),
    )
    values.update(fields)
    spec = RunSpec(**values)  # type: ignore[arg-type]
    per_call = spec.batch_size / rate
    return Result(
        spec=spec,
        environment=env,
        status=Status.OK,
        measurement=Measurement(
            samples_s=(per_call,) * 5, items_per_call=spec.batch_size, first_call_s=per_call
        ),
        prepare_s=42.0 if spec.backend == "compile" else 0.5,
    )


def _linear_model(ref: str = "wide") -> LoadedModel:
    torch.manual_seed(0)
    return LoadedModel(
        ref=ref,
        format=ModelFormat.TORCH,
        inputs=(TensorSpec(name="x", shape=("N", 1024)),),
        digest="test:wide",
        task=Task.CLASSIFICATION,
        module=nn.Linear(1024, 1024).eval(),
    )


def test_each_gpu_row_stands_beside_its_copy_twin(h100: Environment) -> None:
    eager, eager_copy = _row(h100, 8000.0), _row(h100, 6000.0, pinned=True)
    compiled = _row(h100, 20000.0, backend="compile")
    pairs = copy_pairs([eager, eager_copy, compiled])
    assert [p.label for p in pairs] == [eager.spec.label(), compiled.spec.label()]
    first, second = pairs
    assert first.pinned is eager_copy and first.copy_share == pytest.approx(0.25)
    assert first.compile_s is None and second.compile_s == 42.0
    assert second.pinned is None and second.pinned_text() == "not run"
    assert best_resident([eager, eager_copy, compiled]) is compiled
    assert copy_pairs([replace(eager, spec=replace(eager.spec, device=Device.CPU))]) == []


def test_the_catalog_names_a_source_for_every_record() -> None:
    records = load_records()
    assert records and all(r.source.startswith("https://") for r in records)
    h100 = records_for("resnet50", "NVIDIA H100 80GB HBM3")
    assert [(r.benchmark.split(",")[0], r.scenario, r.items_per_s) for r in h100] == [
        ("MLPerf Inference v4.0", "Offline", 88714.3)
    ]
    h200 = records_for("resnet50", "NVIDIA H200")
    assert sorted((r.scenario, r.items_per_s, r.batch_size) for r in h200) == [
        ("Offline", 95100.0, 2048),
        ("Server", 79000.0, 256),
    ]
    assert records_for("vit-b-16", "NVIDIA H200") == ()


def test_a_bad_record_is_one_line_naming_the_entry(tmp_path: Path) -> None:
    path = tmp_path / "records.toml"
    path.write_text(
        '[[record]]\nmodel = "resnet50"\ngpu = "H100"\nbenchmark = "b"\nscenario = "Offline"\n'
        'items_per_s = -1\nstack = "s"\ninputs = "device"\nsource = "https://x"\n'
    )
    with pytest.raises(BadInputError, match=r"records.toml: record 1: items_per_s: "):
        load_records(path)


def test_the_floor_is_the_roofline_of_one_more_item() -> None:
    """Linear(1024, 1024) in fp32 on an H100 SXM: 2 x 1024^2 FLOPs per item against the 67
    TFLOP/s fp32 datasheet peak (8 KiB per item moves in 2.4 ns at 3.35 TB/s: compute-bound)."""
    model = _linear_model()
    spec = RunSpec(
        model="wide",
        backend="eager",
        precision=Precision.FP32,
        batch_size=64,
        threads=1,
        device=Device.CUDA,
    )
    floor = floor_for(model, spec, H100_SXM.name)
    assert floor.items_per_s == pytest.approx(67e12 / (2 * 1024 * 1024), rel=0.01)
    assert "H100 SXM datasheet" in floor.derivation
    unknown = floor_for(model, spec, "Some Future GPU")
    assert unknown.items_per_s is None and "no datasheet entry" in unknown.derivation


def test_the_best_figure_against_the_record_in_table_and_report(h100: Environment) -> None:
    results = [_row(h100, 8000.0), _row(h100, 6000.0, pinned=True)]
    found = standing(results, _linear_model("resnet50"), h100)
    assert found is not None
    [gap] = found.records
    assert gap.share == pytest.approx(8000.0 / 88714.3)
    assert found.floor_share is not None and found.floor_share > 0
    summary = found.summary()
    assert summary["best_items_per_s"] == pytest.approx(8000.0)
    assert summary["floor_share"] == found.floor_share
    [record] = summary["records"]  # type: ignore[misc]
    assert record["items_per_s"] == 88714.3 and record["source"].endswith("summary.txt")
    text = "\n".join(found.lines())
    assert "9% of MLPerf Inference v4.0" in text and "mlperf_log_summary.txt" in text
    from rich.console import Console

    console = Console(width=200, record=True)
    console.print(bench_view(results, {"": select(results, None)}, title="t", standing=found))
    shown = console.export_text()
    assert "items/s with copy" in shown and "6,000" in shown and "25%" in shown
    assert "of the roofline floor" in shown
    html = render_bench_report(
        results,
        title="t",
        model="resnet50",
        best_key=None,
        lowest_latency_key=None,
        verdict="v",
        sla_p99_s=None,
        baseline_key=None,
        standing=found,
    )
    assert "On the GPU" in html and "MLPerf Inference v4.0" in html and "6,000" in html


def test_a_cpu_run_has_no_standing(environment: Environment) -> None:
    cpu = _row(environment, 100.0, device=Device.CPU, options=())
    assert standing([cpu], _linear_model("resnet50"), environment) is None


def test_dry_run_lists_the_default_gpu_sweep(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "conv.py"
    path.write_text(
        "import torch\ndef make():\n    torch.manual_seed(0)\n"
        "    return torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.AdaptiveAvgPool2d(1),"
        " torch.nn.Flatten(), torch.nn.Linear(4, 2))\n"
    )
    args = ("bench", f"{path}:make", "--input", "x:N,3,16,16:float32", "--device", "cuda")
    with FakeGpus([H100_SXM]) as gpus:
        code, out, err = cli(*args, "--threads", "1", "--dry-run", "--json")
        text_code, text, _ = cli(*args, "--threads", "1", "--dry-run")
    assert code == 0 and text_code == 0, err
    assert not gpus.touched_device, gpus.calls
    plan = json.loads(out)
    rows = {row["label"]: row for row in plan["configurations"]}
    assert rows["eager/fp32/b8/t1"]["runs"] and rows["eager/fp32/b512/t1/inputs=pinned"]["runs"]
    graphs = "compile/bf16/b8/t1/channels_last=true/mode=reduce-overhead/weights=cast"
    assert graphs in rows
    fp8 = [row for label, row in rows.items() if label.startswith("compile/fp8/")]
    assert fp8 and all("not Linear-heavy" in row["skip_reason"] for row in fp8)
    assert plan["device_free_bytes"] > 0
    assert all(row["needed_bytes"] > 0 for row in rows.values())
    assert "configurations would run" in text and "device memory:" in text


class _Boom(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise RuntimeError("boom")


def test_a_model_that_fails_on_the_cpu_loses_its_floor_not_its_report(h100: Environment) -> None:
    from accelscope.commands.bench.workflow import _with_memory
    from accelscope.sweep.space import SweepSpace

    model = replace(_linear_model("resnet50"), module=_Boom())
    found = standing([_row(h100, 8000.0)], model, h100)
    assert found is not None and found.floor.items_per_s is None
    assert "counting its operators on the CPU failed (RuntimeError: boom)" in found.floor.derivation
    notes: list[str] = []

    class Events:
        def note(self, text: str) -> None:
            notes.append(text)

    space = SweepSpace(device=Device.CUDA, gpu_default=True, threads=(1,))
    assert _with_memory(space, model, h100, "local", Events()) is space  # type: ignore[arg-type]
    assert notes == ["memory check off: the model failed on the CPU (RuntimeError: boom)"]
