"""Edge cases of the audit's reading of telemetry: scrape-renamed pod labels, percent fields
near zero, GPU_UTIL reported as 0 under MIG, series split across answers, price matching, and
exports the fast reader must hand to json (and json must refuse).

Covers: accelscope.audit.telemetry, accelscope.audit.cost, accelscope.audit.analysis,
accelscope.commands.audit.workflow."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from accelscope.audit.analysis import DeviceFigures
from accelscope.audit.cost import GpuPrice, actions, gpu_memory_gib, gpu_price
from accelscope.audit.telemetry import parse_export_text
from accelscope.commands.audit.workflow import AuditRequest, audit, default_step
from accelscope.errors import BadInputError
from accelscope.plan.catalog import Catalog, load_catalog, parse_catalog_text

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


A30_ROW = """
[[instance]]
type = "a30-box"
provider = "on-prem"
region = "lab"
kind = "gpu"
accelerator = "NVIDIA A30"
accelerator_count = 1
device_memory_bytes = 25769803776
vcpus = 16
host_memory_bytes = 68719476736
price_usd_per_hour = 1.0
memory_bandwidth_bytes_per_s = 933e9
peak_ops_per_s = { fp32 = 10.3e12 }
[instance.sources]
shape = { source = "test", date = "2026-01-01" }
price_usd_per_hour = { source = "test", date = "2026-01-01" }
memory_bandwidth_bytes_per_s = { source = "test", date = "2026-01-01" }
peak_ops_per_s = { source = "test", date = "2026-01-01" }
"""


def test_gpu_memory_comes_from_the_name_else_the_catalog() -> None:
    catalog = load_catalog()
    h100 = next(i for i in catalog.gpus() if "H100" in i.accelerator)
    assert gpu_memory_gib("NVIDIA A100-SXM4-40GB", None) == 40.0  # the name says it
    assert gpu_memory_gib("NVIDIA H100 PCIe", catalog) == h100.device_memory_bytes / 2**30
    assert gpu_memory_gib("NVIDIA A30", catalog) is None  # not in the shipped catalog
    assert gpu_memory_gib("NVIDIA H100 PCIe", None) is None
    extra = parse_catalog_text(A30_ROW, "mine.toml")
    mine = Catalog((*catalog.instances, *extra))
    assert gpu_memory_gib("NVIDIA A30", mine) == 24.0  # a user's catalog row answers


def _whole_gpu(key: str, model: str, total_mib: float | None) -> DeviceFigures:
    return DeviceFigures(
        key=key,
        host="n1",
        model=model,
        mig_profile="",
        share=1.0,
        holders=("team/app",),
        coverage={},
        hours={"held": 168.0},
        streaks=(),
        not_measured={},
        memory_p99_fraction=0.05,
        memory_total_mib=total_mib,
        power_mean_w=None,
        sm_p95=0.1,
        tensor_median=None,
        dram_median=None,
        hourly_activity=None,
    )


def test_consolidation_reads_gpu_memory_from_the_catalog_when_telemetry_lacks_it() -> None:
    model = "NVIDIA H100 PCIe"  # no size in the name
    prices = {model: GpuPrice(10.0, "given")}
    figures = [_whole_gpu(f"n1/gpu{i}", model, None) for i in range(2)]
    found = {a.kind for a in actions(figures, prices, 168.0, catalog=load_catalog())}
    assert "consolidate-mig" in found  # 5 % of 80 GiB fits a 1g slice
    assert "consolidate-mig" not in {a.kind for a in actions(figures, prices, 168.0)}
    measured = [_whole_gpu(f"n1/gpu{i}", model, 81559.0) for i in range(2)]
    assert "consolidate-mig" in {a.kind for a in actions(measured, prices, 168.0)}


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


def test_busy_but_barely_useful_gpu_is_priced_whatever_the_threshold(tmp_path: Path) -> None:
    # 95 % GPU_UTIL, SM_ACTIVE exactly 25 % all day: not "SM < 25 %", yet 70 % of its hours
    # are busy as nvidia-smi shows it without SM work
    document = _audit(
        tmp_path,
        _answer(
            _series("DCGM_FI_DEV_GPU_UTIL", GPU, [95.0] * 144),
            _series("DCGM_FI_PROF_SM_ACTIVE", GPU, [0.25] * 144),
        ),
        prices=(("NVIDIA L4", 1.0),),
    )
    (device,) = document["devices"]
    assert device["hours"]["busy_not_useful"] == 0  # the hard rule says nothing
    assert device["hours"]["busy_minus_useful"] == pytest.approx(0.70 * 24)
    assert device["usd"]["busy_minus_useful_usd"] == pytest.approx(0.70 * 24)
    (action,) = document["actions"]
    assert action["kind"] == "busy-not-useful" and "70% of the time" in action["title"]
    assert action["usd_per_month"] == pytest.approx(0.70 * 24 * 720 / 24)
    assert "look at: batch size" in " ".join(action["evidence"])
    assert document["totals"]["busy_minus_useful"] == pytest.approx(0.70 * 24)


def test_what_to_look_at_follows_the_activities(tmp_path: Path) -> None:
    document = _audit(
        tmp_path,
        _answer(
            _series("DCGM_FI_DEV_GPU_UTIL", GPU, [90.0] * 144),
            _series("DCGM_FI_PROF_GR_ENGINE_ACTIVE", GPU, [0.40] * 144),
            _series("DCGM_FI_PROF_SM_ACTIVE", GPU, [0.35] * 144),
            _series("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", GPU, [0.0] * 144),
        ),
        prices=(("NVIDIA L4", 1.0),),
    )
    (action,) = [a for a in document["actions"] if a["kind"] == "busy-not-useful"]
    look = action["detail"]["look_at"]
    assert look[0].startswith("input pipeline") and "40%" in look[0]
    assert look[-1].startswith("precision: tensor cores idle")
    assert not any(x.startswith("batch size") for x in look)  # engine 40 % vs SM 35 %


def test_sampling_picks_gpus_and_refuses_missing_ones(cli: Any) -> None:
    from accelscope.testing.nvml import FakeNvml

    two = FakeNvml(gpus=("NVIDIA L4", "NVIDIA L4"))
    with pytest.raises(BadInputError, match=r"--gpus 0,5: no GPU 5 here \(NVML sees 2: 0,1\)"):
        audit(AuditRequest(sample_s=60.0, gpus=(0, 5)), store_path=None, nvml=two)
    with pytest.raises(BadInputError, match="--gpus needs --sample"):
        audit(AuditRequest(export=Path("x.json"), gpus=(0,)), store_path=None)
    code, _, err = cli("audit", "--sample", "1s", "--gpus", "0,x", "--no-store")
    assert code == 2 and "--gpus '0,x'" in err and len(err.strip().splitlines()) == 1
    outcome = audit(
        AuditRequest(sample_s=1.0, step_s=0.25, gpus=(1,), prices=(("NVIDIA L4", 1.0),)),
        store_path=None,
        nvml=FakeNvml(gpus=("NVIDIA L4", "NVIDIA L4")),
    )
    assert [d["key"].rsplit("/", 1)[1] for d in outcome.document["devices"]] == ["gpu1"]


def test_sampling_a_mig_gpu_reports_each_instance(tmp_path: Path) -> None:
    from accelscope.testing.nvml import FakeNvml

    nvml = FakeNvml(
        gpus=("NVIDIA H100 80GB HBM3",),
        mig={0: ("3g.40gb", "1g.10gb")},
        refused_metrics=(FakeNvml.NVML_GPM_METRIC_DRAM_BW_UTIL,),
    )
    outcome = audit(
        AuditRequest(sample_s=1.5, step_s=0.25, prices=(("*", 2.0),)),
        store_path=None,
        nvml=nvml,
    )
    devices = {d["key"].rsplit("/", 1)[1]: d for d in outcome.document["devices"]}
    assert set(devices) == {"mig1", "mig2"}  # the instances, not the GPU beside them
    first, second = devices["mig1"], devices["mig2"]
    assert first["mig_profile"] == "3g.40gb" and first["share_of_gpu"] == pytest.approx(3 / 7)
    observed = first["hours"]["observed"]
    assert first["hours"]["useful"] == pytest.approx(0.20 * observed)  # its own GPM
    assert second["hours"]["useful"] == pytest.approx(0.40 * second["hours"]["observed"])
    assert "not supported for MIG" in first["not_measured"]["gpu_util"]
    # DRAM refused by its GPM return code: not measured, with NVML's word, never 0
    assert "dram_active" not in first["hours"]
    assert "refused (NVML return 3)" in first["not_measured"]["dram_active"]
    assert "energy_kwh" in first["hours"]  # GPU-wide energy, counted once
    assert "counted once" in second["not_measured"]["energy"]
    assert first["busy_minus_useful_basis"] == "gr_active"
    assert "MIG mode" in outcome.document["source"]
