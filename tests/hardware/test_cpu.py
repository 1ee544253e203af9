"""CPU discovery: /proc/cpuinfo parsing on fixture texts, sysfs caches/frequency, meminfo."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from accelscope.hardware import cpu as cpu_mod
from accelscope.hardware.cpu import (
    CpuInfo,
    memory_total_bytes,
    parse_cache_size,
    parse_cpuinfo,
    read_cache_sizes,
    read_cpu_info,
)
from accelscope.serialise import dump, load


def one_line(text: str) -> str:
    """Join a wrapped flag list back into the single line /proc/cpuinfo has."""
    return " ".join(text.split())


SPR_FLAGS = one_line(
    """
fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush dts acpi
mmx fxsr sse sse2 ss ht tm pbe syscall nx pdpe1gb rdtscp lm constant_tsc art arch_perfmon
pebs bts rep_good nopl xtopology nonstop_tsc cpuid aperfmperf tsc_known_freq pni pclmulqdq
dtes64 monitor ds_cpl vmx smx est tm2 ssse3 sdbg fma cx16 xtpr pdcm pcid dca sse4_1 sse4_2
x2apic movbe popcnt tsc_deadline_timer aes xsave avx f16c rdrand lahf_lm abm 3dnowprefetch
cpuid_fault epb cat_l3 cat_l2 cdp_l3 invpcid_single intel_ppin cdp_l2 ssbd mba ibrs ibpb
stibp ibrs_enhanced tpr_shadow flexpriority ept vpid ept_ad fsgsbase tsc_adjust bmi1 avx2
smep bmi2 erms invpcid cqm rdt_a avx512f avx512dq rdseed adx smap avx512ifma clflushopt
clwb intel_pt avx512cd sha_ni avx512bw avx512vl xsaveopt xsavec xgetbv1 xsaves cqm_llc
cqm_occup_llc cqm_mbm_total cqm_mbm_local split_lock_detect avx_vnni avx512_bf16 wbnoinvd
dtherm ida arat pln pts hfi vnmi avx512vbmi umip pku ospke waitpkg avx512_vbmi2 gfni vaes
vpclmulqdq avx512_vnni avx512_bitalg tme avx512_vpopcntdq la57 rdpid bus_lock_detect
cldemote movdiri movdir64b enqcmd fsrm md_clear serialize tsxldtrk pconfig arch_lbr ibt
amx_bf16 avx512_fp16 amx_tile amx_int8 flush_l1d arch_capabilities
"""
)

MILAN_FLAGS = one_line(
    """
fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush mmx fxsr
sse sse2 ht syscall nx mmxext fxsr_opt pdpe1gb rdtscp lm constant_tsc rep_good nopl
nonstop_tsc cpuid extd_apicid aperfmperf rapl pni pclmulqdq monitor ssse3 fma cx16 pcid
sse4_1 sse4_2 x2apic movbe popcnt aes xsave avx f16c rdrand lahf_lm cmp_legacy svm extapic
cr8_legacy abm sse4a misalignsse 3dnowprefetch osvw ibs skinit wdt tce topoext
perfctr_core perfctr_nb bpext perfctr_llc mwaitx cpb cat_l3 cdp_l3 invpcid_single
hw_pstate ssbd mba ibrs ibpb stibp vmmcall fsgsbase bmi1 avx2 smep bmi2 erms invpcid cqm
rdt_a rdseed adx smap clflushopt clwb sha_ni xsaveopt xsavec xgetbv1 xsaves cqm_llc
cqm_occup_llc cqm_mbm_total cqm_mbm_local clzero irperf xsaveerptr rdpru wbnoinvd amd_ppin
arat npt lbrv svm_lock nrip_save tsc_scale vmcb_clean flushbyasid decodeassists
pausefilter pfthreshold v_vmsave_vmload vgif v_spec_ctrl umip pku ospke vaes vpclmulqdq
rdpid overflow_recov succor smca
"""
)

GRAVITON3_FEATURES = (
    "fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm jscvt fcma "
    "lrcpc dcpop sha3 sm3 sm4 asimddp sha512 sve asimdfhm dit uscat ilrcpc flagm ssbs paca pacg "
    "dcpodp svei8mm svebf16 i8mm bf16 dgh rng"
)


def x86_cpuinfo(
    vendor: str, family: int, model: int, name: str, flags: str, sockets: int, cores: int, smt: int
) -> str:
    """A /proc/cpuinfo text with ``sockets * cores * smt`` processor blocks."""
    blocks = []
    processor = 0
    for thread in range(smt):
        for socket in range(sockets):
            for core in range(cores):
                blocks.append(
                    f"processor\t: {processor}\nvendor_id\t: {vendor}\ncpu family\t: {family}\n"
                    f"model\t\t: {model}\nmodel name\t: {name}\nstepping\t: 8\n"
                    f"cpu MHz\t\t: 2000.000\ncache size\t: 107520 KB\nphysical id\t: {socket}\n"
                    f"siblings\t: {cores * smt}\ncore id\t\t: {core}\ncpu cores\t: {cores}\n"
                    f"apicid\t\t: {processor * 2 + thread}\nfpu\t\t: yes\nflags\t\t: {flags}\n"
                    "bogomips\t: 4000.00\naddress sizes\t: 46 bits physical, 57 bits virtual\n"
                    "power management:\n"
                )
                processor += 1
    return "\n".join(blocks) + "\n"


SAPPHIRE_RAPIDS = x86_cpuinfo(
    "GenuineIntel", 6, 143, "Intel(R) Xeon(R) Platinum 8480+", SPR_FLAGS, 2, 4, 2
)
ZEN3_MILAN = x86_cpuinfo(
    "AuthenticAMD", 25, 1, "AMD EPYC 7763 64-Core Processor", MILAN_FLAGS, 1, 8, 2
)
GRAVITON3 = (
    "\n".join(
        f"processor\t: {i}\nBogoMIPS\t: 2100.00\nFeatures\t: {GRAVITON3_FEATURES}\n"
        "CPU implementer\t: 0x41\nCPU architecture: 8\nCPU variant\t: 0x1\n"
        "CPU part\t: 0xd40\nCPU revision\t: 1\n"
        for i in range(4)
    )
    + "\n"
)


def test_sapphire_rapids_identity_topology_and_amx() -> None:
    parsed = parse_cpuinfo(SAPPHIRE_RAPIDS)
    assert parsed.model_name == "Intel(R) Xeon(R) Platinum 8480+"
    assert parsed.vendor == "Intel"
    assert parsed.arch == "x86_64"
    assert (parsed.logical_cores, parsed.physical_cores, parsed.sockets) == (16, 8, 2)
    assert parsed.isa == (
        "amx_bf16",
        "amx_int8",
        "amx_tile",
        "avx2",
        "avx512_bf16",
        "avx512_bw",
        "avx512_fp16",
        "avx512_vl",
        "avx512_vnni",
        "avx512f",
        "avx_vnni",
        "fma",
    )
    assert "amx_fp16" not in parsed.isa  # Sapphire Rapids has no AMX-FP16 (Granite Rapids does)


def test_zen3_has_avx2_fma_but_no_avx512_or_vnni() -> None:
    parsed = parse_cpuinfo(ZEN3_MILAN)
    assert parsed.model_name == "AMD EPYC 7763 64-Core Processor"
    assert parsed.vendor == "AMD"
    assert parsed.isa == ("avx2", "fma")
    assert (parsed.logical_cores, parsed.physical_cores, parsed.sockets) == (16, 8, 1)


def test_arm_without_model_name_uses_implementer_and_part() -> None:
    parsed = parse_cpuinfo(GRAVITON3)
    assert parsed.model_name == "ARM Neoverse-V1"
    assert parsed.vendor == "ARM"
    assert parsed.arch == "aarch64"
    assert parsed.isa == ("arm_bf16", "arm_i8mm", "neon", "sve")
    assert parsed.logical_cores == 4
    assert parsed.physical_cores is None and parsed.sockets is None


def test_arm_unknown_part_still_gets_a_descriptive_name() -> None:
    text = "processor\t: 0\nFeatures\t: fp asimd\nCPU implementer\t: 0x41\nCPU part\t: 0xfff\n"
    parsed = parse_cpuinfo(text)
    assert parsed.model_name == "ARM implementer 0x41 part 0xfff"
    assert parsed.isa == ("neon",)


def test_arm_feature_names_are_not_read_as_x86_flags() -> None:
    # "bf16" is an ARM feature; on an x86 flags line it would be meaningless and must be ignored.
    parsed = parse_cpuinfo("processor\t: 0\nvendor_id\t: GenuineIntel\nflags\t\t: fma bf16 sve\n")
    assert parsed.isa == ("fma",)


@pytest.mark.parametrize("text", ["", "garbage without colons\n\n\n", "processor : x\n:::\n"])
def test_parse_cpuinfo_never_raises_on_junk(text: str) -> None:
    parsed = parse_cpuinfo(text)
    assert parsed.isa == ()
    assert parsed.model_name == ""


@pytest.mark.parametrize(
    ("text", "expected"),
    [("48K", 48 << 10), ("2048K", 2 << 20), ("32M", 32 << 20), ("1G", 1 << 30), ("bad", None)],
)
def test_parse_cache_size(text: str, expected: int | None) -> None:
    assert parse_cache_size(text) == expected


def _write_cache(root: Path, index: int, level: int, kind: str, size: str) -> None:
    entry = root / f"index{index}"
    entry.mkdir(parents=True)
    (entry / "level").write_text(f"{level}\n")
    (entry / "type").write_text(f"{kind}\n")
    (entry / "size").write_text(f"{size}\n")


def test_read_cache_sizes_skips_instruction_cache(tmp_path: Path) -> None:
    _write_cache(tmp_path, 0, 1, "Data", "48K")
    _write_cache(tmp_path, 1, 1, "Instruction", "64K")
    _write_cache(tmp_path, 2, 2, "Unified", "2048K")
    _write_cache(tmp_path, 3, 3, "Unified", "107520K")
    assert read_cache_sizes(tmp_path) == {1: 48 << 10, 2: 2 << 20, 3: 107520 << 10}
    assert read_cache_sizes(tmp_path / "missing") == {}


def test_read_cpu_info_from_fixture_files(tmp_path: Path) -> None:
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(SAPPHIRE_RAPIDS)
    sys_cpu = tmp_path / "sys"
    _write_cache(sys_cpu / "cpu0" / "cache", 0, 2, "Unified", "2048K")
    _write_cache(sys_cpu / "cpu0" / "cache", 1, 3, "Unified", "107520K")
    (sys_cpu / "cpu0" / "cpufreq").mkdir(parents=True)
    (sys_cpu / "cpu0" / "cpufreq" / "cpuinfo_max_freq").write_text("3800000\n")  # kHz
    info = read_cpu_info(cpuinfo, sys_cpu)
    assert info.model_name == "Intel(R) Xeon(R) Platinum 8480+"
    assert info.max_freq_mhz == pytest.approx(3800.0)
    assert info.l2_cache_bytes == 2 << 20
    assert info.l3_cache_bytes == 107520 << 10
    assert info.sockets == 2
    assert info.has("amx_bf16") and not info.has("amx_fp16")
    assert info.usable_cores == len(os.sched_getaffinity(0))


def test_read_cpu_info_with_nothing_readable_is_unknown_not_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cpu_mod, "_psutil_physical_cores", lambda: None)
    info = read_cpu_info(tmp_path / "no-cpuinfo", tmp_path / "no-sys")
    assert info.isa == ()
    assert info.l2_cache_bytes is None and info.l3_cache_bytes is None
    assert info.logical_cores >= 1 and 1 <= info.physical_cores <= info.logical_cores
    assert info.sockets >= 1
    assert info.model_name  # platform.processor() or "unknown"


def test_cpuinfo_dict_round_trip() -> None:
    info = CpuInfo(
        model_name="m",
        vendor="Intel",
        arch="x86_64",
        logical_cores=8,
        physical_cores=4,
        usable_cores=2,
        sockets=1,
        max_freq_mhz=3500.5,
        l2_cache_bytes=1 << 21,
        l3_cache_bytes=None,
        isa=("avx2", "fma"),
    )
    assert load(CpuInfo, dump(info)) == info
    assert dump(info)["isa"] == ["avx2", "fma"]


def test_memory_total_comes_from_psutil() -> None:
    assert memory_total_bytes(lambda: SimpleNamespace(total=24684084 * 1024)) == 24684084 * 1024
    # This machine, through psutil (MemTotal of /proc/meminfo on Linux).
    assert memory_total_bytes() > 0
    proc = Path("/proc/meminfo")
    if proc.exists():
        kib = next(
            int(line.split()[1])
            for line in proc.read_text().splitlines()
            if line.startswith("MemTotal:")
        )
        assert memory_total_bytes() == kib * 1024


def test_memory_total_is_zero_when_unknown() -> None:
    def refuse() -> None:
        raise OSError("no /proc/meminfo")

    assert memory_total_bytes(refuse) == 0


def test_this_machine_isa_matches_proc_cpuinfo() -> None:
    proc = Path("/proc/cpuinfo")
    if not proc.exists():
        pytest.skip("no /proc/cpuinfo on this OS")
    flags = set()
    for line in proc.read_text().splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            flags = set(value.split())
            break
    info = read_cpu_info()
    assert info.has("amx_bf16") == ("amx_bf16" in flags)
    assert info.has("avx512_bw") == ("avx512bw" in flags)
    assert list(info.isa) == sorted(info.isa)
