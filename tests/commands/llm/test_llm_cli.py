"""``accelscope llm`` end to end against :class:`FakeLLMServer`: trials stored with their raw
records, ``--json``, ``runs show``, the capacity search; every bad input one line and exit 2;
faults in the middle of a run recorded per request (the run completes with what it measured);
Ctrl-C keeps what finished.

Covers: accelscope.commands.llm.workflow, accelscope.cli._llm, accelscope.llm.harness,
accelscope.llm.client, accelscope.llm.capacity."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from accelscope.llm.client import OpenAIEndpoint
from accelscope.llm.harness import Harness
from accelscope.llm.records import RequestRecord
from accelscope.llm.summary import Slo, summarise_trial
from accelscope.llm.workload import Arrivals, Lengths, Workload, build_requests
from accelscope.processes import free_port
from accelscope.store.sqlite import ResultStore, RunRecord
from accelscope.testing import CliRunner, assert_one_line_error, restore_default_sigint
from accelscope.testing.fake_llm_server import FakeLLMServer

# the CLI as a user's shell finds it: beside the interpreter running the suite
ACCELSCOPE = Path(sys.executable).with_name("accelscope")
QUICK = ("--input-tokens", "4", "--output-tokens", "4", "--seed", "1")


def _run(store: Path, run_id: str = "latest") -> RunRecord:
    with ResultStore(store) as opened:
        return opened.get_run(run_id)


def _llm(cli: CliRunner, url: str, store: Path, *extra: str, model: str = "fake-model") -> Any:
    return cli("llm", url, "--model", model, *QUICK, "--store", store, *extra)


@pytest.fixture
def server() -> Any:
    with FakeLLMServer(ttft_s=0.01, itl_s=0.002) as fake:
        yield fake


class FaultAfterCheck(FakeLLMServer):
    """Healthy for the command's one check request, then plays ``later`` (a ``fault=``) on
    every generation request that follows: the faults of a server that fails mid-run."""

    def __init__(self, later: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._later = self._parse_fault(later)

    def _admit(self) -> bool | None:
        with self._lock:
            if self._admitted >= 1:  # the check's probe has been admitted
                self._fault_kind, self._fault_value_int, self._fault_value_float = self._later
        return super()._admit()


# -- trials stored ---------------------------------------------------------------------------


def test_rate_and_concurrency_trials_are_stored(
    server: FakeLLMServer, tmp_path: Path, cli: CliRunner
) -> None:
    store = tmp_path / "r.db"
    code, out, err = _llm(
        cli, server.url, store, "--rate", "40", "--concurrency", "3", "--requests", "8"
    )
    assert code == 0, err
    assert "Traceback" not in err
    assert "stored run" in out
    run = _run(store)
    assert run.kind == "llm" and run.status == "complete"
    assert run.settings["rates"] == [40.0] and run.settings["concurrencies"] == [3]
    trials = run.documents_of("llm-trial")
    assert [t["label"] for t in trials] == ["40 req/s", "concurrency 3"]
    for trial in trials:
        records = trial["records"]
        assert len(records) == 8
        assert all(not r["error"] and r["output_tokens"] == 4 for r in records)
        assert all(r["tokens_source"] == "usage" for r in records)
        assert trial["summary"]["completed"] == 8 and trial["summary"]["errors"] == 0
        assert trial["interrupted"] is False
        assert trial["server_metrics"]["available"] is True
    [document] = run.documents_of("llm")
    assert [t["label"] for t in document["trials"]] == ["40 req/s", "concurrency 3"]
    assert all(not t.get("records") for t in document["trials"])  # the summary holds none
    assert document["target"]["url"] == server.url and document["model"] == "fake-model"
    assert server.concurrent_max >= 3
    # one check request, then 8 + 8
    assert len([r for r in server.requests if r.method == "POST"]) == 17


def test_json_output_carries_the_definitions(
    server: FakeLLMServer, tmp_path: Path, cli: CliRunner
) -> None:
    store = tmp_path / "r.db"
    code, out, err = _llm(
        cli, server.url, store, "--concurrency", "2", "--requests", "6", "--json", "--api", "chat"
    )
    assert code == 0, err
    document = json.loads(out)
    assert document["run_id"] == _run(store).id
    for key in ("ttft_s", "tpot_s", "itl_s", "e2e_s", "goodput", "tail_claim"):
        assert document["definitions"][key]
    assert document["target"]["api"] == "chat"
    [trial] = document["trials"]
    assert trial["summary"]["metrics"]["ttft_s"]["p50"] >= 0.01
    assert err == ""  # --json: nothing but JSON, no progress lines


def test_runs_show_prints_the_table(server: FakeLLMServer, tmp_path: Path, cli: CliRunner) -> None:
    store = tmp_path / "r.db"
    code, _out, err = _llm(cli, server.url, store, "--concurrency", "1", "--requests", "4")
    assert code == 0, err
    run_id = _run(store).id
    code, out, err = cli("runs", "show", run_id, "--store", store)
    assert code == 0, err
    assert run_id in out and "TTFT p50" in out and "concurrency 1" in out


def test_capacity_search_is_stored(server: FakeLLMServer, tmp_path: Path, cli: CliRunner) -> None:
    store = tmp_path / "r.db"
    code, out, err = _llm(
        cli,
        server.url,
        store,
        "--capacity",
        "rate",
        "--slo",
        "ttft=500ms,e2e=2s",
        "--slo-percentile",
        "90",
        "--capacity-start",
        "40",
        "--capacity-trials",
        "2",
        "--requests",
        "60",
        "--json",
    )
    assert code == 0, err
    document = json.loads(out)
    capacity = document["capacity"]
    assert capacity["capacity"] == 80.0, capacity  # every load passed; the budget ran out
    assert "budget (2)" in capacity["stopped"]
    assert [p["load"] for p in capacity["points"]] == [40.0, 80.0]
    assert capacity["good_output_tokens_per_s"] > 0
    run = _run(store)
    [stored] = run.documents_of("llm-capacity")
    assert stored["capacity"] == 80.0 and stored["valid"] is True
    assert stored["slo"]["percentile"] == 90.0
    assert [t["role"] for t in run.documents_of("llm-trial")] == ["capacity", "capacity"]


def test_capacity_trials_are_sized_for_the_tail_claim(
    server: FakeLLMServer, tmp_path: Path, cli: CliRunner
) -> None:
    """``--requests 10`` is fewer than a p90 claim needs: each capacity trial is enlarged to
    what the SLO verdict needs, so a server that meets the SLO easily has a capacity."""
    store = tmp_path / "r.db"
    code, out, err = _llm(
        cli,
        server.url,
        store,
        "--capacity",
        "rate",
        "--slo",
        "ttft=500ms",
        "--slo-percentile",
        "90",
        "--capacity-start",
        "40",
        "--capacity-trials",
        "2",
        "--requests",
        "10",
        "--json",
    )
    assert code == 0, err
    document = json.loads(out)
    why = [p["why"] for p in document["capacity"]["points"]]
    assert document["capacity"]["capacity"] is not None, why


@pytest.mark.parametrize("percentile", [90.0, 99.0])
def test_every_capacity_trial_has_enough_steady_requests_to_claim(percentile: float) -> None:
    """A capacity trial is sized so that, with no request over the SLO, its tail is claimed.
    The verdict counts the steady window only (arrivals after 10 % of the arrival span), whose
    share of a Poisson schedule varies from seed to seed: the sizing must hold for every seed,
    not for the average one."""
    slo = Slo(ttft_s=1.0, percentile=percentile)
    endpoint = OpenAIEndpoint("http://127.0.0.1:1", "m")  # never sent to
    harness = Harness(target=endpoint, workload=Workload(), slo=slo, count=10)
    count = harness.trial_count("capacity")
    endpoint.close()
    unclaimed = []
    for seed in range(20):
        workload = Workload(input_tokens=Lengths(2, 2), seed=seed)
        requests = build_requests(workload, Arrivals(rate_per_s=10.0), count)
        records = [
            RequestRecord(
                index=r.index,
                scheduled_s=r.scheduled_s or 0.0,
                sent_s=r.scheduled_s or 0.0,
                first_token_s=(r.scheduled_s or 0.0) + 0.01,
                end_s=(r.scheduled_s or 0.0) + 0.02,
                chunk_times_s=[(r.scheduled_s or 0.0) + 0.01],
                output_tokens=1,
                tokens_source="usage",
            )
            for r in requests
        ]
        verdict = summarise_trial(records, slo=slo).slo
        assert verdict is not None
        term = verdict.terms["ttft_s"]
        assert term.over == 0
        if term.state != "met":
            unclaimed.append((seed, term.n, term.why))
    assert not unclaimed, f"{count} requests per trial; unclaimed: {unclaimed}"


# -- bad input: one line, exit 2 -------------------------------------------------------------


def test_unreachable_endpoint(tmp_path: Path, cli: CliRunner) -> None:
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    code, _out, err = _llm(cli, url, tmp_path / "r.db", "--rate", "1", "--requests", "2")
    assert_one_line_error(code, err, url, "refused")
    assert not (tmp_path / "r.db").exists()


def test_wrong_path(server: FakeLLMServer, tmp_path: Path, cli: CliRunner) -> None:
    url = f"{server.url}/bogus"
    code, _out, err = _llm(cli, url, tmp_path / "r.db", "--rate", "1", "--requests", "2")
    # the URL named is the one requested (the prefix once, not /bogus/bogus/...)
    assert_one_line_error(code, err, f"{server.url}/bogus/v1/completions:", "HTTP 404")


def test_a_trailing_v1_is_accepted_and_named_once(
    server: FakeLLMServer, tmp_path: Path, cli: CliRunner
) -> None:
    store = tmp_path / "r.db"
    code, _out, err = _llm(cli, f"{server.url}/v1", store, "--concurrency", "1", "--requests", "2")
    assert code == 0, err
    assert {r.path for r in server.requests if r.method == "POST"} == {"/v1/completions"}
    code, _out, err = _llm(
        cli, f"{server.url}/v1", store, "--concurrency", "1", "--requests", "2", model="nope"
    )
    assert_one_line_error(code, err, f"{server.url}/v1/completions:", "nope")
    assert "/v1/v1/" not in err


@pytest.mark.parametrize(
    ("fault", "mentions"),
    [
        ("status:503", ["HTTP 503", "unwell"]),
        ("not-openai", ["not a streaming OpenAI response", "text/html"]),
    ],
)
def test_a_server_that_cannot_serve(
    fault: str, mentions: list[str], tmp_path: Path, cli: CliRunner
) -> None:
    with FakeLLMServer(ttft_s=0.01, itl_s=0.002, fault=fault) as fake:
        code, _out, err = _llm(cli, fake.url, tmp_path / "r.db", "--rate", "1", "--requests", "2")
    assert_one_line_error(code, err, *mentions)
    assert not (tmp_path / "r.db").exists()


def test_a_model_the_server_does_not_serve(
    server: FakeLLMServer, tmp_path: Path, cli: CliRunner
) -> None:
    code, _out, err = _llm(
        cli, server.url, tmp_path / "r.db", "--rate", "1", "--requests", "2", model="nope"
    )
    assert_one_line_error(code, err, "HTTP 404", "nope")


@pytest.mark.parametrize(
    ("extra", "mentions"),
    [
        (["--rate=-1"], ["--rate", "positive"]),
        (["--rate", "0"], ["--rate", "positive"]),
        (["--rate", "1,0"], ["--rate", "positive"]),
        (["--rate", "fast"], ["--rate"]),
        (["--concurrency", "0"], ["--concurrency"]),
        (["--rate", "1", "--slo", "ttft"], ["--slo"]),
        (["--rate", "1", "--slo", "ttft=soon"], ["--slo", "ttft"]),
        (["--rate", "1", "--slo", "latency=1s"], ["--slo"]),
        (["--rate", "1", "--slo", "ttft=1s", "--slo-percentile", "100"], ["--slo-percentile"]),
        (["--capacity", "rate"], ["--capacity", "--slo"]),
        (["--capacity", "fastest", "--slo", "ttft=1s"], ["--capacity"]),
        (["--rate", "1", "--api", "bogus"], ["--api", "bogus"]),
        (["--rate", "1", "--input-tokens", "0"], ["--input-tokens"]),
        (["--rate", "1", "--prefix", "warm"], ["--prefix"]),
        (["--rate", "1", "--requests", "0"], ["--requests"]),
        (["--rate", "1", "--timeout", "0"], ["duration"]),
        ([], ["--rate", "--concurrency"]),
    ],
)
def test_bad_settings(
    extra: list[str], mentions: list[str], server: FakeLLMServer, tmp_path: Path, cli: CliRunner
) -> None:
    code, _out, err = _llm(cli, server.url, tmp_path / "r.db", *extra)
    assert_one_line_error(code, err, *mentions)
    assert not (tmp_path / "r.db").exists()
    assert not [r for r in server.requests if r.method == "POST"]  # nothing was sent


def test_an_empty_prompts_file(server: FakeLLMServer, tmp_path: Path, cli: CliRunner) -> None:
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("\n")
    code, _out, err = _llm(cli, server.url, tmp_path / "r.db", "--rate", "1", "--prompts", prompts)
    assert_one_line_error(code, err, "prompts.jsonl", "prompts file is empty")


def test_neither_url_nor_hf_model(tmp_path: Path, cli: CliRunner) -> None:
    code, _out, err = cli("llm", "--model", "x", "--rate", "1", "--store", tmp_path / "r.db")
    assert_one_line_error(code, err, "server URL", "--hf-model")


def test_a_url_without_a_model_name(server: FakeLLMServer, tmp_path: Path, cli: CliRunner) -> None:
    code, _out, err = cli("llm", server.url, "--rate", "1", "--store", tmp_path / "r.db")
    assert_one_line_error(code, err, "--model")


# -- faults in the middle of a run -----------------------------------------------------------


def _faulty_run(cli: CliRunner, url: str, store: Path, *extra: str) -> dict[str, Any]:
    code, out, err = _llm(cli, url, store, "--concurrency", "2", "--requests", "4", *extra)
    assert code == 0, err
    assert "Traceback" not in err and "internal error" not in err
    assert "stored run" in out
    run = _run(store)
    assert run.status == "complete"
    [trial] = run.documents_of("llm-trial")
    assert len(trial["records"]) == 4
    return trial


@pytest.mark.parametrize(
    ("fault", "mention"),
    [
        ("malformed-sse", "malformed SSE data"),
        ("stop-mid-stream", ""),
    ],
)
def test_a_stream_that_breaks_is_an_error_per_request(
    fault: str, mention: str, tmp_path: Path, cli: CliRunner
) -> None:
    with FaultAfterCheck(fault, ttft_s=0.01, itl_s=0.002) as fake:
        trial = _faulty_run(cli, fake.url, tmp_path / "r.db")
    summary = trial["summary"]
    assert summary["errors"] == 4 and summary["completed"] == 0
    assert sum(kind["count"] for kind in summary["error_kinds"]) == 4
    assert all(mention in kind["error"] for kind in summary["error_kinds"])
    for record in trial["records"]:
        assert record["error"] and "\n" not in record["error"]
        assert record["first_token_s"] is not None  # the first chunk did arrive


def test_a_request_past_the_timeout_is_an_error(tmp_path: Path, cli: CliRunner) -> None:
    with FakeLLMServer(ttft_s=0.01, itl_s=0.002, fault="slow-first:0.6") as fake:
        trial = _faulty_run(cli, fake.url, tmp_path / "r.db", "--timeout", "200ms")
    summary = trial["summary"]
    assert summary["errors"] == 4
    assert summary["error_kinds"] == [{"error": "timeout after 0.2 s", "count": 4}]
    for record in trial["records"]:
        assert record["end_s"] - record["sent_s"] < 0.5


def test_a_server_that_dies_during_the_run(tmp_path: Path, cli: CliRunner) -> None:
    # the check is request 1; requests 2..4 are answered, then the server is gone
    with FakeLLMServer(ttft_s=0.01, itl_s=0.002, fault="die-after:4") as fake:
        code, out, err = _llm(
            cli, fake.url, tmp_path / "r.db", "--concurrency", "1", "--requests", "6"
        )
    assert code == 0, err
    run = _run(tmp_path / "r.db")
    assert run.status == "complete"
    [trial] = run.documents_of("llm-trial")
    summary = trial["summary"]
    assert summary["completed"] == 3 and summary["errors"] == 3
    assert [bool(r["error"]) for r in trial["records"]] == [False] * 3 + [True] * 3
    # a request that reached the server while it was dying reads as disconnected (accepted,
    # closed unanswered), one sent after it died as refused: how many of each is a race
    kinds = summary["error_kinds"]
    assert all("Refused" in k["error"] or "Disconnected" in k["error"] for k in kinds), kinds
    assert "stored run" in out


# -- Ctrl-C ----------------------------------------------------------------------------------


@pytest.mark.slow
def test_ctrl_c_keeps_what_was_measured(tmp_path: Path) -> None:
    store = tmp_path / "r.db"
    with FakeLLMServer(ttft_s=0.05, itl_s=0.01) as fake:
        command = [
            str(ACCELSCOPE),
            "llm",
            fake.url,
            "--model",
            fake.model,
            *QUICK,
            "--concurrency",
            "2",
            "--requests",
            "5000",
            "--store",
            str(store),
            "--json",
        ]
        process = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=restore_default_sigint,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        try:
            # the fault: SIGINT once the fake server has received the check and 10 of the
            # trial's requests (closed loop at 2: at least 8 of them answered), 4,990 to go
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and process.poll() is None:
                posts = [r for r in fake.requests if r.method == "POST"]
                if len(posts) >= 11:
                    break
                time.sleep(0.02)
            assert process.poll() is None, process.communicate()
            assert len([r for r in fake.requests if r.method == "POST"]) >= 11
            process.send_signal(signal.SIGINT)
            _out, err = process.communicate(timeout=60)
        finally:
            if process.poll() is None:
                process.kill()
                process.communicate()
    assert process.returncode == 130, err
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "interrupted" in lines[0], err
    run = _run(store)
    assert run.status == "interrupted"
    assert run.id in lines[0]
    [trial] = run.documents_of("llm-trial")
    assert trial["interrupted"] is True
    finished = [r for r in trial["records"] if not r["error"] and not r["cancelled"]]
    assert len(finished) >= 5
    assert all(r["output_tokens"] == 4 for r in finished)
    assert trial["summary"]["completed"] == len(finished)
    assert not [r for r in trial["records"] if r["error"]]  # cut requests are cancelled
    assert run.documents_of("llm") == []
    # runs show prints the finished trial of the interrupted run
    shown = subprocess.run(
        [str(ACCELSCOPE), "runs", "show", run.id, "--store", str(store)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert shown.returncode == 0, shown.stderr
    assert "interrupted" in shown.stdout and "concurrency 2" in shown.stdout
