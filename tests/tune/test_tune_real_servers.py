"""``tune`` against the real servers: vLLM's CPU build on a random-weights Llama (the reference,
a setting that does not start, a dtype through the quality guard, teacher-forced on vLLM's
log-probabilities; accelscope killed mid-tune, then ``--resume``; four vLLM starts, the fewest
that test all of it), and ``transformers serve`` with its batching on
and off (a server killed while it is measured; a confirmation round). No server is left.

Covers: accelscope.commands.tune.workflow, accelscope.tune.tuner, accelscope.tune.quality,
accelscope.tune.confirm, accelscope.testing.real_llm_servers."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from accelscope.commands.tune.workflow import TuneRequest, tune
from accelscope.llm.client import OpenAIEndpoint
from accelscope.llm.documents import Arrivals, RequestRecord, Slo
from accelscope.llm.records import LlmRequest
from accelscope.llm.workload import Lengths, Workload
from accelscope.testing import CliRunner
from accelscope.testing.llm_model import build_tiny_llama
from accelscope.tune.documents import TuneConfig
from accelscope.tune.failures import FailureKind

pytestmark = pytest.mark.server  # real vLLM and `transformers serve` servers


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # vLLM's CPU attention needs a head size of 32 or more: 64 hidden / 2 heads
    return build_tiny_llama(tmp_path_factory.mktemp("tune-model") / "tiny", heads=2, kv_heads=1)


def _servers(marker: str) -> list[int]:
    found = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True)
    return [int(p) for p in found.stdout.split()]


def _configs(store: Path) -> list[TuneConfig]:
    if not store.exists():
        return []
    try:
        with sqlite3.connect(store) as db:
            rows = db.execute("SELECT payload_json FROM documents WHERE kind = 'tune-config'")
            return [TuneConfig.from_payload(json.loads(r[0])) for r in rows.fetchall()]
    except sqlite3.OperationalError:  # the tuner made the file, not yet its tables
        return []


VLLM_ARGS = [
    "--engine", "vllm", "--engine-args", "--enforce-eager --max-model-len 2048",
    "--kv-cache-gib", "1", "--space", "max-num-seqs=8",
    "--candidate", "max-num-seqs=0", "--candidate", "max-num-seqs=8,dtype=float32",
    "--reference", "max-num-seqs=8", "--concurrency", "8", "--requests", "16",
    "--input-tokens", "64", "--output-tokens", "16", "--slo", "ttft=60s",
    "--slo-percentile", "90", "--confirm-rounds", "0", "--quality-threshold", "0.5",
]  # fmt: skip


@pytest.mark.timeout(600)  # four vLLM starts (one killed, one refused): 187 s quiet here with five
def test_vllm_refused_setting_quality_guard_and_resume(
    tiny_model: Path, tmp_path: Path, cli: CliRunner
) -> None:
    store = tmp_path / "store.db"
    args = ["--model-dir", str(tiny_model), *VLLM_ARGS, "--tokenizer", str(tiny_model)]
    killed = subprocess.Popen(
        [sys.executable, "-m", "accelscope.cli", "tune", *args, "--store", str(store)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    # the fault: kill -9 of accelscope once the reference is stored and the next server's
    # process is started (a registry record of a server not seen while the reference ran)
    registry = tmp_path / "servers"
    seen: set[str] = set()
    deadline = time.monotonic() + 900
    while not _configs(store):  # the reference measured and stored
        seen |= {p.name for p in registry.glob("server-*.json")}
        assert killed.poll() is None and time.monotonic() < deadline
        time.sleep(0.2)
    while not {p.name for p in registry.glob("server-*.json")} - seen:
        assert killed.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    killed.send_signal(signal.SIGKILL)
    killed.wait()
    deadline = time.monotonic() + 60
    while _servers(f"--model {tiny_model}") and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not _servers(f"--model {tiny_model}")  # kill -9 of accelscope stopped its server
    code, out, err = cli("tune", *args, "--store", store, "--resume")
    assert code == 0, err
    assert "1 configurations already measured" in err
    assert "max-num-seqs=8: starting" not in err  # the stored reference is not measured again
    by_key = {c.key: c for c in _configs(store)}
    assert set(by_key) == {"max-num-seqs=8", "max-num-seqs=0", "max-num-seqs=8,dtype=float32"}
    eight = by_key["max-num-seqs=8"]
    assert eight.status == "measured" and eight.startup_s and eight.goodput_tokens_per_s
    assert eight.server_config is not None and eight.server_config.block_size_tokens == 128
    refused = by_key["max-num-seqs=0"]
    assert refused.status == "failed" and refused.failure is FailureKind.INVALID
    assert refused.log_tail
    fp32 = by_key["max-num-seqs=8,dtype=float32"]
    assert fp32.quality is not None and fp32.quality.method == "teacher-forced"
    assert fp32.quality.positions > 50
    assert fp32.status == ("measured" if fp32.quality.agreement >= 0.5 else "rejected")
    assert eight.reference_answers is not None and len(eight.reference_answers.answers) == 8
    # the winner is what was measured best (fp32 against the reference's dtype: which wins on
    # a CPU shared with other work is not a known answer); the tuner must rank what it
    # measured and print the winner's command
    measured = [c for c in by_key.values() if c.usable]
    winner = max(measured, key=lambda c: c.goodput_tokens_per_s or 0.0)
    assert "★" in out  # the winner is marked in the table
    seqs = winner.values["max-num-seqs"]
    assert "vllm.entrypoints.openai.api_server" in out and f"--max-num-seqs {seqs}" in out
    assert not _servers(f"--model {tiny_model}")


def test_transformers_batching_on_off_and_a_server_killed_mid_measurement(
    tiny_model: Path, tmp_path: Path, environment: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    registry = tmp_path / "servers"
    # the fault: the third server (continuous-batching=off) is killed once the client has
    # received the first whole answer of its trial, from inside the client thread (23 to go)
    servers: list[int] = []  # process groups in the order their first answer arrived
    lock = threading.Lock()
    original = OpenAIEndpoint.stream

    def stream(self: OpenAIEndpoint, request: LlmRequest, **kwargs: Any) -> RequestRecord:
        record = original(self, request, **kwargs)
        if request.index < 0 or not record.ok:  # the check, or a request that failed
            return record
        for path in registry.glob("server-*.json"):
            data = json.loads(path.read_text())
            if data["port"] != self.port:
                continue
            with lock:
                if data["pid"] not in servers:
                    servers.append(data["pid"])
                    if len(servers) == 3:
                        os.killpg(data["pid"], signal.SIGKILL)
        return record

    monkeypatch.setattr(OpenAIEndpoint, "stream", stream)
    outcome = tune(
        TuneRequest(
            engine="transformers",
            model=tiny_model,
            spaces=("continuous-batching=on,off",),
            engine_args=("--device", "cpu", "--cb-num-blocks", "64"),
            workload=Workload(input_tokens=Lengths(16, 16), output_tokens=Lengths(16, 16)),
            fixed=Arrivals(concurrency=4),
            requests=24,
            slo=Slo.parse("ttft=30s", 90.0),
            confirm_rounds=1,
            startup_timeout_s=300.0,
        ),
        store_path=tmp_path / "store.db",
        environment=environment,  # type: ignore[arg-type]
    )
    assert len(servers) >= 3  # the kill happened, in the third server's trial
    run = outcome.document
    keys = [c.key for c in run.configs]
    assert keys == ["engine defaults", "continuous-batching=on", "continuous-batching=off"]
    defaults, batched, killed = run.configs
    assert defaults.status == batched.status == "measured"
    assert defaults.goodput_tokens_per_s and batched.goodput_tokens_per_s
    assert killed.status == "failed" and killed.failure is FailureKind.DIED
    assert killed.trials and killed.trials[0].summary.errors > 0  # what it measured is kept
    # the best two measured again in one alternated round, each in a fresh server: one round
    # has no spread between server starts, so it cannot tell, and says what would
    verdict = run.verdict
    assert verdict is not None and verdict.rounds == 1 and verdict.ratio is None
    assert verdict.text.startswith("cannot tell") and "--confirm-rounds 2" in verdict.text
    assert not _servers(f"serve {tiny_model}")
