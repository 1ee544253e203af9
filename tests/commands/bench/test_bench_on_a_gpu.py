"""``bench --device cuda[:N] --tf32 off,on`` on fake GPUs: the whole workflow (discovery,
pre-screen, reference, sweep, store, report) leaves the GPU to its workers, and a GPU the machine
does not have is refused before anything runs.

Covers: accelscope.commands.bench.workflow, accelscope.sweep.driver, accelscope.hardware.gpu."""

from __future__ import annotations

from pathlib import Path

import pytest

from accelscope.commands.bench.workflow import BenchRequest, bench
from accelscope.errors import BadInputError
from accelscope.hardware.fingerprint import collect_environment
from accelscope.spec import Device, Precision, TensorSpec
from accelscope.store.sqlite import ResultStore
from accelscope.testing.fake_gpus import H100_SXM, FakeGpus
from accelscope.testing.fake_workers import FakeReferenceWorker, RateTableExecutor

RATES = {("fp32", False): 100.0, ("fp32", True): 300.0, ("bf16", False): 500.0}


@pytest.fixture
def factory(tmp_path: Path) -> str:
    path = tmp_path / "tiny.py"
    path.write_text("import torch\ndef make():\n    return torch.nn.Linear(4, 3)\n")
    return f"{path}:make"


def request(model: str, **fields: object) -> BenchRequest:
    values: dict[str, object] = dict(
        model=model,
        inputs=(TensorSpec(name="x", shape=("N", 4)),),
        backends=("eager",),
        precisions=(Precision.FP32, Precision.BF16),
        batch_sizes=(4,),
        threads=(1,),
        device=Device.CUDA,
        tf32=(False, True),
        measure_budget_s=1.0,
        accuracy_samples=8,
        confirm_rounds=2,
    )
    values.update(fields)
    return BenchRequest(**values)  # type: ignore[arg-type]


def test_the_bench_process_never_touches_the_gpu(factory: str, tmp_path: Path) -> None:
    with FakeGpus([H100_SXM]) as gpus:
        executor = RateTableExecutor(collect_environment(), RATES)
        reference = FakeReferenceWorker()
        outcome = bench(
            request(factory),
            store_path=tmp_path / "r.db",
            executor=executor,
            reference_runner=reference,
        )
    assert not gpus.touched_device, gpus.calls  # discovery only: no context, no memory held
    assert [t.spec.label() for t in reference.tasks] == ["eager/fp32/b4/t1"]
    labels = sorted(r.spec.label() for r in outcome.results)
    assert labels == ["eager/bf16/b4/t1", "eager/fp32/b4/t1", "eager/tf32/b4/t1"]
    assert outcome.report_path is not None and outcome.report_path.exists()
    with ResultStore(tmp_path / "r.db") as store:
        stored = store.get_run(str(outcome.run_id)).results
    tf32 = next(r for r in stored if r.spec.tf32)
    assert tf32.spec.precision is Precision.FP32 and tf32.spec.device is Device.CUDA
    assert tf32.environment.gpus[0].name == H100_SXM.name


def test_a_gpu_the_machine_does_not_have_is_refused_first(factory: str, tmp_path: Path) -> None:
    with FakeGpus([H100_SXM]) as gpus:
        reference = FakeReferenceWorker()
        with pytest.raises(BadInputError, match=r"device cuda:1 does not exist"):
            bench(
                request(factory, device_index=1),
                store_path=tmp_path / "r.db",
                executor=RateTableExecutor(collect_environment(), RATES),
                reference_runner=reference,
            )
    assert reference.tasks == [] and not gpus.touched_device
    assert not (tmp_path / "r.db").exists()


def test_tf32_on_a_cpu_is_bad_input(factory: str, tmp_path: Path) -> None:
    with pytest.raises(BadInputError, match="--tf32 on needs --device cuda"):
        bench(request(factory, device=Device.CPU), store_path=tmp_path / "r.db")
    assert not (tmp_path / "r.db").exists()
