"""Saturation (issue 42): a rate or concurrency sweep stops at the first step that saturates
the server and says why; ``--past-saturation`` measures every step. The rules on summaries
built by hand (where each threshold sits), then end to end against the fake server with one
generation slot (``max_running=1``: its capacity is known from its scripted token times).

Covers: accelscope.llm.saturation, accelscope.commands.llm.workflow."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from accelscope.llm.documents import (
    Distribution,
    Metrics,
    RequestRecord,
    Throughput,
    TrialSummary,
    Window,
)
from accelscope.llm.saturation import (
    MARGINAL_GAIN,
    TTFT_RISE,
    concurrency_saturated,
    rate_saturated,
)
from accelscope.store.sqlite import ResultStore
from accelscope.testing import CliRunner
from accelscope.testing.fake_llm_server import FakeLLMServer


def _summary(
    *, arrived: int = 40, length_s: float = 2.0, done_per_s: float = 20.0, ttft_s: float = 0.05
) -> TrialSummary:
    return TrialSummary(
        requests=arrived,
        completed=arrived,
        errors=0,
        window=Window(start_s=0.5, end_s=0.5 + length_s, length_s=length_s, requests=arrived),
        throughput=Throughput(
            output_tokens_per_s=done_per_s * 4,
            total_tokens_per_s=done_per_s * 8,
            requests_per_s=done_per_s,
        ),
        metrics=Metrics(ttft_s=Distribution(n=arrived, p50=ttft_s)),
    )


def _records(arrivals_s: list[float], ends_s: list[float]) -> list[RequestRecord]:
    return [
        RequestRecord(index=i, scheduled_s=a, sent_s=a, end_s=e)
        for i, (a, e) in enumerate(zip(arrivals_s, ends_s, strict=True))
    ]


def test_a_rate_is_saturated_when_its_queue_grows_not_for_long_requests() -> None:
    # 40 arrivals 50 ms apart, each served in 100 ms alongside the others: kept up
    arrivals = [0.05 * i for i in range(40)]
    assert rate_saturated(_records(arrivals, [a + 0.1 for a in arrivals]), "20 req/s") is None
    # a short trial of long requests: 20 arrivals 1 s apart, 10 s each. Only 8 of the
    # window's 18 complete inside it, yet nothing queued: the 8.5 still in flight are allowed
    slow = [float(i) for i in range(20)]
    assert rate_saturated(_records(slow, [a + 10.0 for a in slow]), "1 req/s") is None
    # one at a time, 100 ms each, at 2x, 5x and 20x what it serves: the queue grows, at any depth
    for rate in (20.0, 50.0, 200.0):
        arrivals = [i / rate for i in range(200)]
        ends = [0.1 * (i + 1) for i in range(200)]
        why = rate_saturated(_records(arrivals, ends), f"{rate:g} req/s")
        assert why is not None and why.startswith(f"saturated at {rate:g} req/s: ")
    # nothing to judge: too few requests, or all arriving at once
    assert rate_saturated(_records([0.0, 0.1], [1.0, 1.1]), "x") is None
    assert rate_saturated(_records([0.0] * 8, [1.0] * 8), "x") is None


def test_a_concurrency_is_saturated_when_it_gains_nothing_and_only_waits() -> None:
    before = _summary(done_per_s=20.0, ttft_s=0.05)
    waited = _summary(done_per_s=20.0, ttft_s=0.05 * (TTFT_RISE + 0.5))
    why = concurrency_saturated(waited, "concurrency 2", before, "concurrency 1", streams_ratio=2)
    assert why is not None and why.startswith("saturated at concurrency 2: 20.00 req/s")
    # 5 % more from twice the streams: under 10 % of their growth; from x1.25, 5 % is not
    noisy = _summary(done_per_s=21.0, ttft_s=0.2)
    assert concurrency_saturated(noisy, "c", before, "b", streams_ratio=2) is not None
    assert concurrency_saturated(noisy, "c", before, "b", streams_ratio=1.25) is None
    # a gain at the bound is a gain; a flat TTFT is not waiting
    gained = _summary(done_per_s=20.0 * (1 + MARGINAL_GAIN), ttft_s=0.2)
    assert concurrency_saturated(gained, "c", before, "b", streams_ratio=2) is None
    flat = _summary(done_per_s=20.0, ttft_s=0.05 * TTFT_RISE)
    assert concurrency_saturated(flat, "c", before, "b", streams_ratio=2) is None
    with pytest.raises(ValueError, match="higher concurrency"):
        concurrency_saturated(waited, "c", before, "b", streams_ratio=1.0)


def _llm(cli: CliRunner, url: str, store: Path, *extra: str | Path, requests: int = 20) -> Any:
    code, out, err = cli(
        "llm", url, "--model", "fake-model", "--input-tokens", "4", "--output-tokens", "4",
        "--seed", "1", "--store", store, "--requests", str(requests), *extra, "--json",
    )  # fmt: skip
    assert code == 0, err
    return json.loads(out)


def test_a_rate_sweep_stops_at_the_saturated_step_and_says_why(
    tmp_path: Path, cli: CliRunner
) -> None:
    # one generation slot, about 11 ms a request (90 req/s): 20 req/s keeps up, 400 does not
    with FakeLLMServer(ttft_s=0.005, itl_s=0.002, max_running=1) as fake:
        document = _llm(
            cli, fake.url, tmp_path / "r.db", "--rate", "20,400,800",
            "--report", tmp_path / "r.html", requests=60,
        )  # fmt: skip
    labels = [t["label"] for t in document["trials"]]
    assert labels == ["20 req/s", "400 req/s"]
    [stop] = document["saturation"]
    assert stop.startswith("saturated at 400 req/s") and stop.endswith("not measured: 800 req/s")
    with ResultStore(tmp_path / "r.db") as store:
        [stored] = store.get_run("latest").documents_of("llm")
    assert stored["saturation"] == [stop]
    assert "sweep stopped: saturated at 400 req/s" in (tmp_path / "r.html").read_text()


def test_a_concurrency_sweep_stops_and_past_saturation_measures_every_step(
    tmp_path: Path, cli: CliRunner
) -> None:
    with FakeLLMServer(ttft_s=0.01, itl_s=0.01, max_running=1) as fake:
        stopped = _llm(cli, fake.url, tmp_path / "r.db", "--concurrency", "1,2,4,8")
        every = _llm(cli, fake.url, tmp_path / "r.db", "--concurrency", "1,4", "--past-saturation")
    labels = [t["label"] for t in stopped["trials"]]
    assert "concurrency 8" not in labels and len(labels) in (2, 3)  # stopped at 2 or 4
    [stop] = stopped["saturation"]
    assert stop.startswith(f"saturated at {labels[-1]}") and stop.endswith(", 8")
    assert [t["label"] for t in every["trials"]] == ["concurrency 1", "concurrency 4"]
    assert every["saturation"] == []
