"""``bench MODEL --device cuda`` with no other choice, end to end on a fake H100: the default GPU
rows and their pinned-copy twins measured (by a rate table), stored and read back, the standing
against the roofline floor in the outcome and the report, and the GPU never touched here.

Covers: accelscope.commands.bench.workflow, accelscope.sweep.gpu_default,
accelscope.commands.bench.standing."""

from __future__ import annotations

from pathlib import Path

from accelscope.commands.bench.workflow import BenchRequest, bench
from accelscope.hardware.fingerprint import collect_environment
from accelscope.spec import Device, Precision, TensorSpec
from accelscope.store.sqlite import ResultStore
from accelscope.sweep.gpu_default import PINNED
from accelscope.testing.fake_gpus import H100_SXM, FakeGpus
from accelscope.testing.fake_workers import FakeReferenceWorker, RateTableExecutor

RATES = {
    ("fp32", False): 100.0,
    ("fp32", True): 300.0,
    ("bf16", False): 500.0,
    ("fp16", False): 520.0,
    ("fp8", False): 700.0,
}


def test_the_default_gpu_sweep_end_to_end(tmp_path: Path) -> None:
    path = tmp_path / "wide.py"
    path.write_text("import torch\ndef make():\n    return torch.nn.Linear(64, 64)\n")
    request = BenchRequest(
        model=f"{path}:make",
        inputs=(TensorSpec(name="x", shape=("N", 64)),),
        batch_sizes=(4,),
        threads=(1,),
        device=Device.CUDA,
        measure_budget_s=1.0,
        accuracy_samples=8,
        confirm_rounds=2,
    )
    assert request.gpu_default
    with FakeGpus([H100_SXM]) as gpus:
        outcome = bench(
            request,
            store_path=tmp_path / "r.db",
            executor=RateTableExecutor(collect_environment(), RATES),
            reference_runner=FakeReferenceWorker(),
        )
    assert not gpus.touched_device, gpus.calls
    measured = [r for r in outcome.results if r.measurement is not None]
    resident = {r.spec.label() for r in measured if PINNED not in r.spec.options}
    twins = {r.spec.label() for r in measured if PINNED in r.spec.options}
    assert "eager/fp32/b4/t1" in resident and "eager/fp32/b4/t1/inputs=pinned" in twins
    assert len(twins) == len(resident)  # every measured row has its twin
    assert {r.spec.precision for r in measured} >= {Precision.FP32, Precision.BF16, Precision.FP16}
    with ResultStore(tmp_path / "r.db") as store:
        stored = store.get_run(str(outcome.run_id)).results
    assert {r.spec.key for r in stored} == {r.spec.key for r in outcome.results}
    assert outcome.standing is not None
    assert outcome.standing.floor.items_per_s is not None  # the H100 SXM datasheet
    assert outcome.standing.records == ()  # no published record of this model
    assert outcome.report_path is not None
    html = outcome.report_path.read_text()
    assert "On the GPU" in html and "items/s with copy" in html and "roofline floor" in html
