"""Projection from a roofline profile: the floor arithmetic, the efficiency carried over, the
'estimate' label, and validation of the documents read (contracts.md)."""

from __future__ import annotations

import pytest

from accelscope.documents import LoadCapacity, RooflineProfile
from accelscope.errors import BadInputError
from accelscope.plan.capacity import floor_time_s, project_capacity
from accelscope.plan.catalog import load_catalog
from plan_helpers import capacity_payload, roofline_payload

# the helper profile: conv 6.5e10 FLOPs / 3e8 B and add 1e8 / 1e8, bf16, batch 8, 0.4 s here
FLOOR_HERE_S = 3e8 / 6.4e9 + 1e8 / 6.4e9  # memory-bound on the theoretical 6.4 GB/s
EFFICIENCY = FLOOR_HERE_S / 0.4


def test_projection_carries_the_efficiency_measured_here() -> None:
    profile = RooflineProfile.from_payload(roofline_payload())
    g6 = load_catalog().get("g6.xlarge")
    estimate = project_capacity(profile, g6, sla_p99_s=0.1)
    floor_there = max(6.5e10 / 121e12, 3e8 / 300e9) + max(1e8 / 121e12, 1e8 / 300e9)
    batch_time = floor_there / EFFICIENCY
    assert estimate.detail["efficiency"] == pytest.approx(EFFICIENCY)
    assert estimate.detail["floor_target_s"] == pytest.approx(floor_there)
    assert estimate.qps_per_instance == pytest.approx(8 / batch_time)
    assert estimate.latency_s == pytest.approx(2 * batch_time)
    assert estimate.basis == "projected" and estimate.label == "estimate" and estimate.is_estimate
    assert any("efficiency here" in a for a in estimate.assumptions)


def test_missing_dtype_falls_back_to_fp32_and_says_so() -> None:
    profile = RooflineProfile.from_payload(roofline_payload())
    c6i = load_catalog().get("c6i.2xlarge")
    estimate = project_capacity(profile, c6i, sla_p99_s=1.0)
    assert any("no bf16 peak" in a for a in estimate.assumptions)
    floor, _ = floor_time_s(profile.operators, {"fp32": 8.96e11}, 25.6e9)
    assert estimate.detail["floor_target_s"] == pytest.approx(floor)


def test_here_entry_is_the_reference_and_slow_targets_miss_the_sla() -> None:
    profile = RooflineProfile.from_payload(roofline_payload())
    catalog = load_catalog()
    here = catalog.get("c7i.large")
    same = project_capacity(profile, here, sla_p99_s=10.0, here=here)
    assert same.detail["efficiency"] * 0.4 == pytest.approx(same.detail["floor_here_s"])
    assert same.qps_per_instance == pytest.approx(8 / 0.4)  # projecting onto itself: measured
    tight = project_capacity(profile, here, sla_p99_s=0.1, here=here)
    assert not tight.meets_sla and tight.qps_per_instance == 0 and "SLA" in tight.assumptions[-1]


def test_measured_ceilings_are_used_only_as_a_last_resort() -> None:
    payload = roofline_payload()
    del payload["ceilings"]["theoretical"]
    profile = RooflineProfile.from_payload(payload)
    estimate = project_capacity(profile, load_catalog().get("g6.xlarge"), sla_p99_s=0.1)
    assert any("MEASURED peaks" in a and "MEASURED bandwidth" in a for a in estimate.assumptions)


@pytest.mark.parametrize(
    ("path", "value", "expected"),
    [
        (("operators",), None, "field 'operators': missing"),
        (("batch_size",), "8", "field 'batch_size': must be an integer, got '8'"),
        (("device",), "tpu", "must be 'cpu' or 'cuda'"),
        (("measured_time_s",), -1.0, "must be a positive number"),
        (("ceilings", "matmul_flops_per_s"), {}, "holds no measured peak"),
        (("ceilings", "bandwidth_bytes_per_s"), None, "bandwidth_bytes_per_s"),
        (("operators",), [], "is empty"),
        (("operators", 0, "flops"), "many", "field 'operators[0].flops': must be a number"),
        (("floor_time_s",), 0.0, "field 'floor_time_s': must be a positive number"),
    ],
)
def test_malformed_roofline_documents_are_clear_errors(
    path: tuple[object, ...], value: object, expected: str
) -> None:
    payload = roofline_payload()
    target = payload
    for key in path[:-1]:
        target = target[key]  # type: ignore[index]
    if value is None:
        del target[path[-1]]  # type: ignore[arg-type]
    else:
        target[path[-1]] = value  # type: ignore[index]
    with pytest.raises(BadInputError, match=None) as caught:
        RooflineProfile.from_payload(payload)
    assert expected in str(caught.value)


def test_capacity_documents_are_validated() -> None:
    doc = LoadCapacity.from_payload(capacity_payload())
    assert doc.capacity_qps == 40.0 and doc.valid
    broken = capacity_payload()
    del broken["valid"]
    with pytest.raises(BadInputError, match="'valid'"):
        LoadCapacity.from_payload(broken)
    with pytest.raises(BadInputError, match="not a JSON object"):
        LoadCapacity.from_payload([1, 2])
