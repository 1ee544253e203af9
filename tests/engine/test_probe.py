"""The precision probes: verdict logic, the per-machine cache, isolation, and the real kernels
(whose *speed* is this machine's business: the tests check they ran, never how fast)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from accelscope.engine import probe
from accelscope.engine.probe import (
    KEEP_RATIO,
    KernelTiming,
    ProbeTable,
    ProbeVerdict,
    cache_path,
    measure_probes,
    probe_runtime_version,
    probe_table,
)
from accelscope.serialise import dump, load
from accelscope.spec import Precision


def _verdict(*speedups: float, runtime: str = "torch", **extra: str) -> ProbeVerdict:
    kernels = tuple(
        KernelTiming(kernel=f"k{i}", fp32_s=1.0, precision_s=1.0 / s)
        for i, s in enumerate(speedups)
    )
    return ProbeVerdict(
        runtime=runtime,
        precision=Precision.INT8,
        version=probe_runtime_version(runtime),
        threads=2,
        kernels=kernels,
        **extra,  # type: ignore[arg-type]
    )


def test_keep_follows_the_faster_kernel() -> None:
    assert _verdict(0.5, 1.3).keep  # one kernel pays off: worth measuring the model
    assert not _verdict(0.5, KEEP_RATIO - 0.01).keep
    assert _verdict(KEEP_RATIO + 0.01).keep  # within noise of fp32: the sweep settles it
    assert _verdict().keep and _verdict().speedup is None  # nothing measured: nothing screened
    assert _verdict(error="boom").keep


def test_describe_quotes_the_numbers() -> None:
    text = _verdict(0.61, 0.74).describe()
    assert text == "int8 probe (torch, 2 threads): k0 0.61x, k1 0.74x fp32 here"
    assert "failed: boom" in _verdict(error="boom").describe()
    as_f32 = _verdict(1.0, runtime="openvino", executes_as="f32")
    assert not as_f32.keep and "openvino runs int8 as f32 here" in as_f32.describe()


def test_table_round_trips_and_maps_backends_to_runtimes() -> None:
    table = ProbeTable(fingerprint="f", threads=2, verdicts=(_verdict(1.5),))
    again = load(ProbeTable, json.loads(json.dumps(dump(table))))
    assert again.verdicts == table.verdicts
    assert again.get("compile", Precision.INT8) == again.get("eager", Precision.INT8)
    assert again.get("onnxruntime", Precision.INT8) is None
    assert again.get("my-plugin", Precision.INT8) is None


class _Counting:
    def __init__(self, speedup: float = 2.0, error: str = "") -> None:
        self.calls: list[list[tuple[str, Precision]]] = []
        self.speedup, self.error = speedup, error

    def __call__(
        self, pairs: list[tuple[str, Precision]], threads: int, timeout_s: float
    ) -> list[ProbeVerdict]:
        self.calls.append(pairs)
        return [
            ProbeVerdict(
                runtime=runtime,
                precision=precision,
                version=probe_runtime_version(runtime),
                threads=threads,
                kernels=()
                if self.error
                else (KernelTiming(kernel="conv", fp32_s=1.0, precision_s=1 / self.speedup),),
                error=self.error,
            )
            for runtime, precision in pairs
        ]


def test_cache_is_per_machine_and_thread_count(tmp_path: Path) -> None:
    measure = _Counting()
    pairs = [("torch", Precision.INT8), ("torch", Precision.BF16)]
    first = probe_table(pairs, fingerprint="m1", threads=2, cache_dir=tmp_path, measure=measure)
    assert [v.precision for v in first.verdicts] == [Precision.INT8, Precision.BF16]
    assert first.probe_s >= 0 and measure.calls == [pairs]
    again = probe_table(pairs, fingerprint="m1", threads=2, cache_dir=tmp_path, measure=measure)
    assert again.verdicts == first.verdicts and again.probe_s == 0 and len(measure.calls) == 1
    probe_table(pairs[:1], fingerprint="m1", threads=1, cache_dir=tmp_path, measure=measure)
    probe_table(pairs[:1], fingerprint="m2", threads=2, cache_dir=tmp_path, measure=measure)
    assert len(measure.calls) == 3  # another thread count, another machine: measured
    probe_table(
        pairs, fingerprint="m1", threads=2, cache_dir=tmp_path, measure=measure, refresh=True
    )
    assert len(measure.calls) == 4


def test_a_new_runtime_version_is_probed_again(tmp_path: Path) -> None:
    measure = _Counting()
    pairs = [("torch", Precision.INT8)]
    probe_table(pairs, fingerprint="m", threads=2, cache_dir=tmp_path, measure=measure)
    path = cache_path(tmp_path, "m", 2)
    data = json.loads(path.read_text())
    data["verdicts"][0]["version"] = "0.0.1"
    path.write_text(json.dumps(data))
    probe_table(pairs, fingerprint="m", threads=2, cache_dir=tmp_path, measure=measure)
    assert len(measure.calls) == 2


def test_failures_are_not_cached_and_a_damaged_cache_is_remeasured(tmp_path: Path) -> None:
    failing = _Counting(error="the probe did not finish within 1 s")
    pairs = [("onnxruntime", Precision.INT8)]
    table = probe_table(pairs, fingerprint="m", threads=2, cache_dir=tmp_path, measure=failing)
    assert table.verdicts[0].error and table.verdicts[0].keep
    probe_table(pairs, fingerprint="m", threads=2, cache_dir=tmp_path, measure=failing)
    assert len(failing.calls) == 2
    cache_path(tmp_path, "m", 2).write_text("{not json")
    working = _Counting()
    table = probe_table(pairs, fingerprint="m", threads=2, cache_dir=tmp_path, measure=working)
    assert len(working.calls) == 1 and table.verdicts[0].speedup == 2.0


def test_unwritable_cache_costs_only_a_reprobe(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    measure = _Counting()
    table = probe_table(
        [("torch", Precision.INT8)],
        fingerprint="m",
        threads=1,
        cache_dir=blocker / "probes",
        measure=measure,
    )
    assert table.verdicts[0].speedup == 2.0


def test_real_torch_kernels_run_in_process() -> None:
    verdicts = measure_probes([("torch", Precision.INT8), ("torch", Precision.BF16)], threads=1)
    for verdict in verdicts:
        assert not verdict.error, verdict.error
        assert [k.kernel for k in verdict.kernels] == ["conv", "matmul"]
        assert all(k.fp32_s > 0 and k.precision_s > 0 for k in verdict.kernels)
        assert verdict.version == probe_runtime_version("torch")


def test_real_onnxruntime_and_openvino_probes_run_isolated() -> None:
    pairs = [
        ("onnxruntime", Precision.INT8),
        ("openvino", Precision.INT8),
        ("openvino", Precision.BF16),
    ]
    verdicts = probe._measure_isolated(pairs, 1, timeout_s=120)
    assert [(v.runtime, v.precision) for v in verdicts] == pairs
    for verdict in verdicts:
        assert not verdict.error, verdict.error
        assert len(verdict.kernels) == 2 and verdict.speedup is not None
    bf16 = verdicts[2]
    # OpenVINO says itself which precision it executes; never guessed from the ISA here
    assert bf16.executes_as in ("", "f32", "f16")


def test_a_probe_that_does_not_finish_in_time_is_abandoned() -> None:
    verdicts = probe._measure_isolated([("torch", Precision.INT8)], 1, timeout_s=0.01)
    assert verdicts[0].error == "the probe did not finish within 0.01 s" and verdicts[0].keep


def test_an_unknown_runtime_fails_as_a_verdict() -> None:
    with pytest.raises(KeyError):
        probe._PROBES["tensorflow"]
    (verdict,) = measure_probes([("tensorflow", Precision.INT8)], threads=1)
    assert verdict.error.startswith("KeyError") and verdict.keep
