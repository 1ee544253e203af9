"""plan/accelerators.py: the shipped datasheets cover every kind users rent, every figure is
sourced, and a bad file is one line."""

from __future__ import annotations

import pytest

from accelscope.errors import BadInputError
from accelscope.plan.accelerators import PEAK_DTYPES, load_accelerators, parse_accelerators

PART = """
[[accelerator]]
name = "Box"
family = "box"
kind = "{kind}"
vendor = "Us"
memory_bytes = 1000
memory_bandwidth_bytes_per_s = {bandwidth}
peak_ops_per_s = {{ {dtype} = 1e12 }}
[accelerator.sources]
memory_bytes = {{ source = "datasheet", date = "2026-11-28" }}
memory_bandwidth_bytes_per_s = {{ source = "datasheet", date = "2026-11-28" }}
"peak_ops_per_s.{dtype}" = {{ source = "datasheet", date = "2026-11-28" }}
"""


def test_every_kind_users_rent_is_there_and_sourced() -> None:
    parts = load_accelerators()
    assert {s.kind for s in parts.specs} == {"gpu", "tpu", "npu", "cpu"}
    families = {s.family for s in parts.specs}
    for family in (
        "nvidia-t4", "nvidia-l4", "nvidia-a10g", "nvidia-l40s", "nvidia-a100", "nvidia-h100",
        "nvidia-h200", "nvidia-b200", "amd-mi300x", "google-tpu-v5e", "google-tpu-v6e",
        "aws-inferentia2", "aws-trainium", "intel-gaudi2", "intel-xeon-amx", "amd-epyc",
    ):  # fmt: skip
        assert family in families, family
    for spec in parts.specs:
        for dtype in spec.peak_ops_per_s:
            assert dtype in PEAK_DTYPES
            source = spec.source_of(f"peak_ops_per_s.{dtype}")
            assert source is not None and source.source, (spec.name, dtype)
        assert spec.low_precision_peak[1] > 0


def test_a_good_part_parses() -> None:
    parts = parse_accelerators(PART.format(kind="npu", bandwidth="1e12", dtype="bf16"), "x")
    assert parts.get("Box").low_precision_peak == ("bf16", 1e12)


@pytest.mark.parametrize(
    ("kind", "bandwidth", "dtype", "mentions"),
    [
        ("fpga", "1e12", "bf16", ("'Box'", "kind")),
        ("gpu", "-5", "bf16", ("'Box'", "memory_bandwidth_bytes_per_s")),
        ("gpu", "1e12", "int3", ("'Box'", "peak_ops_per_s.int3", "unknown dtype")),
    ],
)
def test_a_bad_part_is_one_line(
    kind: str, bandwidth: str, dtype: str, mentions: tuple[str, ...]
) -> None:
    with pytest.raises(BadInputError) as raised:
        parse_accelerators(PART.format(kind=kind, bandwidth=bandwidth, dtype=dtype), "mine.toml")
    message = str(raised.value)
    assert "\n" not in message and "mine.toml" in message
    for mention in mentions:
        assert mention in message, message


def test_a_figure_without_a_source_is_refused() -> None:
    text = PART.format(kind="gpu", bandwidth="1e12", dtype="bf16").replace(
        'memory_bytes = { source = "datasheet", date = "2026-11-28" }\n', ""
    )
    with pytest.raises(BadInputError, match=r"sources\.memory_bytes"):
        parse_accelerators(text, "x")


def test_an_unknown_part_names_the_known_ones() -> None:
    with pytest.raises(BadInputError, match="NVIDIA L4"):
        load_accelerators().get("NVIDIA L5")


@pytest.mark.parametrize(
    ("device", "memory_gb", "parts"),
    [
        # names as NVIDIA's driver reports them: the SXM parts state no form factor (or sxm4)
        ("NVIDIA H100 80GB HBM3", 85.5, ["NVIDIA H100 SXM 80GB"]),
        ("NVIDIA H100 PCIe", 85.5, ["NVIDIA H100 PCIe 80GB"]),
        ("NVIDIA H100 NVL", 100.0, ["NVIDIA H100 NVL 94GB"]),
        ("NVIDIA H200", 150.1, ["NVIDIA H200 SXM 141GB"]),
        ("NVIDIA A100-SXM4-40GB", 42.5, ["NVIDIA A100 SXM 40GB"]),
        ("NVIDIA A100-SXM4-80GB", 85.1, ["NVIDIA A100 SXM 80GB"]),
        ("NVIDIA A100-SXM4-40GB", None, ["NVIDIA A100 SXM 40GB", "NVIDIA A100 SXM 80GB"]),
        ("Tesla T4", 15.8, ["NVIDIA T4"]),
        ("AMD Instinct MI300X", 205.8, ["AMD Instinct MI300X"]),
        ("NVIDIA A100 80GB PCIe", 85.1, []),  # the catalog has no PCIe A100
        ("NVIDIA H200 NVL", 150.0, []),
        ("NVIDIA GeForce RTX 4090", 25.3, []),
        ("AMD EPYC 9654", None, []),  # a CPU is never a device's datasheet
    ],
)
def test_a_device_name_finds_its_datasheet(
    device: str, memory_gb: float | None, parts: list[str]
) -> None:
    memory = None if memory_gb is None else int(memory_gb * 1e9)
    assert [s.name for s in load_accelerators().for_device(device, memory)] == parts


def _linked(extra: str, sources: str) -> str:
    text = PART.format(kind="gpu", bandwidth="1e12", dtype="bf16")
    text = text.replace("[accelerator.sources]\n", f"{extra}\n[accelerator.sources]\n")
    return text + sources


LINK_SOURCE = 'interconnect_bytes_per_s = { source = "datasheet", date = "2026-11-29" }\n'
PEERS_SOURCE = 'interconnect_peers = { source = "datasheet", date = "2026-11-29" }\n'


def test_every_gpu_tpu_and_npu_has_a_sourced_interconnect_figure() -> None:
    for spec in load_accelerators().specs:
        if spec.kind == "cpu":
            assert spec.interconnect_bytes_per_s is None
            continue
        assert spec.interconnect_bytes_per_s is not None, spec.name
        source = spec.source_of("interconnect_bytes_per_s")
        assert source is not None and source.date, spec.name


def test_a_switch_gives_every_group_the_whole_link_and_a_mesh_its_share() -> None:
    switch = parse_accelerators(_linked("interconnect_bytes_per_s = 4e11", LINK_SOURCE), "x")
    assert [switch.get("Box").interconnect_at(tp) for tp in (2, 4, 8)] == [4e11] * 3
    links = "interconnect_bytes_per_s = 7e11\ninterconnect_peers = 7\ninterconnect_topology"
    mesh = parse_accelerators(_linked(f'{links} = "mesh"', LINK_SOURCE + PEERS_SOURCE), "x")
    assert [mesh.get("Box").interconnect_at(tp) for tp in (2, 4, 8)] == [1e11, 3e11, 7e11]
    torus = parse_accelerators(_linked(f'{links} = "torus"', LINK_SOURCE + PEERS_SOURCE), "x")
    assert [torus.get("Box").interconnect_at(tp) for tp in (2, 4, 8)] == [1e11, 2e11, 2e11]
    parts = load_accelerators()
    assert parts.get("AMD Instinct MI300X").interconnect_at(2) == pytest.approx(64e9)
    assert parts.get("Google TPU v6e (Trillium)").interconnect_at(8) == pytest.approx(200e9)
    with pytest.raises(ValueError, match="2 or more"):
        parts.get("AMD Instinct MI300X").interconnect_at(1)


@pytest.mark.parametrize(
    ("extra", "sources", "mentions"),
    [
        ("interconnect_bytes_per_s = 4e11", "", "sources.interconnect_bytes_per_s"),
        ("interconnect_bytes_per_s = -1", LINK_SOURCE, "interconnect_bytes_per_s"),
        ("interconnect_bytes_per_s = 4e11\ninterconnect_peers = 0", LINK_SOURCE + PEERS_SOURCE,
         "interconnect_peers"),
        ("interconnect_bytes_per_s = 4e11\ninterconnect_peers = 4", LINK_SOURCE + PEERS_SOURCE,
         "interconnect_topology"),
        ('interconnect_topology = "torus"', "", "interconnect_peers"),
        ('interconnect_peers = 4\ninterconnect_topology = "mesh"', PEERS_SOURCE,
         "interconnect_peers"),
        ('interconnect_bytes_per_s = 4e11\ninterconnect_topology = "ring"', LINK_SOURCE,
         "interconnect_topology"),
    ],
)  # fmt: skip
def test_a_bad_interconnect_figure_is_one_line(extra: str, sources: str, mentions: str) -> None:
    with pytest.raises(BadInputError) as raised:
        parse_accelerators(_linked(extra, sources), "mine.toml")
    message = str(raised.value)
    assert "\n" not in message and mentions in message and "mine.toml" in message, message
