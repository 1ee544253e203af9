"""The Ray executor against a real local Ray cluster (``ray start --head`` plus more node
processes on this machine, each advertising a node type): a sweep across two node types, a
model file shipped to the nodes, a node killed mid-task (retried on another node of its type,
or recorded as failed), the driver killed mid-sweep and resumed, and bad input.

Covers: accelscope.sweep.ray_executor, accelscope.sweep.driver, accelscope.commands.bench.workflow,
accelscope.testing.ray_cluster."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from accelscope.commands.bench.workflow import BenchOutcome, BenchRequest, bench
from accelscope.errors import BadInputError
from accelscope.result import Result, Status
from accelscope.spec import Precision, RunSpec
from accelscope.store.sqlite import ResultStore
from accelscope.sweep.driver import NO_NODE_REASON
from accelscope.sweep.ray_executor import RayExecutor
from accelscope.testing import (
    CliRunner,
    assert_one_line_error,
    restore_default_sigint,
    tiny_onnx_bytes,
)
from accelscope.testing.ray_cluster import LocalRayCluster, RayNode

QUICK = (
    "--backend",
    "eager",
    "--precision",
    "fp32",
    "--threads",
    "1",
    "--measure-budget",
    "0.3s",
    "--accuracy-samples",
    "16",
    "--confirm-rounds",
    "0",
)


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalRayCluster]:
    with LocalRayCluster(["node_type_a", "node_type_b"]) as started:
        yield started


class _Started:
    """Sweep events that flag when a configuration has been submitted."""

    def __init__(self) -> None:
        self.event = threading.Event()

    def started(self, spec: RunSpec, stage: str) -> None:
        self.event.set()

    def progress(self, phase: str, count: int, elapsed_s: float, budget_s: float) -> None:
        return None

    def finished(self, result: Result) -> None:
        return None

    def note(self, text: str) -> None:
        return None


def _request(address: str, node_types: tuple[str, ...], **overrides: object) -> BenchRequest:
    settings: dict[str, object] = {
        "model": "digits-cnn",
        "backends": ("eager",),
        "precisions": (Precision.FP32,),
        "batch_sizes": (8,),
        "threads": (1,),
        "measure_budget_s": 0.3,
        "accuracy_samples": 16,
        "confirm_rounds": 0,
        "executor": "ray",
        "ray_address": address,
        "node_types": node_types,
    }
    settings.update(overrides)
    return BenchRequest(**settings)  # type: ignore[arg-type]


def _in_thread(request: BenchRequest, store: Path, events: _Started) -> dict[str, object]:
    box: dict[str, object] = {}

    def target() -> None:
        try:
            box["outcome"] = bench(request, store_path=store, events=events)
        except BaseException as exc:  # noqa: BLE001 - the test reports it
            box["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    box["thread"] = thread
    return box


def _measuring(node: RayNode) -> psutil.Process | None:
    """The process measuring a task on ``node`` now, if any: the one a Ray worker running
    ``measure_on_node`` (its title ``ray::measure_on_node``) spawned (a node-description
    probe's process has a ``ray::describe_node`` parent)."""
    with contextlib.suppress(psutil.Error):
        for process in psutil.Process(node.process.pid).children(recursive=True):
            with contextlib.suppress(psutil.Error):
                parent = process.parent()
                if (
                    parent is not None
                    and "spawn_main" in " ".join(process.cmdline())
                    and "ray::measure_on_node" in " ".join(parent.cmdline())
                ):
                    return process
    return None


def _wait_measuring(
    nodes: list[RayNode], timeout_s: float = 180.0
) -> tuple[RayNode, psutil.Process]:
    """Wait until one of ``nodes`` measures a task; that node and its measuring process."""
    deadline = time.monotonic() + timeout_s
    while True:
        for node in nodes:
            process = _measuring(node)
            if process is not None:
                return node, process
        assert time.monotonic() < deadline, "no node measured a task"
        time.sleep(0.05)


@contextlib.contextmanager
def _held(process: psutil.Process) -> Iterator[None]:
    """Keep ``process`` stopped (SIGSTOP) for the block: its task cannot finish meanwhile."""
    process.suspend()
    try:
        yield
    finally:
        with contextlib.suppress(psutil.Error):
            process.resume()


def _finish(box: dict[str, object]) -> BenchOutcome:
    thread = box["thread"]
    assert isinstance(thread, threading.Thread)
    thread.join(timeout=240)
    assert not thread.is_alive(), "the sweep hung after the node died"
    assert "error" not in box, box.get("error")
    outcome = box["outcome"]
    assert isinstance(outcome, BenchOutcome)
    return outcome


@pytest.mark.server
def test_sweep_across_two_node_types(
    cluster: LocalRayCluster, tmp_path: Path, cli: CliRunner
) -> None:
    store = tmp_path / "r.db"
    code, out, err = cli(
        "bench",
        "digits-cnn",
        *QUICK,
        "--batch",
        "1,8",
        "--executor",
        "ray",
        "--ray-address",
        cluster.address,
        "--node-type",
        "node_type_a,node_type_b",
        "--store",
        store,
        "--json",
    )
    assert code == 0, err
    document = json.loads(out)
    measured = [Result.from_dict(r) for r in document["results"] if r["status"] == "ok"]
    assert sorted(r.spec.label() for r in measured) == [
        "eager/fp32/b1/t1@node_type_a",
        "eager/fp32/b1/t1@node_type_b",
        "eager/fp32/b8/t1@node_type_a",
        "eager/fp32/b8/t1@node_type_b",
    ]
    # each result names the node that measured it: one node per type here
    nodes = {
        r.spec.node_type: {x.node for x in measured if x.spec.node_type == r.spec.node_type}
        for r in measured
    }
    assert all(len(ids) == 1 and "" not in ids for ids in nodes.values())
    assert nodes["node_type_a"] != nodes["node_type_b"]
    # one selection per node type, each its own machine
    assert set(document["node_types"]) == {"node_type_a", "node_type_b"}
    for node_type, chosen in document["node_types"].items():
        assert chosen["verdict"].startswith(f"On {node_type}: Fastest")
    code, out, _ = cli("runs", "show", "latest", "--store", store)
    assert code == 0
    assert "on node_type_a" in out and "on node_type_b" in out


@pytest.mark.server
def test_fast_strategy_screens_and_selects_per_node_type(
    cluster: LocalRayCluster, tmp_path: Path
) -> None:
    outcome = bench(
        _request(
            cluster.address,
            ("node_type_a", "node_type_b"),
            options=(("channels_last", "true,false"),),
            strategy="fast",
            confirm_rounds=2,
        ),
        store_path=tmp_path / "r.db",
    )
    assert set(outcome.selections) == {"node_type_a", "node_type_b"}
    for node_type, chosen in outcome.selections.items():
        mine = {r.spec.key for r in outcome.results if r.spec.node_type == node_type}
        assert chosen.best_key in mine and chosen.baseline_key in mine
        if chosen.confirmation is not None:  # when a runner-up came within 15 %
            assert chosen.confirmation.error == "" and chosen.confirmation.best_key in mine
    screened = [r for r in outcome.results if any("screening" in w for w in r.warnings)]
    assert {r.spec.node_type for r in screened} <= {"node_type_a", "node_type_b"}


@pytest.mark.server
def test_an_interleave_task_with_a_shipped_model_runs_on_the_node(
    cluster: LocalRayCluster, tmp_path: Path
) -> None:
    """The re-measure's task nests the model task in JSON: its shipped file must resolve."""
    from accelscope.hardware.fingerprint import collect_environment
    from accelscope.measurement.timer import TimerConfig
    from accelscope.sweep.worker import InterleaveTask, WorkerTask

    model = tmp_path / "tiny.onnx"
    model.write_bytes(tiny_onnx_bytes())
    specs = tuple(
        RunSpec(
            model=str(model),
            backend="onnxruntime",
            precision=Precision.FP32,
            batch_size=batch,
            threads=1,
            node_type="node_type_a",
        )
        for batch in (1, 8)
    )
    task = WorkerTask(
        spec=specs[0],
        model_ref=str(model),
        environment=collect_environment(),
        timer=TimerConfig(budget_s=0.2),
    )
    with RayExecutor(address=cluster.address, node_types=("node_type_a",)) as executor:
        outcome = executor.run(InterleaveTask(task=task, specs=specs, rounds=2, block_s=0.05))
    assert outcome.interleaved is not None, outcome.failure
    assert set(outcome.interleaved["keys"]) == {s.key for s in specs}
    assert outcome.node


@pytest.mark.server
def test_one_task_at_a_time_per_node(cluster: LocalRayCluster, tmp_path: Path) -> None:
    """A node with a task in flight has no free slot; its other configurations wait."""
    from accelscope.hardware.fingerprint import collect_environment
    from accelscope.measurement.timer import TimerConfig
    from accelscope.sweep.worker import WorkerTask

    spec = RunSpec(
        model="digits-cnn",
        backend="eager",
        precision=Precision.FP32,
        batch_size=8,
        threads=1,
        node_type="node_type_b",
    )
    task = WorkerTask(
        spec=spec,
        model_ref="digits-cnn",
        environment=collect_environment(),
        timer=TimerConfig(budget_s=0.2),
    )
    with RayExecutor(address=cluster.address, node_types=("node_type_b",)) as executor:
        assert executor.idle_slots("node_type_b") == 1
        ticket = executor.submit(task)
        assert executor.idle_slots("node_type_b") == 0
        finished, outcome = executor.next_finished()
        assert finished == ticket
        assert outcome.result is not None and outcome.result.status is Status.OK, outcome
        assert outcome.node
        assert executor.idle_slots("node_type_b") == 1


@pytest.mark.server
def test_model_file_travels_to_the_node(cluster: LocalRayCluster, tmp_path: Path) -> None:
    model = tmp_path / "tiny.onnx"
    model.write_bytes(tiny_onnx_bytes())
    outcome = bench(
        _request(
            cluster.address,
            ("node_type_b",),
            model=str(model),
            backends=("onnxruntime",),
        ),
        store_path=tmp_path / "r.db",
    )
    ok = [r for r in outcome.results if r.status is Status.OK]
    assert [r.spec.label() for r in ok] == ["onnxruntime/fp32/b8/t1@node_type_b"]
    assert ok[0].spec.model == str(model)  # the spec names the user's file, not the copy


@pytest.mark.server
def test_a_file_corrupted_in_transit_is_refused(
    cluster: LocalRayCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the fault: the shipped file's digest is altered before the task is sent
    model = tmp_path / "tiny.onnx"
    model.write_bytes(tiny_onnx_bytes())
    original = RayExecutor._ship_file

    def tampered(self: RayExecutor, path_text: str) -> str:
        name = original(self, path_text)
        path = Path(path_text).resolve()
        _, digest, ref = self._shipped[path]
        self._shipped[path] = (name, "0" * len(digest), ref)
        return name

    monkeypatch.setattr(RayExecutor, "_ship_file", tampered)
    outcome = bench(
        _request(cluster.address, ("node_type_b",), model=str(model), backends=("onnxruntime",)),
        store_path=tmp_path / "r.db",
    )
    failed = [r for r in outcome.results if r.status is Status.FAILED]
    assert len(failed) == 1 and "arrived corrupted" in failed[0].status_reason


@pytest.mark.server
def test_a_worker_crash_or_hang_on_a_node_is_isolated_as_locally(
    cluster: LocalRayCluster, tmp_path: Path
) -> None:
    # the faults: backends that crash or hang when they run on the node (scripted). The hang
    # costs its whole timeout, so it runs apart with a short one (the segfault and eager, whose
    # spawn, torch import and measurement must fit on a loaded CI machine, 15 s did not once,
    # with a long one): each task's own worker, on the node
    store = tmp_path / "r.db"
    results = []
    for backends, timeout_s in ((("eager", "fault-segv"), 40.0), (("fault-hang",), 12.0)):
        outcome = bench(
            _request(
                cluster.address,
                ("node_type_b",),
                backends=backends,
                plugins=("accelscope.testing.faults",),
                timeout_s=timeout_s,
            ),
            store_path=store,
        )
        results += outcome.results
    by_backend = {r.spec.backend: r for r in results if r.status is not Status.SKIPPED}
    assert by_backend["eager"].status is Status.OK
    assert by_backend["fault-segv"].status is Status.FAILED
    assert "SIGSEGV" in by_backend["fault-segv"].status_reason
    assert by_backend["fault-hang"].status_reason.startswith("timeout")
    assert all(r.node for r in by_backend.values())  # measured (and failed) on the node


@pytest.mark.server
def test_a_dead_node_task_is_retried_on_another_node_of_its_type(
    cluster: LocalRayCluster, tmp_path: Path
) -> None:
    first = cluster.add_node("node_type_c")
    events = _Started()
    box = _in_thread(
        _request(cluster.address, ("node_type_c",), measure_budget_s=2.0),
        tmp_path / "r.db",
        events,
    )
    # the fault: kill the node while its task's measuring process runs (held while one joins)
    _, measuring = _wait_measuring([first])
    with _held(measuring):
        second = cluster.add_node("node_type_c")  # joins while the first node measures
        assert measuring.is_running()
        cluster.kill_node(first)
    outcome = _finish(box)
    (result,) = [r for r in outcome.results if r.status is not Status.SKIPPED]
    assert result.status is Status.OK, result.status_reason
    assert any("measured on a second node: its node died" in w for w in result.warnings)
    cluster.kill_node(second)


@pytest.mark.server
def test_a_dead_node_with_no_other_of_its_type_is_recorded_and_the_rest_goes_on(
    cluster: LocalRayCluster, tmp_path: Path
) -> None:
    lonely = cluster.add_node("node_type_d")
    events = _Started()
    store = tmp_path / "r.db"
    box = _in_thread(
        _request(
            cluster.address,
            ("node_type_d", "node_type_a"),
            batch_sizes=(1, 8),
            measure_budget_s=2.0,
        ),
        store,
        events,
    )
    # the fault: kill the only node of its type while it measures one of its two tasks
    _, measuring = _wait_measuring([lonely])
    with _held(measuring):
        cluster.kill_node(lonely)
    outcome = _finish(box)
    by_type: dict[str, list[Result]] = {}
    for r in outcome.results:
        if r.status is not Status.SKIPPED or r.status_reason == NO_NODE_REASON:
            by_type.setdefault(r.spec.node_type, []).append(r)
    assert [r.status for r in by_type["node_type_a"]] == [Status.OK, Status.OK]
    lost = by_type["node_type_d"]
    assert len(lost) == 2 and all(r.status is not Status.OK for r in lost)
    reasons = " ".join(r.status_reason for r in lost)
    assert "node_type_d" in reasons or "died" in reasons, reasons
    with ResultStore(store) as opened:  # everything is on record
        assert len(opened.get_run(outcome.run_id or "latest").results) == len(outcome.results)


@pytest.mark.server
def test_driver_interrupted_then_killed_mid_sweep_resumes_without_measuring_again(
    cluster: LocalRayCluster, tmp_path: Path, cli: CliRunner
) -> None:
    store = tmp_path / "r.db"
    args = [
        "bench",
        "digits-cnn",
        "--backend",
        "eager",
        "--precision",
        "fp32",
        "--threads",
        "1",
        "--batch",
        "1,2",
        "--measure-budget",
        "1s",
        "--accuracy-samples",
        "16",
        "--confirm-rounds",
        "0",
        "--executor",
        "ray",
        "--ray-address",
        cluster.address,
        "--node-type",
        "node_type_a,node_type_b",
        "--store",
        str(store),
    ]
    # the faults: SIGINT, then SIGKILL, once results are stored and a task is measuring (held)
    # Ctrl-C first: the driver stops cleanly (exit 130), the run is marked interrupted
    _drive_until(args, store, cluster.nodes, at_least=1, stop=signal.SIGINT, expect=130)
    with ResultStore(store) as opened:
        assert opened.list_runs(1)[0].status == "interrupted"
    # then the resumed driver is killed outright
    _drive_until(
        [*args, "--resume"], store, cluster.nodes, at_least=3, stop=signal.SIGKILL, expect=-9
    )
    other = [a if a != "node_type_a,node_type_b" else "node_type_a" for a in args]
    code, _, err = cli(*other, "--resume")
    assert_one_line_error(code, err, "cannot resume", "node_type_a, node_type_b")
    code, _, err = cli(*args, "--resume")
    assert code == 0, err
    with ResultStore(store) as opened:
        run = opened.get_run("latest")
    measured = Counter(r.spec.key for r in run.results if r.status is Status.OK)
    assert len(measured) == 4  # 2 batch sizes x 2 node types
    assert set(measured.values()) == {1}  # nothing stored before the kill was measured again


def _measuring_on(nodes: list[RayNode]) -> list[psutil.Process]:
    """The processes measuring a task on the live ones of ``nodes`` now."""
    found = (_measuring(node) for node in nodes if not node.killed)
    return [process for process in found if process is not None]


def _stored_ok(store: Path) -> int:
    if not store.exists():
        return 0
    with ResultStore(store) as opened:
        heads = opened.list_runs(5)
        if not heads:
            return 0
        return sum(1 for r in opened.get_run(heads[0].id).results if r.status is Status.OK)


def _drive_until(
    args: list[str],
    store: Path,
    nodes: list[RayNode],
    *,
    at_least: int,
    stop: signal.Signals,
    expect: int,
) -> None:
    """Run the CLI driver until ``at_least`` results are stored while a node measures another
    task, and signal it with that task held (stopped): the driver is certainly waiting on a
    task when the signal comes. When the last result wanted and another task measure at once
    (two nodes), the other is held first, so they cannot both finish before the signal."""
    driver = subprocess.Popen(
        [str(Path(sys.executable).with_name("accelscope")), *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
        preexec_fn=restore_default_sigint,
    )
    try:
        with contextlib.ExitStack() as holds:
            held: psutil.Process | None = None
            deadline = time.monotonic() + 180
            while True:
                assert driver.poll() is None, "the driver ended before it was stopped"
                assert time.monotonic() < deadline, f"{at_least} results were not stored in time"
                stored = _stored_ok(store)
                measuring = _measuring_on(nodes)
                if held is None and stored >= at_least - 1 and len(measuring) >= 2:
                    held = measuring[0]
                    holds.enter_context(_held(held))
                if stored >= at_least and (held is not None or measuring):
                    if held is None:
                        held = measuring[0]
                        holds.enter_context(_held(held))
                    break
                time.sleep(0.1)
            assert held is not None and held.is_running()  # a task is in flight
            assert driver.poll() is None
            driver.send_signal(stop)
            _, err = driver.communicate(timeout=60)
        assert driver.returncode == expect, err
        if stop == signal.SIGINT:
            assert "Traceback" not in err.decode(), err
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
            driver.wait(timeout=30)


@pytest.mark.server
def test_bad_cluster_input_is_one_line_exit_2(
    cluster: LocalRayCluster, tmp_path: Path, cli: CliRunner
) -> None:
    store = tmp_path / "r.db"
    base = ("bench", "digits-cnn", "--store", str(store), "--executor", "ray")
    code, _, err = cli(*base, "--ray-address", cluster.address, "--node-type", "gpu-pool")
    assert_one_line_error(code, err, "gpu-pool", "node_type_a")
    code, _, err = cli(*base, "--ray-address", "127.0.0.1:1", "--node-type", "node_type_a")
    assert_one_line_error(code, err, "cannot reach the Ray cluster at 127.0.0.1:1")
    code, _, err = cli(*base, "--ray-address", cluster.address)
    assert_one_line_error(code, err, "--node-type")
    code, _, err = cli("bench", "digits-cnn", "--no-store", "--node-type", "node_type_a")
    assert_one_line_error(code, err, "--executor ray")
    code, _, err = cli("bench", "digits-cnn", "--no-store", "--executor", "spark")
    assert_one_line_error(code, err, "spark")
    factory = tmp_path / "net.py"
    factory.write_text("import torch\ndef build():\n    return torch.nn.Linear(4, 2)\n")
    code, _, err = cli(
        "bench",
        f"{factory}:build",
        "--no-store",
        "--executor",
        "ray",
        "--node-type",
        "node_type_a",
        "--ray-address",
        cluster.address,
    )
    assert_one_line_error(code, err, "--trust-model-code")
    assert not store.exists()


def test_ray_address_resolution(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from accelscope.sweep import ray_executor

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setattr(ray_executor, "CURRENT_CLUSTER", tmp_path / "none")
    with pytest.raises(BadInputError, match="no Ray cluster found"):
        ray_executor.resolve_address("auto")
    (tmp_path / "current").write_text("10.0.0.5:6379\n")
    monkeypatch.setattr(ray_executor, "CURRENT_CLUSTER", tmp_path / "current")
    assert ray_executor.resolve_address("auto") == "10.0.0.5:6379"
    assert ray_executor.resolve_address("ray://head:10001") == "ray://head:10001"
    with pytest.raises(BadInputError, match="HOST:PORT"):
        ray_executor.check_reachable("nonsense")
    monkeypatch.setenv("RAY_ADDRESS", "head:6379")
    assert ray_executor.resolve_address("auto") == "head:6379"
