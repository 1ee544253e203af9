"""plan/projection/capacity.py and the plan it feeds: a model's capacity on a catalog option,
projected from published results with its interval; the ranking says whether it is decided."""

from __future__ import annotations

import dataclasses

import pytest

from accelscope.documents import RooflineProfile
from accelscope.errors import BadInputError
from accelscope.plan.catalog import load_catalog, parse_catalog_text
from accelscope.plan.fleet import Option, OptionCost
from accelscope.plan.projection.capacity import class_benchmark, published_capacity
from accelscope.plan.service import ranking_note
from plan_helpers import roofline_payload


def _profile(name: str = "aten::convolution") -> RooflineProfile:
    payload = roofline_payload()
    payload["operators"][0]["name"] = name
    return RooflineProfile.from_payload(payload)


def test_the_class_follows_where_the_flops_are() -> None:
    assert class_benchmark(_profile()).name == "resnet50"  # type: ignore[union-attr]
    assert class_benchmark(_profile("aten::linear")).name == "bert"  # type: ignore[union-attr]
    assert class_benchmark(_profile("aten::max_pool2d")) is None


def test_a_gpu_option_gets_a_point_inside_its_interval_and_says_what_calibrated_it() -> None:
    catalog = load_catalog()
    l4 = published_capacity(_profile(), catalog.get("g6.xlarge"), 0.1)
    h100 = published_capacity(_profile(), catalog.get("p5.48xlarge"), 0.1)
    assert l4 is not None and h100 is not None
    assert l4.low_qps_per_instance < l4.qps_per_instance < l4.high_qps_per_instance
    assert l4.benchmark == "resnet50/Server" and l4.part == "NVIDIA L4"
    assert "other workloads only" in l4.basis  # L4's published rows are BERT's
    assert "published on conv" in h100.basis
    # an 8-GPU instance serves 8 replicas; one H100 beats one L4 several times over
    assert h100.qps_per_instance / 8 > 3 * l4.qps_per_instance
    assert any("not yours" in n for n in l4.notes)


def test_a_part_with_no_published_row_gets_a_wider_interval_and_says_so() -> None:
    catalog = load_catalog()
    inf2 = published_capacity(_profile(), catalog.get("inf2.xlarge"), 0.1)
    l40s = published_capacity(_profile(), catalog.get("g6e.xlarge"), 0.1)
    assert inf2 is not None and l40s is not None and not inf2.calibrated
    assert "no published calibration" in inf2.basis
    width = lambda c: c.high_qps_per_instance / c.low_qps_per_instance  # noqa: E731
    assert width(inf2) > width(l40s)


def test_a_tighter_sla_than_mlperfs_bound_is_said() -> None:
    tight = published_capacity(_profile(), load_catalog().get("g6.xlarge"), 0.005)
    assert tight is not None and any("looser than your 5 ms" in n for n in tight.notes)


def test_no_part_or_no_class_means_no_published_projection() -> None:
    catalog = load_catalog()
    assert published_capacity(_profile(), catalog.get("c6i.2xlarge"), 0.1) is None
    assert published_capacity(_profile("aten::max_pool2d"), catalog.get("g6.xlarge"), 0.1) is None


def test_a_catalog_part_that_is_not_shipped_is_one_line() -> None:
    text = """
[[instance]]
type = "x"
provider = "p"
region = "r"
kind = "tpu"
accelerator = "TPU"
part = "Google TPU v9"
accelerator_count = 1
device_memory_bytes = 1000
price_usd_per_hour = 1.0
memory_bandwidth_bytes_per_s = 1e12
peak_ops_per_s = { bf16 = 1e14 }
[instance.sources]
shape = { source = "s", date = "2026-11-28" }
price_usd_per_hour = { source = "s", date = "2026-11-28" }
memory_bandwidth_bytes_per_s = { source = "s", date = "2026-11-28" }
peak_ops_per_s = { source = "s", date = "2026-11-28" }
"""
    with pytest.raises(BadInputError, match="no accelerator 'Google TPU v9'") as raised:
        parse_catalog_text(text, "mine.toml")
    assert "\n" not in str(raised.value)


def _cost(name: str, per_million: float, low: float | None, high: float | None) -> OptionCost:
    from accelscope.plan.capacity import CapacityEstimate

    published = None
    if low is not None and high is not None:
        base = published_capacity(_profile(), load_catalog().get("g6.xlarge"), 0.1)
        assert base is not None
        published = dataclasses.replace(
            base, qps_per_instance=100.0, low_qps_per_instance=low, high_qps_per_instance=high
        )
    capacity = CapacityEstimate(
        qps_per_instance=100.0,
        basis="projected" if published else "measured",
        label="estimate" if published else "measured",
        meets_sla=True,
        published=published,
    )
    option = Option(
        name=name, kind="gpu", description="", price_usd_per_hour=1.0, capacity=capacity
    )
    return OptionCost(option=option, feasible=True, reason="", per_million_autoscaled=per_million)


def test_the_ranking_is_decided_only_when_the_intervals_part() -> None:
    apart = [_cost("a", 1.0, 90.0, 110.0), _cost("b", 2.0, 90.0, 110.0)]
    assert ranking_note(apart, "a").startswith("decided: a")
    close = [_cost("a", 1.0, 50.0, 200.0), _cost("b", 1.2, 50.0, 200.0)]
    note = ranking_note(close, "a")
    assert note.startswith("not decided: a and b") and "accelscope load run on a or b" in note
    measured = [_cost("a", 1.0, None, None), _cost("b", 1.01, None, None)]
    assert ranking_note(measured, "a").startswith("decided")
