"""What other commands do with an ``llm`` run: ``plan api --from-run`` prices its goodput at
the SLO, ``plan --run`` takes its capacity as this instance's, ``compare`` tells a slower
server from a faster one, and ``--hf-model`` serves a local model in process.

Covers: accelscope.commands.llm.workflow, accelscope.commands.plan.workflow,
accelscope.commands.compare.workflow, accelscope.llm.inprocess."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from accelscope.testing import CliRunner, assert_one_line_error
from accelscope.testing.fake_llm_server import FakeLLMServer
from accelscope.testing.llm_model import build_tiny_llama

SLO = ("--slo", "ttft=150ms,tpot=30ms", "--slo-percentile", "90")


@pytest.fixture(scope="module")
def server() -> Iterator[FakeLLMServer]:
    with FakeLLMServer(ttft_s=0.02, itl_s=0.002) as running:
        yield running


def _capacity_run(cli: CliRunner, server: FakeLLMServer, store: Path) -> dict[str, object]:
    code, out, err = cli(
        "llm", server.url, "--model", server.model, "--capacity", "rate",
        "--capacity-start", "8", "--capacity-trials", "2", "--output-tokens", "8",
        "--requests", "50", *SLO, "--store", store, "--json", "--no-server-metrics",
    )  # fmt: skip
    assert code == 0, err
    document: dict[str, object] = json.loads(out)
    return document


@pytest.mark.slow
def test_plan_api_prices_the_goodput_at_the_slo(
    cli: CliRunner, server: FakeLLMServer, tmp_path: Path
) -> None:
    store = tmp_path / "store.db"
    document = _capacity_run(cli, server, store)
    capacity = document["capacity"]
    assert isinstance(capacity, dict) and capacity["capacity"]  # 16 here; less on a slow CPU
    good = capacity["good_output_tokens_per_s"]
    code, out, err = cli(
        "plan", "api", "--tokens-per-month", "2B", "--input-price", "0.5",
        "--output-price", "1.5", "--instance", "g6.xlarge", "--from-run", "latest",
        "--store", store, "--json",
    )  # fmt: skip
    assert code == 0, err
    plan = json.loads(out)
    price = plan["price_per_hour"]
    assert plan["good_output_tokens_per_s"] == pytest.approx(good)
    assert plan["usd_per_million_good_output_tokens"] == pytest.approx(price / (good * 3600) * 1e6)
    assert f"measured by llm run {document['run_id']}" in plan["throughput_basis"]
    # both a typed throughput and a run: one line
    code, _, err = cli(
        "plan", "api", "--tokens-per-month", "2B", "--input-price", "0.5",
        "--output-price", "1.5", "--instance", "g6.xlarge", "--from-run", "latest",
        "--throughput", "100", "--store", store,
    )  # fmt: skip
    assert_one_line_error(code, err, "--throughput or --from-run")


@pytest.mark.slow
def test_plan_takes_the_llm_capacity_as_this_instances(
    cli: CliRunner, server: FakeLLMServer, tmp_path: Path
) -> None:
    store = tmp_path / "store.db"
    run = _capacity_run(cli, server, store)
    measured = run["capacity"]["capacity"]  # type: ignore[index]
    assert measured  # 8 or 16 req/s: which one depends on this machine's speed
    code, out, err = cli(
        "plan", "--run", "latest", "--traffic", "peak=40qps", "--sla-p99", "1s",
        "--here", "c7i.large", "--store", store, "--json", "--no-store",
    )  # fmt: skip
    assert code == 0, err
    plan = json.loads(out)
    here = next(o for o in plan["options"] if o["name"] == "c7i.large")
    assert here["capacity"]["qps_per_instance"] == measured
    assert "measured by llm" in here["capacity"]["label"]


def test_a_run_without_capacity_is_refused_by_plan_api(
    cli: CliRunner, server: FakeLLMServer, tmp_path: Path
) -> None:
    store = tmp_path / "store.db"
    code, _, err = cli(
        "llm", server.url, "--model", server.model, "--rate", "20", "--requests", "10",
        "--output-tokens", "4", "--store", store, "--no-server-metrics",
    )  # fmt: skip
    assert code == 0, err
    code, _, err = cli(
        "plan", "api", "--tokens-per-month", "2B", "--input-price", "0.5",
        "--output-price", "1.5", "--instance", "g6.xlarge", "--from-run", "latest",
        "--store", store,
    )  # fmt: skip
    assert_one_line_error(code, err, "no LLM capacity")


@pytest.mark.slow
def test_compare_tells_a_slower_server(cli: CliRunner, tmp_path: Path) -> None:
    # Three runs per side: compare claims a difference only when its interval holds the drift
    # between processes (the one rule for ratios between processes); one run per side is
    # "cannot tell", however far apart the two runs' samples are.
    store = tmp_path / "store.db"
    runs: dict[float, list[str]] = {}
    for ttft in (0.02, 0.06):
        for repeat in range(3):
            with FakeLLMServer(ttft_s=ttft, itl_s=0.002) as server:
                code, out, err = cli(
                    "llm", server.url, "--model", server.model, "--rate", "20",
                    "--requests", "60", "--output-tokens", "6", "--store", store,
                    "--no-server-metrics", "--seed", str(int(ttft * 100) + repeat), "--json",
                )  # fmt: skip
                assert code == 0, err
                runs.setdefault(ttft, []).append(json.loads(out)["run_id"])
    before, after = ",".join(runs[0.02]), ",".join(runs[0.06])
    code, out, err = cli("compare", before, after, "--store", store, "--json")
    assert code == 0, err
    rows = {row["metric"]: row for row in json.loads(out)["rows"]}
    assert rows["TTFT p50"]["verdict"] == "slower"
    assert rows["TTFT p50"]["ratio"] == pytest.approx(3.0, rel=0.25)
    assert rows["TPOT p50"]["verdict"] in ("no change", "inconclusive")
    code, out, err = cli("compare", runs[0.02][0], runs[0.06][0], "--store", store, "--json")
    assert code == 0, err
    one = {row["metric"]: row for row in json.loads(out)["rows"]}
    assert one["TTFT p50"]["verdict"] == "cannot tell"
    assert one["TTFT p50"]["ratio"] == pytest.approx(3.0, rel=0.25)


def test_an_in_process_model_is_served(cli: CliRunner, tmp_path: Path) -> None:
    model = build_tiny_llama(tmp_path / "tiny")
    code, out, err = cli(
        "llm", "--hf-model", model, "--concurrency", "2", "--requests", "6",
        "--output-tokens", "5", "--input-tokens", "12", "--max-batch", "2",
        "--no-store", "--json", "--bandwidth", "10GB/s",
    )  # fmt: skip
    assert code == 0, err
    trial = json.loads(out)["trials"][0]
    assert trial["summary"]["completed"] == 6
    assert trial["summary"]["tokens"]["output_mean"] == 5
    assert trial["floor"]["tpot_floor_s"] > 0
    assert json.loads(out)["target"]["kind"] == "in-process"
