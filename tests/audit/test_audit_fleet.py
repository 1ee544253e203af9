"""The fixture fleet's audit against figures computed by hand (accelscope.testing.fleet
documents every value): hours, coverage, "not measured" reasons, dollars and actions.

Covers: accelscope.commands.audit.workflow, accelscope.audit.telemetry, accelscope.audit.analysis,
accelscope.audit.cost, accelscope.testing.fleet."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from accelscope.commands.audit.workflow import AuditRequest, audit
from accelscope.testing import CliRunner, assert_one_line_error
from accelscope.testing.fleet import dumps_query_range, fleet

STEP_S = 300.0
A100_PER_H = 32.7726 / 8  # p4d.24xlarge in the bundled catalog
L4_PER_H = 0.8048  # g6.xlarge


@pytest.fixture(scope="module")
def export(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("fleet") / "fleet.json"
    path.write_text(dumps_query_range(fleet(step_s=STEP_S)))
    return path


@pytest.fixture(scope="module")
def document(export: Path) -> dict[str, Any]:
    return audit(AuditRequest(export=export), store_path=None).document


def _device(document: dict[str, Any], key: str) -> dict[str, Any]:
    return next(d for d in document["devices"] if d["key"] == key)


def test_window_and_definitions(document: dict[str, Any]) -> None:
    assert document["window"]["hours"] == pytest.approx(168.0)
    assert document["window"]["step_s"] == STEP_S
    assert "nvidia-smi" in document["definitions"]["busy_h"]
    assert len(document["devices"]) == 10


def test_input_bound_training_is_busy_but_not_useful(document: dict[str, Any]) -> None:
    hours = _device(document, "node-a/gpu0")["hours"]
    assert hours["busy"] == pytest.approx(0.90 * 168)  # what nvidia-smi shows
    assert hours["active"] == pytest.approx(0.85 * 168)
    assert hours["useful"] == pytest.approx(0.10 * 168)
    assert hours["busy_not_useful"] == pytest.approx(168)
    assert hours["busy_minus_useful"] == pytest.approx(0.80 * 168)
    assert _device(document, "node-a/gpu0")["useful_share"] == pytest.approx(0.10)


def test_idle_held_notebook_is_one_week_long_streak(document: dict[str, Any]) -> None:
    notebook = _device(document, "node-c/gpu1")
    assert notebook["holders"] == ["research/jupyter-alice"]
    assert notebook["hours"]["held_idle"] == pytest.approx(168)
    (streak,) = notebook["held_idle_streaks"]
    assert streak["hours"] == pytest.approx(168) and streak["holder"] == "research/jupyter-alice"
    assert notebook["usd"]["held_idle_usd"] == pytest.approx(168 * L4_PER_H)


def test_energy_counter_reset_is_not_lost(document: dict[str, Any]) -> None:
    samples = int(7 * 86400 / STEP_S)
    kwh = (samples - 1) * 300.0 * STEP_S / 3.6e6  # 300 W between consecutive samples
    assert _device(document, "node-a/gpu1")["hours"]["energy_kwh"] == pytest.approx(kwh)


def test_mig_instances_count_as_their_slice(document: dict[str, Any]) -> None:
    ranker = _device(document, "node-b/gpu0/mig1")
    assert ranker["share_of_gpu"] == pytest.approx(3 / 7)
    assert "not supported for MIG" in ranker["not_measured"]["gpu_util"]
    assert ranker["usd"]["cost_usd"] == pytest.approx(168 * 3 / 7 * A100_PER_H)
    spare = _device(document, "node-b/gpu0/mig3")
    assert spare["holders"] == [] and spare["hours"]["held"] == 0
    assert spare["usd"]["idle_usd"] == pytest.approx(168 / 7 * A100_PER_H)
    # GPU-wide energy would repeat on every instance: never summed three times
    assert "energy_kwh" not in _device(document, "node-b/gpu0/mig2")["hours"]


def test_kube_state_metrics_gpu_requests_per_node(document: dict[str, Any]) -> None:
    requested = {g["name"]: g.get("requested_gpu_h") for g in document["by_node"]}
    assert requested["node-a"] == pytest.approx(3 * 168)  # its cpu request is not a GPU
    assert requested["node-b"] == pytest.approx((3 + 2) / 7 * 168)  # MIG instances
    assert requested["node-c"] == pytest.approx(2 * 168)
    assert document["totals"]["requested_gpu_h"] == pytest.approx((3 + 5 / 7 + 2 + 2) * 168)
    assert "kube-state-metrics GPU requests" in document["totals"]["allocation"]


def test_gap_is_coverage_not_zero(document: dict[str, Any]) -> None:
    chat = _device(document, "node-c/gpu0")
    assert chat["hours"]["observed"] == pytest.approx(166)
    assert chat["coverage"]["gpu_util"] == pytest.approx(166 / 168)


def test_dcgm_46_names_and_hostname_label_are_read(document: dict[str, Any]) -> None:
    small = _device(document, "node-d/gpu0")
    assert small["host"] == "node-d"
    assert small["hours"]["busy"] == pytest.approx(0.40 * 168)


def test_actions_ranked_with_dollars(document: dict[str, Any]) -> None:
    by_kind = {a["kind"]: a for a in document["actions"]}
    assert set(by_kind) == {
        "busy-not-useful",
        "consolidate-mig",
        "mixed-precision",
        "release-idle",
        "follow-diurnal",
    }
    dollars = [a["usd_per_month"] for a in document["actions"]]
    assert dollars == sorted(dollars, reverse=True)
    per_month = 720 / 168
    release = by_kind["release-idle"]
    assert release["usd_per_month"] == pytest.approx(168 * L4_PER_H * per_month)
    assert release["basis"] == "recovered" and "jupyter-alice" in release["title"]
    merge = by_kind["consolidate-mig"]
    assert set(merge["devices"]) == {"node-d/gpu0", "node-d/gpu1"}
    assert merge["usd_per_month"] == pytest.approx(168 * A100_PER_H * per_month)  # 1 GPU freed
    assert by_kind["mixed-precision"]["devices"] == ["node-a/gpu2"]
    gaps = {a["devices"][0]: a for a in document["actions"] if a["kind"] == "busy-not-useful"}
    assert "node-c/gpu1" not in gaps  # idle all week: nothing busy, no gap
    etl = gaps["node-a/gpu0"]  # GPU_UTIL 90 %, SM 10 %
    assert etl["basis"] == "at stake (upper bound)"
    assert etl["usd_per_month"] == pytest.approx(0.80 * 168 * A100_PER_H * per_month)
    assert etl["detail"]["busy_minus_useful_h"] == pytest.approx(0.80 * 168)
    assert any(e.startswith("look at: batch size") for e in etl["evidence"])
    # GPU_UTIL 40 %, SM 15 %: under the 50 % busy-not-useful rule, yet 25 % of its hours
    small = gaps["node-d/gpu0"]
    assert small["usd_per_month"] == pytest.approx(0.25 * 168 * A100_PER_H * per_month)
    ranker = gaps["node-b/gpu0/mig1"]  # MIG: no GPU_UTIL, GR_ENGINE_ACTIVE stands in
    assert ranker["detail"]["busy_basis"] == "gr_active"
    assert ranker["usd_per_month"] == pytest.approx(0.1 * 168 * 3 / 7 * A100_PER_H * per_month)
    ranked = document["actions"]
    assert ranked.index(etl) < ranked.index(small) < ranked.index(by_kind["release-idle"])
    diurnal = by_kind["follow-diurnal"]
    assert diurnal["devices"] == ["node-c/gpu0"] and "plan --traffic" in diurnal["verify"]


def test_cpu_pool_busy_share_and_dollars(document: dict[str, Any], export: Path) -> None:
    node = document["cpu_nodes"]["node-e"]
    assert node["busy_share"] == pytest.approx(0.2)
    assert "--price cpu=" in node["not_measured"]["usd"]
    priced = audit(AuditRequest(export=export, prices=(("cpu", 0.357),)), store_path=None)
    node = priced.document["cpu_nodes"]["node-e"]
    hours = node["observed_h"]
    assert hours == pytest.approx(168 - STEP_S / 3600)  # the first sample only primes the rate
    assert node["cost_usd"] == pytest.approx(hours * 0.357)
    assert node["idle_usd"] == pytest.approx(hours * 0.357 * 0.8)


def test_cli_terminal_json_and_runs_show(export: Path, tmp_path: Path, cli: CliRunner) -> None:
    store = tmp_path / "r.db"
    code, out, err = cli("audit", "--from", export, "--store", store)
    assert code == 0, err
    assert "useful (SM-active)" in out and "release research/jupyter-alice" in out
    code, out, _ = cli("audit", "--from", export, "--no-store", "--json", "--price", "L4=1.0")
    assert code == 0
    priced = json.loads(out)
    assert priced["prices"]["NVIDIA L4"]["usd_per_gpu_hour"] == 1.0
    code, out, _ = cli("runs", "show", "latest", "--store", store)
    assert code == 0 and "held-idle h" in out


def test_bad_input_is_one_line_exit_2(export: Path, tmp_path: Path, cli: CliRunner) -> None:
    code, _, err = cli("audit", "--no-store")
    assert_one_line_error(code, err, "--from")
    code, _, err = cli("audit", "--from", tmp_path / "none.json", "--no-store")
    assert_one_line_error(code, err, "does not exist")
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    code, _, err = cli("audit", "--from", broken, "--no-store")
    assert_one_line_error(code, err, "not JSON")
    wrong = tmp_path / "wrong.json"
    wrong.write_text(json.dumps({"status": "success", "data": {"resultType": "vector"}}))
    code, _, err = cli("audit", "--from", wrong, "--no-store")
    assert_one_line_error(code, err, "matrix")
    unlabelled = tmp_path / "unlabelled.json"
    series = {"metric": {"__name__": "DCGM_FI_DEV_GPU_UTIL", "job": "x"}, "values": [[0, "1"]]}
    unlabelled.write_text(
        json.dumps({"status": "success", "data": {"resultType": "matrix", "result": [series]}})
    )
    code, _, err = cli("audit", "--from", unlabelled, "--no-store")
    assert_one_line_error(code, err, "none of the labels")
    unknown = tmp_path / "b200.json"
    series = {
        "metric": {
            "__name__": "DCGM_FI_DEV_GPU_UTIL",
            "Hostname": "h",
            "gpu": "0",
            "modelName": "NVIDIA B200",
        },
        "values": [[0, "50"], [60, "50"]],
    }
    unknown.write_text(
        json.dumps({"status": "success", "data": {"resultType": "matrix", "result": [series]}})
    )
    code, _, err = cli("audit", "--from", unknown, "--no-store")
    assert_one_line_error(code, err, "no price for GPU model NVIDIA B200", "--price")
    code, _, err = cli("audit", "--from", export, "--no-store", "--price", "L4")
    assert_one_line_error(code, err, "MODEL=USD")
    code, _, err = cli("audit", "--from", export, "--no-store", "--save-export", tmp_path / "x")
    assert_one_line_error(code, err, "--save-export needs --prometheus")
    code, _, err = cli("audit", "--prometheus", "ftp://x", "--no-store")
    assert_one_line_error(code, err, "http(s)://")


def test_sampling_this_host_with_a_fake_gpu(tmp_path: Path) -> None:
    from accelscope.testing.nvml import FakeNvml

    outcome = audit(
        AuditRequest(sample_s=2.0, step_s=0.25, prices=(("NVIDIA L4", 1.0),)),
        store_path=None,
        nvml=FakeNvml(gpm=True),
    )
    (gpu,) = outcome.document["devices"]
    assert gpu["model"] == "NVIDIA L4"
    observed = gpu["hours"]["observed"]
    assert observed > 0
    assert gpu["hours"]["busy"] == pytest.approx(0.87 * observed)  # NVML: 87 %
    assert gpu["hours"]["useful"] == pytest.approx(0.615 * observed)  # GPM SM activity
    assert gpu["hours"]["active"] == pytest.approx(0.80 * observed)  # GPM graphics engine
    # NVML's energy counter at 350 W between the first and the last sample
    assert 0 < gpu["hours"]["energy_kwh"] <= 350 * 2.5 / 3.6e6
    assert "idle" in gpu["hours"] and "not_measured" in gpu
    assert "sampled this host" in outcome.document["source"]
    assert outcome.document["cpu_nodes"]  # this host's CPUs


def test_fast_export_reader_matches_json(export: Path) -> None:
    from accelscope.audit.telemetry import parse_export_text, parse_query_range

    text = export.read_text()
    fast, fast_ignored = parse_export_text(text, "x")
    slow, slow_ignored = parse_query_range(json.loads(text), "x")
    assert fast_ignored == slow_ignored
    assert len(fast) == len(slow)
    for a, b in zip(fast, slow, strict=True):
        assert (a.field, a.labels) == (b.field, b.labels)
        assert (a.times_s == b.times_s).all() and (a.values == b.values).all()
