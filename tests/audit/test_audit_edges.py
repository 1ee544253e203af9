"""Edge cases of the audit's reading of telemetry: scrape-renamed pod labels, percent fields
near zero, GPU_UTIL reported as 0 under MIG, series split across answers, price matching, and
exports the fast reader must hand to json (and json must refuse)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from accelscope.audit.cost import gpu_price
from accelscope.audit.telemetry import parse_export_text
from accelscope.commands.audit.workflow import AuditRequest, audit, default_step
from accelscope.errors import BadInputError
from accelscope.plan.catalog import load_catalog

T = [float(600 * i) for i in range(144)]  # one day, 10 min apart


def _series(name: str, labels: dict[str, str], values: list[float]) -> dict[str, Any]:
    return {
        "metric": {"__name__": name, **labels},
        "values": [[t, repr(v)] for t, v in zip(T, values, strict=True)],
    }


def _answer(*series: dict[str, Any]) -> dict[str, Any]:
    return {"status": "success", "data": {"resultType": "matrix", "result": list(series)}}


def _audit(tmp_path: Path, payload: Any, **more: Any) -> dict[str, Any]:
    path = tmp_path / "export.json"
    path.write_text(json.dumps(payload))
    return audit(AuditRequest(export=path, **more), store_path=None).document


GPU = {"Hostname": "n1", "gpu": "0", "UUID": "GPU-1", "modelName": "NVIDIA L4"}


def test_exported_pod_is_the_workload_and_bare_pod_the_exporter(tmp_path: Path) -> None:
    scraped = {"pod": "dcgm-exporter-x", "namespace": "gpu-operator"}
    held = {**GPU, **scraped, "exported_pod": "train", "exported_namespace": "ml"}
    idle = {**GPU, "gpu": "1", "UUID": "GPU-2", **scraped}
    document = _audit(
        tmp_path,
        _answer(
            _series("DCGM_FI_DEV_GPU_UTIL", held, [90.0] * 144),
            _series("DCGM_FI_DEV_GPU_UTIL", idle, [0.0] * 144),
        ),
    )
    devices = {d["key"]: d for d in document["devices"]}
    assert devices["n1/gpu0"]["holders"] == ["ml/train"]
    assert devices["n1/gpu1"]["holders"] == []  # the exporter does not hold the GPU
    assert devices["n1/gpu1"]["hours"]["held_idle"] == 0


def test_a_nearly_idle_percent_field_stays_percent(tmp_path: Path) -> None:
    values = [0.0, 1.0] * 72  # GPU_UTIL 0 %/1 %: nearly idle, not 50 % busy
    document = _audit(tmp_path, _answer(_series("DCGM_FI_DEV_GPU_UTIL", GPU, values)))
    (device,) = document["devices"]
    assert device["hours"]["busy"] == pytest.approx(0.005 * 24)
    assert device["hours"]["idle"] == pytest.approx(24)


def test_gpu_util_reported_as_zero_under_mig_is_not_measured(tmp_path: Path) -> None:
    mig = {
        **GPU,
        "modelName": "NVIDIA A100-SXM4-40GB",
        "GPU_I_PROFILE": "3g.20gb",
        "GPU_I_ID": "1",
        "pod": "serve",
        "namespace": "prod",
    }
    document = _audit(
        tmp_path,
        _answer(
            _series("DCGM_FI_DEV_GPU_UTIL", mig, [0.0] * 144),
            _series("DCGM_FI_PROF_GR_ENGINE_ACTIVE", mig, [0.8] * 144),
        ),
    )
    (device,) = document["devices"]
    assert "not supported for MIG" in device["not_measured"]["gpu_util"]
    assert device["hours"]["idle"] == 0 and device["hours"]["active"] == pytest.approx(0.8 * 24)
    assert not [a for a in document["actions"] if a["kind"] == "release-idle"]


def test_a_series_split_across_answers_is_one_series(tmp_path: Path) -> None:
    cpu = {"instance": "c1", "cpu": "0", "mode": "idle"}
    whole = _series("node_cpu_seconds_total", cpu, [0.8 * 600 * i for i in range(144)])
    first = {**whole, "values": whole["values"][:72]}
    second = {**whole, "values": whole["values"][72:]}
    document = _audit(tmp_path, [_answer(first), _answer(second)])
    assert document["cpu_nodes"]["c1"]["busy_share"] == pytest.approx(0.2)


def test_gpu_prices_match_family_memory_and_exact_names() -> None:
    catalog = load_catalog()
    with pytest.raises(BadInputError, match="no price for GPU model NVIDIA L40 "):
        gpu_price("NVIDIA L40", catalog, {})  # not an L4
    given = {"NVIDIA A100-SXM4-40GB": 2.0, "NVIDIA A100-SXM4-80GB": 4.0}
    assert gpu_price("NVIDIA A100-SXM4-80GB", catalog, given).usd_per_gpu_hour == 4.0
    assert gpu_price("NVIDIA A100 80GB PCIe", catalog, given).usd_per_gpu_hour == 4.0
    assert gpu_price("NVIDIA B200", catalog, {"*": 9.0}).usd_per_gpu_hour == 9.0
    assert gpu_price("NVIDIA GH200 480GB", catalog, {"*": 9.0}).usd_per_gpu_hour == 9.0


@pytest.mark.parametrize(
    "text",
    [
        '{"status":"error","errorType":"bad_data","error":"nope","data":{"resultType":"matrix",'
        '"result":[]}}',
        '{"status":"success","data":{"resultType":"matrix","result":[{"metric":{"__name__":'
        '"DCGM_FI_DEV_GPU_UTIL","gpu":"0"},"values":[[1,"7","8"],[2]]}]}}',
    ],
)
def test_the_fast_reader_hands_odd_exports_to_json(text: str) -> None:
    with pytest.raises(BadInputError):
        parse_export_text(text, "export")


def test_default_steps_divide_an_hour() -> None:
    assert default_step(7 * 86400) == 60
    assert default_step(30 * 86400) == 240
    assert all(3600 % default_step(days * 86400) == 0 for days in (1, 7, 8, 30, 90, 400))


def test_onprem_cost_model_uses_measured_power(tmp_path: Path, cli: Any) -> None:
    power = {**GPU, "pod": "serve", "namespace": "prod"}
    path = tmp_path / "export.json"
    path.write_text(
        json.dumps(
            _answer(
                _series("DCGM_FI_DEV_GPU_UTIL", power, [50.0] * 144),
                _series("DCGM_FI_DEV_POWER_USAGE", power, [300.0] * 144),
            )
        )
    )
    code, out, err = cli(
        "audit",
        "--from",
        path,
        "--no-store",
        "--json",
        "--onprem",
        "capex=8760,life=1,pue=2,kwh=0.5,ops=876",
    )
    assert code == 0, err
    price = json.loads(out)["prices"]["NVIDIA L4"]
    # $1/h of capex + $0.1/h of ops + 0.3 kW x 2 x $0.5 = $1.4 per GPU-hour
    assert price["usd_per_gpu_hour"] == pytest.approx(1.4)
    assert "300 W (measured mean)" in price["source"]
    code, _, err = cli("audit", "--from", path, "--no-store", "--onprem", "capex=1")
    assert code == 2 and "life=YEARS" in err
