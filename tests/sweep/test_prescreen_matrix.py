"""The pre-screen on every CPU class accelscope claims to support, through fake CPU descriptions:
the measured probe decides, the ISA table explains, and only fp8 (emulated on every CPU), CUDA and
unprobed pairs are decided by rule. Every branch runs on every machine.

Covers: accelscope.sweep.space, accelscope.hardware.fastpaths, accelscope.engine.probe."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from accelscope.backends.base import Availability, Backend, Runner
from accelscope.backends.registry import _REGISTRY, register_backend
from accelscope.hardware.fastpaths import cpu_support
from accelscope.models.base import LoadedModel, ModelFormat
from accelscope.models.loading import load_model
from accelscope.spec import Device, Precision, RunSpec, TensorSpec
from accelscope.sweep.space import SweepSpace, expand, probe_requests
from accelscope.testing import FAKE_CPU_FLAGS, fake_environment, fake_probe_table

CPUS = sorted(FAKE_CPU_FLAGS)
INT8_FAST_BF16_SLOW = {
    ("torch", Precision.INT8): 1.8,
    ("onnxruntime", Precision.INT8): 2.1,
    ("torch", Precision.BF16): 0.2,
}
BF16_FAST_INT8_SLOW = {
    ("torch", Precision.INT8): 0.6,
    ("onnxruntime", Precision.INT8): 0.7,
    ("torch", Precision.BF16): 3.5,
}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> LoadedModel:
    path = tmp_path_factory.mktemp("model") / "tiny.py"
    path.write_text("import torch\ndef make():\n    return torch.nn.Linear(4, 3)\n")
    return load_model(f"{path}:make", inputs=(TensorSpec(name="x", shape=("N", 4)),))


def _space(**overrides: object) -> SweepSpace:
    settings: dict[str, object] = {
        "backends": ("eager", "compile", "onnxruntime"),
        "precisions": (Precision.FP32, Precision.BF16, Precision.INT8),
        "batch_sizes": (8,),
        "threads": (2,),
    }
    settings.update(overrides)
    return SweepSpace(**settings)  # type: ignore[arg-type]


def _reasons(candidates: list) -> dict[str, str]:  # type: ignore[type-arg]
    return {c.spec.label(): c.skip_reason for c in candidates}


@pytest.mark.parametrize("cpu", CPUS)
def test_probe_decides_and_isa_explains(cpu: str, tiny: LoadedModel) -> None:
    env = fake_environment(cpu)
    isa = {s.precision: s for s in cpu_support(env.cpu)}
    reasons = _reasons(expand(_space(), tiny, env, fake_probe_table(env, INT8_FAST_BF16_SLOW)))
    assert reasons["onnxruntime/int8/b8/t2"] == ""  # measured fast: kept, VNNI or not
    if env.cpu.arch == "x86_64":
        assert reasons["compile/int8/b8/t2"] == ""
    else:  # the backend's own fact, not a precision screen
        assert reasons["compile/int8/b8/t2"].startswith("not available: int8 uses the x86")
    for label in ("eager/bf16/b8/t2", "compile/bf16/b8/t2"):
        reason = reasons[label]
        assert reason.startswith("measured slower here: bf16 probe (torch, 2 threads)"), reason
        assert "conv 0.20x, matmul 0.20x fp32 here" in reason
        assert isa[Precision.BF16].reason in reason  # the ISA table explains why
        assert "--force-precision" in reason
    assert reasons["eager/int8/b8/t2"].startswith("not available:")  # eager has no int8 at all
    assert all(reasons[f"{b}/fp32/b8/t2"] == "" for b in ("eager", "compile", "onnxruntime"))


@pytest.mark.parametrize("cpu", CPUS)
def test_the_reverse_measurement_flips_the_decision(cpu: str, tiny: LoadedModel) -> None:
    env = fake_environment(cpu)
    reasons = _reasons(expand(_space(), tiny, env, fake_probe_table(env, BF16_FAST_INT8_SLOW)))
    assert reasons["eager/bf16/b8/t2"] == "" and reasons["compile/bf16/b8/t2"] == ""
    assert "int8 probe (onnxruntime, 2 threads): conv 0.70x" in reasons["onnxruntime/int8/b8/t2"]


@pytest.mark.parametrize("cpu", CPUS)
def test_without_probes_the_isa_rule_decides(cpu: str, tiny: LoadedModel) -> None:
    env = fake_environment(cpu)
    isa = {s.precision: s for s in cpu_support(env.cpu)}
    reasons = _reasons(expand(_space(backends=("eager", "onnxruntime")), tiny, env))
    for label, precision in (
        ("eager/bf16/b8/t2", Precision.BF16),
        ("onnxruntime/int8/b8/t2", Precision.INT8),
    ):
        expected = "" if isa[precision].fast else f"no fast path: {isa[precision].reason}"
        assert reasons[label].startswith(expected), (label, reasons[label])


@pytest.mark.parametrize("cpu", CPUS)
def test_a_failed_probe_screens_nothing_out(cpu: str, tiny: LoadedModel) -> None:
    from dataclasses import replace

    env = fake_environment(cpu)
    table = fake_probe_table(env, {("torch", Precision.BF16): 0.1})
    failed = replace(
        table, verdicts=tuple(replace(v, kernels=(), error="boom") for v in table.verdicts)
    )
    reasons = _reasons(expand(_space(backends=("eager",)), tiny, env, failed))
    assert reasons["eager/bf16/b8/t2"] == ""


@pytest.mark.parametrize("cpu", CPUS)
def test_force_precision_measures_what_the_probe_rejected(cpu: str, tiny: LoadedModel) -> None:
    env = fake_environment(cpu)
    table = fake_probe_table(env, INT8_FAST_BF16_SLOW)
    forced = _space(backends=("eager",), force_precisions=True)
    assert _reasons(expand(forced, tiny, env, table))["eager/bf16/b8/t2"] == ""


def test_runtime_that_runs_a_precision_as_another_is_screened(tiny: LoadedModel) -> None:
    from dataclasses import replace

    env = fake_environment("zen3")
    table = fake_probe_table(env, {("torch", Precision.BF16): 1.0})
    as_f32 = replace(table, verdicts=(replace(table.verdicts[0], executes_as="f32"),))
    reason = _reasons(expand(_space(backends=("eager",)), tiny, env, as_f32))["eager/bf16/b8/t2"]
    assert "torch runs bf16 as f32 here" in reason


def test_probe_requests_cover_only_probed_cpu_pairs(tiny: LoadedModel) -> None:
    env = fake_environment("zen3")
    pairs = probe_requests(_space(), tiny, env)
    assert pairs == [
        ("torch", Precision.BF16),
        ("torch", Precision.INT8),
        ("onnxruntime", Precision.INT8),
    ]
    assert probe_requests(_space(force_precisions=True), tiny, env) == []


class _Fp8Backend(Backend):
    """A plugin backend that claims fp8 on the CPU: nothing probes it, the rule decides."""

    name = "fake-fp8"
    formats = frozenset({ModelFormat.TORCH})
    precisions = frozenset({Precision.FP32, Precision.FP8})
    devices = frozenset({Device.CPU})

    def available(self, env: object) -> Availability:  # type: ignore[override]
        return Availability(True)

    def prepare(self, model: LoadedModel, spec: RunSpec, calibration: object = ()) -> Runner:  # type: ignore[override]
        raise NotImplementedError("the pre-screen never prepares")


@pytest.fixture
def fp8_backend() -> Iterator[str]:
    register_backend(_Fp8Backend())
    yield "fake-fp8"
    _REGISTRY.pop("fake-fp8", None)


@pytest.mark.parametrize("cpu", CPUS)
def test_fp8_on_any_cpu_is_skipped_by_rule(cpu: str, tiny: LoadedModel, fp8_backend: str) -> None:
    env = fake_environment(cpu)
    space = _space(backends=(fp8_backend,), precisions=(Precision.FP32, Precision.FP8))
    reasons = _reasons(expand(space, tiny, env, fake_probe_table(env, INT8_FAST_BF16_SLOW)))
    assert reasons["fake-fp8/fp32/b8/t2"] == ""
    assert reasons["fake-fp8/fp8/b8/t2"].startswith("no fast path: no FP8 unit on CPUs")


def test_fake_cpus_parse_into_the_isa_each_class_has(tmp_path: Path) -> None:
    isa = {name: set(fake_environment(name).cpu.isa) for name in CPUS}
    assert {"amx_bf16", "amx_int8"} <= isa["sapphire-rapids"]
    assert "avx512_vnni" in isa["ice-lake"] and "avx512_bf16" not in isa["ice-lake"]
    assert isa["zen3"] == {"avx2", "fma"}
    assert {"avx512_bf16", "avx512_vnni"} <= isa["zen4"]
    assert {"sve", "arm_bf16", "arm_i8mm"} <= isa["graviton3"]
    assert isa["neon-arm"] == {"neon"}


def test_the_fp32_baseline_is_added_when_the_precisions_leave_it_out(tiny: LoadedModel) -> None:
    env = fake_environment("zen3")
    space = _space(
        backends=("compile", "onnxruntime"),
        precisions=(Precision.INT8,),
        batch_sizes=(1, 8),
        threads=(1, 2),
    )
    candidates = expand(space, tiny, env, fake_probe_table(env, INT8_FAST_BF16_SLOW))
    first = candidates[0]
    assert first.spec.label() == "eager/fp32/b8/t2" and first.runnable
    assert [c.spec.precision for c in candidates[1:]] == [Precision.INT8] * 8
    with_fp32 = expand(_space(), tiny, env, fake_probe_table(env, INT8_FAST_BF16_SLOW))
    assert sum(c.spec.label() == "eager/fp32/b8/t2" for c in with_fp32) == 1
