"""``llm`` runs stored before the typed documents (``tests/data/store-llm-2026-11.sqlite``, made
by ``tests/data/make_llm_store.py`` at commit 26fb54c, when the documents were plain dicts)
still load: every stored document reads into :class:`LlmRun`, :class:`LlmTrial` and
:class:`LlmCapacity` with nothing lost, ``runs show`` prints both runs, and ``compare`` reads
them, against each other and against runs stored now with the same settings.

Covers: accelscope.llm.documents, accelscope.store.sqlite, accelscope.cli._runs,
accelscope.commands.compare.workflow."""

from __future__ import annotations

import hashlib
import json
import shutil
import statistics
from pathlib import Path
from typing import Any

import pytest

from accelscope.documents import LlmCapacity
from accelscope.llm.documents import Arrivals, LlmRun, LlmTrial, Slo
from accelscope.store.sqlite import ResultStore, RunRecord
from accelscope.testing import CliRunner, assert_one_line_error
from accelscope.testing.fake_llm_server import FakeLLMServer

OLD_STORE = Path(__file__).resolve().parents[2] / "data" / "store-llm-2026-11.sqlite"
CAPACITY_RUN = "20261126-064700-99b6"
"""20 req/s and concurrency 4 at an SLO, then a concurrency capacity search of two trials."""
FIXED_RUN = "20261126-064707-c5a9"
"""One trial at concurrency 2, no SLO."""
WORKLOAD = (
    "--input-tokens", "16", "--output-tokens", "8", "--prefix", "shared=8",
    "--prefix-hit-rate", "0.5",
)  # fmt: skip
"""The fixture's workload (its seed, 7, aside: compare leaves the seed out)."""
SLO = ("--slo", "ttft=200ms,tpot=50ms", "--slo-percentile", "90")


@pytest.fixture
def store(tmp_path: Path) -> Any:
    """A copy of the old store (opening a store may migrate it); the original is untouched."""
    before = hashlib.sha256(OLD_STORE.read_bytes()).hexdigest()
    copy = tmp_path / "store.sqlite"
    shutil.copy(OLD_STORE, copy)
    yield copy
    assert hashlib.sha256(OLD_STORE.read_bytes()).hexdigest() == before


def _runs(store: Path) -> dict[str, RunRecord]:
    with ResultStore(store) as opened:
        return {run_id: opened.get_run(run_id) for run_id in (CAPACITY_RUN, FIXED_RUN)}


def _lost(old: Any, new: Any, path: str = "") -> list[str]:
    """Where ``new`` (a model dumped as JSON) lacks or changes what ``old`` (the stored
    payload) holds; keys added since may be in ``new`` only."""
    if isinstance(old, dict):
        if not isinstance(new, dict):
            return [f"{path}: {new!r} is not an object"]
        return [
            found
            for key, value in old.items()
            for found in (
                _lost(value, new[key], f"{path}.{key}") if key in new else [f"{path}.{key} lost"]
            )
        ]
    if isinstance(old, list):
        if not isinstance(new, list) or len(old) != len(new):
            return [f"{path}: {old!r} != {new!r}"]
        return [f for i, (a, b) in enumerate(zip(old, new, strict=True)) for f in _lost(a, b)]
    return [] if old == new else [f"{path}: {old!r} != {new!r}"]


def test_every_stored_document_reads_into_the_typed_documents(store: Path) -> None:
    for run in _runs(store).values():
        assert run.kind == "llm" and run.status == "complete"
        [payload] = run.documents_of("llm")
        document = LlmRun.from_payload(payload, f"run {run.id}'s llm document")
        assert _lost(payload, document.model_dump(mode="json")) == []
        stored = run.documents_of("llm-trial")
        trials = [LlmTrial.from_payload(p, f"run {run.id}'s llm-trial") for p in stored]
        for raw, trial in zip(stored, trials, strict=True):
            assert _lost(raw, trial.model_dump(mode="json")) == []
        # the run's summary holds the same trials, without their records and samples
        assert [t.without_records() for t in trials] == document.trials
        assert document.model == "fake-model" and document.target.kind == "openai-http"
        assert document.target.url and document.target.api == "completions"
        assert document.workload.kind == "synthetic" and document.workload.seed == 7
        assert document.workload.prefix == "shared=8 (hit rate 0.5)"
        assert set(document.definitions) >= {"ttft_s", "tpot_s", "itl_s", "e2e_s", "goodput"}
        assert document.floor_why is not None and document.floor_why.startswith("not measured")
        for trial in trials:
            summary = trial.summary
            assert len(trial.records) == summary.requests == trial.requests_planned
            assert summary.completed == summary.requests and summary.errors == 0
            assert all(r.ok and r.output_tokens == 8 for r in trial.records)
            assert {r.tokens_source for r in trial.records} == {"usage"}
            assert summary.tokens is not None
            assert (summary.tokens.prompt_mean, summary.tokens.output_mean) == (16.0, 8.0)
            assert summary.window is not None
            assert summary.metrics.ttft_s.n == summary.window.requests
            assert len(trial.samples["ttft_s"]) == summary.window.requests
            ttft = summary.metrics.ttft_s
            assert ttft.p50 == pytest.approx(statistics.median(trial.samples["ttft_s"]), abs=1e-6)
            assert isinstance(ttft.p50_ci, tuple) and ttft.p99_claim is not None
            assert ttft.unclaimed_why("p99").startswith("not enough requests to claim p99")
            assert summary.throughput is not None and summary.throughput.output_tokens_per_s > 0
            assert summary.client_lag_s is not None and not summary.client_bound
            server = trial.server_metrics
            assert server.available and server.server == "vllm"
            assert server.prefix_cache is not None and server.prefix_cache.hit_rate is not None
            assert trial.floor is None and not trial.interrupted

    runs = _runs(store)
    capacity_run = LlmRun.from_payload(runs[CAPACITY_RUN].documents_of("llm")[0])
    assert [t.label for t in capacity_run.trials] == [
        "20 req/s",
        "concurrency 4",
        "concurrency 1",
        "concurrency 2",
    ]
    assert [t.role for t in capacity_run.trials] == ["fixed", "fixed", "capacity", "capacity"]
    assert capacity_run.trials[0].arrivals == Arrivals(rate_per_s=20.0)
    assert [t.arrivals.load_kind for t in capacity_run.trials[1:]] == ["concurrency"] * 3
    assert capacity_run.slo == Slo(ttft_s=0.2, tpot_s=0.05, percentile=90.0)
    assert capacity_run.slo_label == "p90 TTFT <= 200 ms, TPOT <= 50 ms"
    # 30 requests cannot claim a p90 (64 needed); the capacity trials were sized for it
    assert [t.summary.slo_state for t in capacity_run.trials] == [
        "unclaimed",
        "unclaimed",
        "met",
        "met",
    ]
    goodput = capacity_run.trials[3].summary.goodput
    assert goodput is not None and goodput.attainment == 1.0
    capacity = capacity_run.capacity
    assert capacity is not None and capacity.label == "concurrency 2"
    assert [(p.load, p.passed) for p in capacity.points] == [(1.0, True), (2.0, True)]
    assert "budget (2)" in capacity.stopped
    assert capacity.good_output_tokens_per_s == pytest.approx(goodput.output_tokens_per_s)
    [stored_capacity] = runs[CAPACITY_RUN].documents_of("llm-capacity")
    llm_capacity = LlmCapacity.from_payload(stored_capacity)
    assert llm_capacity.valid and llm_capacity.unit == "concurrency"
    assert llm_capacity.capacity == capacity.capacity
    assert llm_capacity.good_output_tokens_per_s == capacity.good_output_tokens_per_s

    fixed_run = LlmRun.from_payload(runs[FIXED_RUN].documents_of("llm")[0])
    [trial] = fixed_run.trials
    assert trial.label == "concurrency 2" and trial.arrivals == Arrivals(concurrency=2)
    assert fixed_run.slo is None and fixed_run.slo_label == "none"
    assert fixed_run.capacity is None and runs[FIXED_RUN].documents_of("llm-capacity") == []
    assert trial.summary.slo_state == "no SLO" and trial.summary.goodput is None


def test_runs_show_prints_both_stored_runs(store: Path, cli: CliRunner) -> None:
    shown = {
        CAPACITY_RUN: ["20 req/s", "concurrency 4", "concurrency 1", "concurrency 2", "met"],
        FIXED_RUN: ["concurrency 2", "SLO none"],
    }
    for run_id, texts in shown.items():
        code, out, err = cli("runs", "show", run_id, "--store", store)
        assert code == 0, err
        assert "Traceback" not in err
        flat = " ".join(out.split())  # the table may wrap
        assert run_id in flat and "TTFT p50" in flat and "not measured" in flat
        for text in texts:
            assert text in flat, (run_id, text)
        if run_id == CAPACITY_RUN:
            assert "capacity at p90 TTFT <= 200 ms, TPOT <= 50 ms: concurrency 2" in flat


def _compare(cli: CliRunner, store: Path, baseline: str, candidate: str) -> dict[str, Any]:
    code, out, err = cli("compare", baseline, candidate, "--store", store, "--json")
    assert code == 0, err
    found: dict[str, Any] = json.loads(out)
    return found


def _new_run(cli: CliRunner, server: FakeLLMServer, store: Path, *load: str) -> str:
    code, out, err = cli(
        "llm", server.url, "--model", server.model, *WORKLOAD, *load, "--store", store,
        "--json", "--no-server-metrics",
    )  # fmt: skip
    assert code == 0, err
    run_id: str = json.loads(out)["run_id"]
    return run_id


def test_compare_reads_the_stored_runs(store: Path, cli: CliRunner) -> None:
    # the two stored runs share no configuration (their SLOs and trial roles differ): the
    # answer names what each run measured, read from its documents
    code, _out, err = cli("compare", CAPACITY_RUN, FIXED_RUN, "--store", store, "--json")
    assert_one_line_error(
        code,
        err,
        "no measured configuration in common",
        "baseline: 20 req/s, capacity (concurrency), concurrency 1, concurrency 2, concurrency 4",
        "candidate: concurrency 2",
    )
    # runs stored now with the same settings match the old ones, trial for trial
    with FakeLLMServer(ttft_s=0.02, itl_s=0.005) as server:
        fixed = _new_run(cli, server, store, "--concurrency", "2", "--requests", "12")
        with_slo = _new_run(cli, server, store, "--concurrency", "4", "--requests", "30", *SLO)
    runs = _runs(store)
    pairs = ((FIXED_RUN, fixed, "concurrency 2"), (CAPACITY_RUN, with_slo, "concurrency 4"))
    for old, new, label in pairs:
        compared = _compare(cli, store, old, new)
        assert compared["kind"] == "llm"
        rows = {row["metric"]: row for row in compared["rows"]}
        assert {row["label"] for row in compared["rows"]} == {label}
        assert {"TTFT p50", "TPOT p50", "E2E p99"} <= set(rows)
        trials = [LlmTrial.from_payload(p) for p in runs[old].documents_of("llm-trial")]
        [stored] = [t for t in trials if t.label == label]
        # the baseline's figures are the old trial's stored samples
        for metric, key in (("TTFT p50", "ttft_s"), ("TPOT p50", "tpot_s")):
            assert rows[metric]["baseline"] == pytest.approx(
                statistics.median(stored.samples[key]), rel=1e-3
            )
            assert rows[metric]["candidate"] > 0 and rows[metric]["verdict"]
