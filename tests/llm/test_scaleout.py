"""``llm --workers``: one schedule dealt over client processes, merged back exactly.

Each test spawns real client processes against the scripted fake server (in this process)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from accelscope.llm.client import OpenAIEndpoint
from accelscope.llm.documents import Arrivals, LlmTrial, RequestRecord
from accelscope.llm.harness import Harness
from accelscope.llm.records import LlmRequest
from accelscope.llm.scaleout import (
    WorkerOutcome,
    WorkerPlan,
    Workers,
    deal,
    merge_workers,
    run_scaled_trial,
)
from accelscope.llm.summary import LAG_LIMIT_S, summarise_trial
from accelscope.llm.workload import Lengths, Session, Workload
from accelscope.store.sqlite import ResultStore
from accelscope.testing import CliRunner, assert_one_line_error, restore_default_sigint
from accelscope.testing.fake_llm_server import FakeLLMServer


def _wait_until(condition: Callable[[], bool], seconds: float = 60.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.005)


def test_the_schedule_is_dealt_round_robin_and_whole() -> None:
    sessions = [Session.of(LlmRequest(index=i, prompt="p", max_tokens=1)) for i in range(7)]
    plans = deal(sessions, 3, concurrency=4, max_in_flight=10, timeout_s=1.0, multi_turn=False)
    assert [[s.index for s in p.sessions] for p in plans] == [[0, 3, 6], [1, 4], [2, 5]]
    assert [p.concurrency for p in plans] == [2, 1, 1]  # the 4 users, none lost
    assert [p.max_in_flight for p in plans] == [10, 10, 10]  # each process's own threads
    # a closed loop of 2 users over 3 workers: 2 workers, every session still sent
    two = deal(sessions, 3, concurrency=2, max_in_flight=10, timeout_s=1.0, multi_turn=False)
    assert sorted(s.index for p in two for s in p.sessions) == list(range(7))
    assert [p.concurrency for p in two] == [1, 1]


def test_a_worker_behind_its_schedule_is_a_warning_naming_it() -> None:
    sessions = [Session.of(LlmRequest(index=i, prompt="p", max_tokens=1)) for i in range(40)]
    plans = deal(sessions, 2, concurrency=None, max_in_flight=8, timeout_s=1.0, multi_turn=False)

    def records(plan: WorkerPlan, lag_s: float) -> list[RequestRecord]:
        return [
            RequestRecord(index=s.index, scheduled_s=0.1, sent_s=0.1 + lag_s, end_s=0.5)
            for s in plan.sessions
        ]

    merged = merge_workers(
        [
            WorkerOutcome(plan=plans[0], records=records(plans[0], 0.001)),
            WorkerOutcome(plan=plans[1], records=records(plans[1], LAG_LIMIT_S * 2)),
        ],
        origin_s=0.0,
    )
    [warning] = merged.warnings
    assert warning.startswith("worker 1 fell behind its schedule (p99 send lag 100 ms")
    assert merged.unsent == 0 and not merged.notes


def test_two_workers_send_one_schedule_and_merge_to_the_same_percentiles() -> None:
    with FakeLLMServer(ttft_s=0.01, itl_s=0.002, output_tokens=8) as fake:
        workload = Workload(input_tokens=Lengths(16, 16), output_tokens=Lengths(8, 8), seed=3)
        harness = Harness(
            target=OpenAIEndpoint(fake.url, fake.model),
            workload=workload,
            count=40,
            workers=Workers(2),
        )
        arrivals = Arrivals(rate_per_s=40.0)
        trial = harness.trial(arrivals)
        planned = workload.sessions(arrivals, 40)
        assert len(fake.requests) == 40
    # every request once, at the schedule computed once (no worker shifted its slice)
    assert [r.index for r in trial.records] == list(range(40))
    assert [r.scheduled_s for r in trial.records] == [s.scheduled_s for s in planned]
    assert all(r.ok for r in trial.records)
    assert trial.summary.client_cpu_ms_per_request is not None
    # the trial's summary is exactly the one-process summary of the merged raw records
    again = summarise_trial(trial.records, slo=None, duration_s=trial.summary.duration_s)
    assert again.metrics == trial.summary.metrics
    assert again.client_lag_s == trial.summary.client_lag_s
    assert again.throughput == trial.summary.throughput
    # and of the records as stored, to their microsecond rounding
    stored = LlmTrial.model_validate_json(trial.model_dump_json())
    from_store = summarise_trial(stored.records, slo=None, duration_s=trial.summary.duration_s)
    for name in ("ttft_s", "tpot_s", "itl_s", "e2e_s"):
        for q in ("p50", "p90", "p99"):
            want = trial.summary.metrics.get(name).value(q)
            assert want is not None
            assert abs(from_store.metrics.get(name).value(q) - want) <= 2e-6  # type: ignore[operator]


def test_a_worker_killed_after_its_first_request_leaves_the_rest_not_sent() -> None:
    requests = [
        LlmRequest(index=i, prompt=f"request {i}", max_tokens=30) for i in range(12)
    ]  # worker w sends the indices w, w + 2, ... one at a time (one user each)
    killed: list[int] = []

    def kill_worker_1_once_it_sent(pids: list[int]) -> None:
        def watch() -> None:
            _wait_until(
                lambda: any(
                    int(r.body["prompt"].split()[1]) % 2 == 1
                    for r in fake.requests
                    if isinstance(r.body, dict) and "prompt" in r.body
                )
            )
            os.kill(pids[1], signal.SIGKILL)
            killed.append(pids[1])

        threading.Thread(target=watch, daemon=True).start()

    with FakeLLMServer(ttft_s=0.01, itl_s=0.01, output_tokens=30) as fake:
        outcome = run_scaled_trial(
            OpenAIEndpoint(fake.url, fake.model),
            [Session.of(r) for r in requests],
            2,
            concurrency=2,
            on_started=kill_worker_1_once_it_sent,
        )
    assert killed
    by_worker: dict[int, list[RequestRecord]] = {0: [], 1: []}
    for record in outcome.records:
        by_worker[record.index % 2].append(record)
    assert len(by_worker[0]) == 6 and all(r.ok for r in by_worker[0])  # the run is kept
    assert len(by_worker[1]) < 6
    assert outcome.unsent == 6 - len(by_worker[1])
    [note] = [n for n in outcome.notes if n.startswith("worker 1")]
    assert "died (exit code -9)" in note and "counted as not sent" in note
    # the trial names the processes that sent it: the one killed among them
    first, second = outcome.workers
    assert (first.worker, second.worker) == (0, 1) and second.pid == killed[0]
    assert first.died == "" and second.died == "died (exit code -9)"
    assert (first.requests, first.records) == (6, 6) and second.records == len(by_worker[1])
    assert second.label.startswith(f"worker 1: pid {killed[0]} on ")


@pytest.mark.parametrize("given", ["0", "ray:", "two", "k8s:2"])
def test_a_bad_worker_count_is_one_line(given: str, cli: CliRunner, tmp_path: Path) -> None:
    code, _, err = cli(
        "llm", "http://127.0.0.1:9", "--model", "m", "--rate", "1", "--workers", given
    )
    assert_one_line_error(code, err, "--workers")


def test_llm_with_two_workers_stores_every_request(cli: CliRunner, tmp_path: Path) -> None:
    store = tmp_path / "r.db"
    with FakeLLMServer(ttft_s=0.01, itl_s=0.002, output_tokens=4) as fake:
        code, _, err = cli(
            "llm", fake.url, "--model", fake.model, "--concurrency", "4", "--requests", "12",
            "--output-tokens", "4", "--workers", "2", "--no-server-metrics", "--store", store,
        )  # fmt: skip
    assert code == 0, err
    with ResultStore(store) as opened:
        run = opened.get_run("latest")
    assert run.settings["workers"] == "2"
    [trial] = run.documents_of("llm-trial")
    assert sorted(r["index"] for r in trial["records"]) == list(range(12))
    assert trial["summary"]["completed"] == 12
    sent = trial["client_workers"]  # the stored run names the processes that sent it
    assert [w["worker"] for w in sent] == [0, 1] and sum(w["records"] for w in sent) == 12
    assert all(w["pid"] and w["host"] and w["pid"] != os.getpid() for w in sent)


@pytest.mark.server
def test_two_ray_nodes_send_one_schedule() -> None:
    pytest.importorskip("ray")
    from accelscope.llm.scaleout_ray import run_ray_trial
    from accelscope.testing.ray_cluster import LocalRayCluster

    requests = [
        LlmRequest(index=i, prompt=f"request {i}", max_tokens=4, scheduled_s=0.05 * i)
        for i in range(16)
    ]
    placed: list[str] = []
    with (
        LocalRayCluster(["node_a", "node_b"]) as cluster,
        FakeLLMServer(ttft_s=0.01, itl_s=0.002, output_tokens=4) as fake,
    ):
        outcome = run_ray_trial(
            OpenAIEndpoint(fake.url, fake.model),
            [Session.of(r) for r in requests],
            2,
            address=cluster.address,
            on_started=placed.extend,
        )
    assert len(set(placed)) == 2  # one worker on each node
    assert [w.node for w in outcome.workers] == placed  # named in the trial, with its process
    assert all(w.pid and w.host and w.records == 8 for w in outcome.workers)
    assert [r.index for r in outcome.records] == list(range(16))
    assert [r.scheduled_s for r in outcome.records] == [r.scheduled_s for r in requests]
    assert all(r.ok for r in outcome.records) and outcome.unsent == 0
    # the shared clock: every request was sent on schedule, whichever node sent it
    assert max(r.sent_s - r.scheduled_s for r in outcome.records) < 0.05


@pytest.mark.slow
def test_ctrl_c_with_workers_keeps_what_they_sent_back(tmp_path: Path) -> None:
    store = tmp_path / "r.db"
    accelscope = Path(sys.executable).with_name("accelscope")
    with FakeLLMServer(ttft_s=0.05, itl_s=0.01, output_tokens=4) as fake:
        command = [
            str(accelscope), "llm", fake.url, "--model", fake.model, "--input-tokens", "4",
            "--output-tokens", "4", "--seed", "1", "--concurrency", "4", "--requests", "5000",
            "--workers", "2", "--no-server-metrics", "--store", str(store),
        ]  # fmt: skip
        process = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=restore_default_sigint,
        )
        try:
            # the fault: SIGINT to the command (not its workers) once both workers sent requests
            _wait_until(
                lambda: (
                    process.poll() is not None
                    or len([r for r in fake.requests if r.method == "POST"]) >= 21
                ),
                seconds=180,
            )
            assert process.poll() is None, process.communicate()
            process.send_signal(signal.SIGINT)
            _, err = process.communicate(timeout=120)
        finally:
            if process.poll() is None:
                process.kill()
                process.communicate()
    assert process.returncode == 130, err
    assert "Traceback" not in err
    with ResultStore(store) as opened:
        run = opened.get_run("latest")
    assert run.status == "interrupted"
    [trial] = run.documents_of("llm-trial")
    assert trial["interrupted"] is True
    finished = [r for r in trial["records"] if not r["error"] and not r["cancelled"]]
    assert len(finished) >= 10
    assert trial["summary"]["completed"] == len(finished)
