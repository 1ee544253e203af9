"""What the host CPU is and which matrix/vector units it has, read without running anything.

:func:`parse_cpuinfo` is a pure parser of ``/proc/cpuinfo`` text (x86 and ARM);
:func:`read_cpu_info` adds what only the running system knows (affinity, sysfs frequency and
caches). Nothing here raises on an odd machine: a missing file or field becomes ``None``,
``""`` or an empty ISA list.
"""

from __future__ import annotations

import os
import platform
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "ARM_FEATURES",
    "X86_FEATURES",
    "CpuInfo",
    "ParsedCpuinfo",
    "memory_total_bytes",
    "parse_cache_size",
    "parse_cpuinfo",
    "read_cache_sizes",
    "read_cpu_info",
]

X86_FEATURES: dict[str, str] = {
    "avx2": "avx2",
    "fma": "fma",
    "avx512f": "avx512f",
    "avx512bw": "avx512_bw",
    "avx512vl": "avx512_vl",
    "avx512_vnni": "avx512_vnni",
    "avx_vnni": "avx_vnni",
    "avx512_bf16": "avx512_bf16",
    "avx512_fp16": "avx512_fp16",
    "amx_tile": "amx_tile",
    "amx_bf16": "amx_bf16",
    "amx_int8": "amx_int8",
    "amx_fp16": "amx_fp16",
}
"""``/proc/cpuinfo`` ``flags`` names (x86) -> accelscope's normalised ISA feature names."""

ARM_FEATURES: dict[str, str] = {
    "asimd": "neon",
    "sve": "sve",
    "bf16": "arm_bf16",
    "i8mm": "arm_i8mm",
}
"""``/proc/cpuinfo`` ``Features`` names (aarch64) -> accelscope's normalised ISA feature names."""

_ARM_IMPLEMENTERS = {
    0x41: "ARM",
    0x42: "Broadcom",
    0x43: "Cavium",
    0x46: "Fujitsu",
    0x48: "HiSilicon",
    0x4E: "NVIDIA",
    0x50: "APM",
    0x51: "Qualcomm",
    0x61: "Apple",
    0xC0: "Ampere",
}
_ARM_PARTS = {  # (implementer, part) -> core name, for the common server and board cores
    (0x41, 0xD03): "Cortex-A53",
    (0x41, 0xD07): "Cortex-A57",
    (0x41, 0xD08): "Cortex-A72",
    (0x41, 0xD0B): "Cortex-A76",
    (0x41, 0xD0C): "Neoverse-N1",
    (0x41, 0xD40): "Neoverse-V1",
    (0x41, 0xD49): "Neoverse-N2",
    (0x41, 0xD4F): "Neoverse-V2",
    (0x41, 0xD84): "Neoverse-V3",
    (0x41, 0xD8E): "Neoverse-N3",
    (0x46, 0x001): "A64FX",
    (0xC0, 0xAC3): "AmpereOne",
}
_X86_VENDORS = {"GenuineIntel": "Intel", "AuthenticAMD": "AMD", "HygonGenuine": "Hygon"}

_CPUINFO = Path("/proc/cpuinfo")
_SYS_CPU = Path("/sys/devices/system/cpu")


@dataclass(frozen=True, kw_only=True)
class ParsedCpuinfo:
    """What ``/proc/cpuinfo`` text alone says; ``None`` where it does not say.

    ``logical_cores`` counts ``processor`` entries (online logical CPUs). ``physical_cores`` counts
    distinct ``(physical id, core id)`` pairs and ``sockets`` distinct ``physical id`` values; both
    are ``None`` when the text has no topology (ARM, some VMs).
    """

    model_name: str
    vendor: str
    arch: str = ""
    logical_cores: int
    physical_cores: int | None
    sockets: int | None
    isa: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class CpuInfo:
    """The host CPU: identity, core counts, clock, caches and recognised ISA features.

    Attributes:
        model_name: Marketing name (``Intel(R) Xeon(R) Platinum 8480+``), or the core name on ARM.
        vendor: ``Intel``, ``AMD``, ``ARM``, ``Ampere``... (``""`` if unknown).
        arch: Machine architecture, ``x86_64`` or ``aarch64`` (``""`` if unknown).
        logical_cores: Logical CPUs in the machine (hardware threads).
        physical_cores: Physical cores in the machine (all sockets).
        usable_cores: Logical CPUs this process may run on (its scheduler affinity mask).
        sockets: CPU packages.
        max_freq_mhz: Maximum core clock in MHz, ``None`` when the system does not say (VMs).
        l2_cache_bytes: Size in bytes of the L2 cache instance CPU 0 uses (per core on most CPUs).
        l3_cache_bytes: Size in bytes of the L3 cache instance CPU 0 uses (per socket/CCX slice).
        isa: Sorted recognised ISA features (see :data:`X86_FEATURES`, :data:`ARM_FEATURES`).
    """

    model_name: str
    vendor: str
    arch: str = ""
    logical_cores: int
    physical_cores: int
    usable_cores: int
    sockets: int
    max_freq_mhz: float | None
    l2_cache_bytes: int | None
    l3_cache_bytes: int | None
    isa: tuple[str, ...]

    def has(self, feature: str) -> bool:
        """True when the normalised ISA feature (e.g. ``amx_bf16``) is present."""
        return feature in self.isa


def _int_auto(text: str) -> int | None:
    try:
        return int(text.strip(), 0)
    except ValueError:
        return None


def _arm_identity(first: dict[str, str]) -> tuple[str, str]:
    implementer = _int_auto(first.get("CPU implementer", ""))
    part = _int_auto(first.get("CPU part", ""))
    vendor = _ARM_IMPLEMENTERS.get(implementer, "") if implementer is not None else ""
    core = _ARM_PARTS.get((implementer, part)) if implementer is not None and part else None
    if core:
        return f"{vendor} {core}".strip(), vendor
    if implementer is not None and part is not None:
        return f"{vendor or 'ARM'} implementer {implementer:#x} part {part:#x}", vendor
    return "", vendor


def parse_cpuinfo(text: str) -> ParsedCpuinfo:
    """Parse ``/proc/cpuinfo`` text (x86 ``flags`` or ARM ``Features`` layout); never raises."""
    blocks: list[dict[str, str]] = []
    current: dict[str, str] = {}
    header: dict[str, str] = {}  # ARM kernels put e.g. "Hardware" in a trailing block
    for line in text.splitlines():
        if not line.strip():
            if current:
                blocks.append(current)
                current = {}
            continue
        key, sep, value = line.partition(":")
        if not sep:
            continue
        key, value = key.strip(), value.strip()
        if key == "processor" and "processor" in current:
            blocks.append(current)
            current = {}
        current[key] = value
    if current:
        blocks.append(current)
    cpus = [b for b in blocks if "processor" in b]
    for block in blocks:
        for key, value in block.items():
            header.setdefault(key, value)
    first = cpus[0] if cpus else header

    flags = first.get("flags", header.get("flags", ""))
    features = first.get("Features", header.get("Features", ""))
    is_arm = bool(features) or "CPU implementer" in first
    arch = "aarch64" if is_arm else ("x86_64" if flags or "vendor_id" in first else "")
    names = features.split() if is_arm else flags.split()
    table = ARM_FEATURES if is_arm else X86_FEATURES
    isa = tuple(sorted({table[n] for n in names if n in table}))

    if is_arm:
        model_name, vendor = _arm_identity(first)
        model_name = first.get("model name") or model_name or header.get("Hardware", "")
    else:
        model_name = first.get("model name", "")
        raw_vendor = first.get("vendor_id", "")
        vendor = _X86_VENDORS.get(raw_vendor, raw_vendor)

    cores = {(b.get("physical id"), b.get("core id")) for b in cpus if "core id" in b}
    packages = {b["physical id"] for b in cpus if "physical id" in b}
    return ParsedCpuinfo(
        model_name=model_name,
        vendor=vendor,
        arch=arch,
        logical_cores=len(cpus),
        physical_cores=len(cores) or None,
        sockets=len(packages) or None,
        isa=isa,
    )


def parse_cache_size(text: str) -> int | None:
    """Parse a sysfs cache size (``48K``, ``2048K``, ``32M``) into bytes; ``None`` if malformed."""
    match = re.fullmatch(r"\s*(\d+)\s*([KMG]?)i?B?\s*", text, flags=re.IGNORECASE)
    if not match:
        return None
    scale = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}[match.group(2).upper()]
    return int(match.group(1)) * scale


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except (OSError, ValueError):
        return None


def read_cache_sizes(cache_dir: Path = _SYS_CPU / "cpu0" / "cache") -> dict[int, int]:
    """Map cache level -> size in bytes of the data/unified cache CPU 0 uses, from sysfs.

    Instruction caches are skipped; ``{}`` when the directory is missing.
    """
    sizes: dict[int, int] = {}
    try:
        entries = sorted(cache_dir.glob("index*"))
    except OSError:
        return sizes
    for entry in entries:
        kind = (_read(entry / "type") or "").strip()
        level = _int_auto(_read(entry / "level") or "")
        size = parse_cache_size(_read(entry / "size") or "")
        if kind == "Instruction" or level is None or size is None:
            continue
        sizes[level] = max(size, sizes.get(level, 0))
    return sizes


def _max_freq_mhz(sys_cpu: Path) -> float | None:
    khz = _int_auto(_read(sys_cpu / "cpu0" / "cpufreq" / "cpuinfo_max_freq") or "")
    if khz:
        return khz / 1000.0
    try:
        import psutil

        freq = psutil.cpu_freq()
    except Exception:  # noqa: BLE001 - psutil raises assorted errors on odd kernels
        return None
    if freq is not None and freq.max and freq.max > 0:
        return float(freq.max)
    return None


def _sysfs_sockets(sys_cpu: Path) -> int | None:
    try:
        ids = {
            (_read(p) or "").strip() for p in sys_cpu.glob("cpu[0-9]*/topology/physical_package_id")
        }
    except OSError:
        return None
    ids.discard("")
    return len(ids) or None


def _psutil_physical_cores() -> int | None:
    try:
        import psutil

        count = psutil.cpu_count(logical=False)
    except Exception:  # noqa: BLE001 - psutil raises assorted errors on odd kernels
        return None
    return int(count) if count else None


def _usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return os.cpu_count() or 1


def read_cpu_info(cpuinfo: Path = _CPUINFO, sys_cpu: Path = _SYS_CPU) -> CpuInfo:
    """Describe the running machine's CPU from ``/proc/cpuinfo``, sysfs and the affinity mask.

    Paths are parameters so tests can point them at fixtures; never raises.
    """
    parsed = parse_cpuinfo(_read(cpuinfo) or "")
    logical = os.cpu_count() or parsed.logical_cores or 1
    physical = parsed.physical_cores or _psutil_physical_cores() or logical
    caches = read_cache_sizes(sys_cpu / "cpu0" / "cache")
    return CpuInfo(
        model_name=parsed.model_name or platform.processor() or "unknown",
        vendor=parsed.vendor,
        arch=platform.machine() or parsed.arch,
        logical_cores=logical,
        physical_cores=min(physical, logical),
        usable_cores=_usable_cores(),
        sockets=parsed.sockets or _sysfs_sockets(sys_cpu) or 1,
        max_freq_mhz=_max_freq_mhz(sys_cpu),
        l2_cache_bytes=caches.get(2),
        l3_cache_bytes=caches.get(3),
        isa=parsed.isa,
    )


def _virtual_memory() -> Any:
    import psutil

    return psutil.virtual_memory()


def memory_total_bytes(virtual_memory: Callable[[], Any] = _virtual_memory) -> int:
    """Total physical memory in bytes (``psutil.virtual_memory().total``, which is
    ``MemTotal`` of ``/proc/meminfo`` on Linux); 0 if unknown. ``virtual_memory`` is a seam."""
    try:
        return int(virtual_memory().total)
    except Exception:  # noqa: BLE001 - psutil raises assorted errors on odd kernels
        return 0
