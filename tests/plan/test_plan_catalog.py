"""The shipped catalog is complete and sourced; bad user catalogs are one line, exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest

from accelscope.errors import BadInputError
from accelscope.plan.catalog import DTYPES, load_catalog, parse_catalog_text
from accelscope.testing import CliRunner, assert_one_line_error

GOOD = """
[[instance]]
type = "my.box"
provider = "onprem"
region = "lab"
kind = "gpu"
accelerator = "NVIDIA L4"
accelerator_count = 2
device_memory_bytes = 25769803776
vcpus = 16
host_memory_bytes = 68719476736
price_usd_per_hour = 1.5
spot_price_usd_per_hour = 0.6
memory_bandwidth_bytes_per_s = 300e9
peak_ops_per_s = { fp32 = 30e12, bf16 = 120e12 }
[instance.sources]
shape = { source = "our rack inventory", date = "2026-11-01" }
price_usd_per_hour = { source = "finance sheet", date = "2026-11-01" }
spot_price_usd_per_hour = { source = "finance sheet", date = "2026-11-01" }
memory_bandwidth_bytes_per_s = { source = "datasheet", date = "2026-11-01" }
peak_ops_per_s = { source = "datasheet", date = "2026-11" }
"""


def test_shipped_catalog_has_every_kind_and_a_source_for_every_number() -> None:
    catalog = load_catalog()
    kinds = {i.kind for i in catalog.instances}
    assert kinds == {"cpu", "gpu", "tpu", "npu"} and len(catalog.instances) >= 10
    for instance in catalog.instances:
        for key in ("shape", "price_usd_per_hour", "memory_bandwidth_bytes_per_s"):
            source = instance.source_of(key)
            assert source is not None and source.source and source.date, (instance.type, key)
        for dtype, rate in instance.peak_ops_per_s.items():
            assert dtype in DTYPES and rate > 0
            assert instance.source_of(f"peak_ops_per_s.{dtype}") is not None
        assert instance.price_usd_per_hour > 0 and instance.memory_bandwidth_bytes_per_s > 0
    types = {i.type for i in catalog.instances}
    assert {
        "c7i.2xlarge",
        "c6i.2xlarge",
        "c7g.2xlarge",
        "g4dn.xlarge",
        "g6.xlarge",
        "p5.48xlarge",
    } <= types
    assert catalog.get("c6i.2xlarge").peak("bf16") is None  # Ice Lake: no bf16 fast path


def test_a_published_resnet50_figure_is_cited_with_precision_batch_and_date() -> None:
    figures = [
        (i, p) for i in load_catalog().instances for p in i.published if p.model == "resnet50"
    ]
    assert figures
    for instance, figure in figures:
        assert instance.kind == "gpu"
        assert figure.source.startswith("https://") and figure.precision and figure.batch
        assert figure.date[:4].isdigit() and figure.items_per_s_per_device > 0


def test_user_catalog_extends_and_overrides(tmp_path: Path) -> None:
    mine = tmp_path / "mine.toml"
    override = GOOD.replace('"my.box"', '"g6.xlarge"').replace(
        "price_usd_per_hour = 1.5", "price_usd_per_hour = 0.5"
    )
    mine.write_text(GOOD + override, encoding="utf-8")
    catalog = load_catalog([mine])
    assert catalog.get("my.box").spot_price_usd_per_hour == 0.6
    assert catalog.get("my.box").devices == 2
    assert catalog.get("g6.xlarge").price_usd_per_hour == 0.5
    assert catalog.overridden == ("g6.xlarge",)
    assert catalog.get("g6.xlarge").origin == str(mine)


def test_catalog_files_with_the_old_price_names_still_load(tmp_path: Path) -> None:
    old = tmp_path / "old.toml"
    old.write_text(GOOD.replace("price_usd_per_hour", "price_per_hour"), encoding="utf-8")
    assert "price_per_hour = 1.5" in old.read_text() and "usd" not in old.read_text()
    box = load_catalog([old]).get("my.box")
    assert box.price_usd_per_hour == 1.5 and box.spot_price_usd_per_hour == 0.6
    assert box.source_of("spot_price_usd_per_hour") is not None
    bad = GOOD.replace("price_usd_per_hour = 1.5", "price_per_hour = -1")
    with pytest.raises(BadInputError, match="'price_per_hour': must be a positive number"):
        parse_catalog_text(bad, "old.toml")


BAD_CASES = {
    "empty": ("", "no [[instance]] entries"),
    "not toml": ("[[instance]\ntype=", "not valid TOML"),
    "missing field": (GOOD.replace('region = "lab"\n', ""), "'region': missing"),
    "negative price": (
        GOOD.replace("price_usd_per_hour = 1.5", "price_usd_per_hour = -1.5"),
        "'price_usd_per_hour': must be a positive number, got -1.5",
    ),
    "zero rate": (GOOD.replace("fp32 = 30e12", "fp32 = 0"), "peak_ops_per_s.fp32"),
    "wrong type": (
        GOOD.replace("vcpus = 16", 'vcpus = "sixteen"'),
        "'vcpus': must be an integer, got 'sixteen'",
    ),
    "bool is not a number": (GOOD.replace("vcpus = 16", "vcpus = true"), "'vcpus'"),
    "duplicate": (GOOD + GOOD, "duplicate name"),
    "unknown field": (GOOD.replace("vcpus = 16", "vcpu = 16"), "'vcpu': unknown field"),
    "missing source": (
        GOOD.replace(
            'spot_price_usd_per_hour = { source = "finance sheet", date = "2026-11-01" }\n', ""
        ),
        "'sources.spot_price_usd_per_hour': missing",
    ),
    "bad date": (
        GOOD.replace('date = "2026-11" }', 'date = "last week" }'),
        "'sources.peak_ops_per_s.date': must be a date like 2025-06-30",
    ),
    "unknown dtype": (GOOD.replace("bf16 = 120e12", "bf17 = 120e12"), "'peak_ops_per_s.bf17'"),
    "old and new name": (
        GOOD.replace("price_usd_per_hour = 1.5", "price_usd_per_hour = 1.5\nprice_per_hour = 1.5"),
        "'price_usd_per_hour': given twice",
    ),
}


@pytest.mark.parametrize("case", list(BAD_CASES))
def test_bad_catalog_is_one_line_exit_2(case: str, tmp_path: Path, cli: CliRunner) -> None:
    text, expected = BAD_CASES[case]
    path = tmp_path / "bad.toml"
    path.write_text(text, encoding="utf-8")
    code, out, err = cli(
        "plan",
        "--traffic",
        "peak=10qps",
        "--sla-p99",
        "100ms",
        "--model",
        "m",
        "--capacity",
        "5",
        "--catalog",
        path,
        "--store",
        tmp_path / "r.db",
    )
    assert out == ""
    assert_one_line_error(code, err, str(path), expected)
    assert err.startswith("error: catalog "), err
    assert "instance 'my.box'" in err or case in ("empty", "not toml")
    assert not (tmp_path / "r.db").exists()


def test_missing_catalog_file_and_unknown_type(tmp_path: Path, cli: CliRunner) -> None:
    code, _, err = cli("plan", "memory", tmp_path / "c.json", "--catalog", tmp_path / "nope.toml")
    assert_one_line_error(code, err)
    with pytest.raises(BadInputError, match=r"no instance type 'x9\.huge'"):
        load_catalog().get("x9.huge")
    with pytest.raises(BadInputError, match="entry #1"):
        parse_catalog_text('[[instance]]\nkind = "gpu"\n', "f.toml")
