"""Environment: dict/JSON round trip, hardware fingerprint, collection on this machine."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import replace
from datetime import datetime
from pathlib import Path

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from accelscope.hardware import (
    CpuInfo,
    Environment,
    GpuInfo,
    collect_environment,
    precision_support,
)
from accelscope.hardware import cpu as cpu_mod
from accelscope.hardware import fingerprint as fp_mod
from accelscope.hardware.cpu import X86_FEATURES
from accelscope.serialise import dump, load
from accelscope.spec import Device, Precision

SRC = Path(__file__).resolve().parents[2] / "src"

H200 = GpuInfo(
    index=0,
    name="NVIDIA H200",
    memory_bytes=150_754_820_096,
    compute_capability="9.0",
    driver_version="570.86.15",
    cuda_runtime="12.8",
    uuid="GPU-1234",
)
CPU = CpuInfo(
    model_name="Intel(R) Xeon(R) Platinum 8480+",
    vendor="Intel",
    arch="x86_64",
    logical_cores=224,
    physical_cores=112,
    usable_cores=224,
    sockets=2,
    max_freq_mhz=3800.0,
    l2_cache_bytes=2 << 20,
    l3_cache_bytes=105 << 20,
    isa=("amx_bf16", "amx_int8", "amx_tile", "avx2", "avx512f", "fma"),
)
ENV = Environment(
    hostname="node-17",
    os="Linux-6.8.0-x86_64-with-glibc2.39",
    python="3.11.9",
    cpu=CPU,
    memory_bytes=2_163_956_342_784,
    gpus=(H200, replace(H200, index=1, uuid="GPU-5678")),
    libraries=(("numpy", "2.1.0"), ("torch", "2.5.1+cu124")),
    torch_build=(("cuda", "12.4"), ("mkldnn", "True")),
    collected_at="2025-01-02T03:04:05+00:00",
)


def json_round_trip(env: Environment) -> Environment:
    return load(Environment, json.loads(json.dumps(dump(env))))


def test_round_trip_with_gpus() -> None:
    assert json_round_trip(ENV) == ENV
    data = dump(ENV)
    assert isinstance(data["gpus"], list) and isinstance(data["libraries"][0], list)
    assert data["cpu"]["isa"] == list(CPU.isa)


texts = st.text(max_size=20)
opt_ints = st.none() | st.integers(min_value=0, max_value=1 << 50)
cpus = st.builds(
    CpuInfo,
    model_name=texts,
    vendor=texts,
    arch=texts,
    logical_cores=st.integers(1, 4096),
    physical_cores=st.integers(1, 4096),
    usable_cores=st.integers(1, 4096),
    sockets=st.integers(1, 16),
    max_freq_mhz=st.none() | st.floats(0, 1e5, allow_nan=False),
    l2_cache_bytes=opt_ints,
    l3_cache_bytes=opt_ints,
    isa=st.lists(st.sampled_from(sorted(X86_FEATURES.values())), unique=True).map(
        lambda xs: tuple(sorted(xs))
    ),
)
gpus = st.builds(
    GpuInfo,
    index=st.integers(0, 15),
    name=texts,
    memory_bytes=st.integers(0, 1 << 50),
    compute_capability=texts,
    driver_version=st.none() | texts,
    cuda_runtime=st.none() | texts,
    uuid=st.none() | texts,
)
pairs = st.lists(st.tuples(texts, texts), max_size=4).map(lambda xs: tuple(sorted(xs)))
environments = st.builds(
    Environment,
    hostname=texts,
    os=texts,
    python=texts,
    cpu=cpus,
    memory_bytes=st.integers(0, 1 << 52),
    gpus=st.lists(gpus, max_size=3).map(tuple),
    libraries=pairs,
    torch_build=pairs,
    collected_at=texts,
)


@given(environments)
def test_round_trip_is_exact_for_any_environment(env: Environment) -> None:
    back = json_round_trip(env)
    assert back == env
    assert back.fingerprint() == env.fingerprint()


def test_fingerprint_ignores_host_time_libraries_and_drivers() -> None:
    other = replace(
        ENV,
        hostname="elsewhere",
        os="Linux-5.15",
        collected_at="2030-01-01T00:00:00+00:00",
        libraries=(("torch", "9.9"),),
        torch_build=(),
        gpus=tuple(replace(g, driver_version="999.1", uuid=None) for g in ENV.gpus),
        memory_bytes=ENV.memory_bytes + (100 << 20),  # a few MiB of kernel reservation
        cpu=replace(CPU, usable_cores=4),
    )
    fingerprint = ENV.fingerprint()
    assert len(fingerprint) == 16 and int(fingerprint, 16) >= 0
    assert other.fingerprint() == fingerprint


@pytest.mark.parametrize(
    "changed",
    [
        replace(ENV, gpus=ENV.gpus[:1]),
        replace(ENV, gpus=(replace(H200, name="NVIDIA H100 80GB HBM3", memory_bytes=80 << 30),)),
        replace(ENV, cpu=replace(CPU, isa=(*CPU.isa, "amx_fp16"))),
        replace(ENV, cpu=replace(CPU, model_name="AMD EPYC 9654")),
        replace(ENV, cpu=replace(CPU, physical_cores=56)),
        replace(ENV, memory_bytes=ENV.memory_bytes // 2),
    ],
)
def test_fingerprint_changes_with_hardware(changed: Environment) -> None:
    assert changed.fingerprint() != ENV.fingerprint()


def test_precision_support_delegates_to_fastpaths() -> None:
    verdicts = ENV.precision_support()
    assert verdicts == precision_support(CPU, ENV.gpus)
    assert {(v.precision, v.device) for v in verdicts} == {
        (p, d) for p in Precision for d in (Device.CPU, Device.CUDA)
    }


def test_collect_environment_on_this_machine() -> None:
    collect_environment.cache_clear()
    start = time.perf_counter()
    env = collect_environment()
    elapsed = time.perf_counter() - start
    assert elapsed < 0.5, f"collect_environment took {elapsed:.3f} s"
    assert collect_environment() is env  # cached per process
    assert env.memory_bytes > 0 and env.cpu.logical_cores >= env.cpu.usable_cores >= 1
    assert env.cpu.usable_cores == len(os.sched_getaffinity(0))
    assert datetime.fromisoformat(env.collected_at).utcoffset() is not None
    assert ("torch", torch.__version__) in env.libraries
    build = dict(env.torch_build)
    assert build["cuda"] == (torch.version.cuda or "none")
    assert build["mkldnn"] == str(torch.backends.mkldnn.is_available())
    assert [name for name, _ in env.libraries] == sorted(name for name, _ in env.libraries)
    assert json_round_trip(env) == env
    if not torch.cuda.is_available():
        assert env.gpus == ()


def test_collect_environment_finds_amx_when_proc_cpuinfo_lists_it() -> None:
    proc = Path("/proc/cpuinfo")
    if not proc.exists():
        pytest.skip("no /proc/cpuinfo on this OS")
    listed = any(
        line.split(":", 1)[0].strip() == "flags" and "amx_bf16" in line.split(":", 1)[1].split()
        for line in proc.read_text().splitlines()
        if ":" in line
    )
    env = collect_environment()
    assert ("amx_bf16" in env.cpu.isa) == listed
    bf16 = next(
        s
        for s in env.precision_support()
        if s.precision is Precision.BF16 and s.device is Device.CPU
    )
    if listed:
        assert bf16.fast and bf16.unit == "AMX-BF16 tiles"


def test_collect_environment_survives_a_machine_without_proc(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        fp_mod, "read_cpu_info", lambda: cpu_mod.read_cpu_info(tmp_path / "a", tmp_path / "b")
    )

    def no_memory() -> None:
        raise OSError("no /proc/meminfo")

    monkeypatch.setattr(fp_mod, "memory_total_bytes", lambda: cpu_mod.memory_total_bytes(no_memory))
    collect_environment.cache_clear()
    try:
        env = collect_environment()
    finally:
        collect_environment.cache_clear()
    assert env.cpu.isa == () and env.cpu.l3_cache_bytes is None
    assert len(env.fingerprint()) == 16


def test_library_versions_do_not_import_the_libraries() -> None:
    code = (
        "import sys\n"
        "from accelscope.hardware.fingerprint import library_versions\n"
        "before = set(sys.modules)\n"
        "found = dict(library_versions())\n"
        "heavy = ('transformers', 'onnxruntime', 'onnx', 'sklearn', 'openvino', 'tensorrt')\n"
        "imported = [m for m in heavy if m in set(sys.modules) - before]\n"
        "assert not imported, imported\n"
        "assert 'numpy' in found, found\n"
        "print(sorted(found))\n"
    )
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")]),
    }
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=False
    )
    assert done.returncode == 0, done.stderr
    assert "torch" in done.stdout
