"""The measurement environment: machine, OS, library versions; and a stable hardware fingerprint.

:func:`collect_environment` is cached per process and never raises; unknown facts become empty
or ``None`` fields. Library versions come from package metadata, so nothing optional is imported.
"""

from __future__ import annotations

import functools
import hashlib
import json
import platform
import socket
import sys
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from importlib import metadata
from typing import Any

from accelscope.hardware.cpu import CpuInfo, memory_total_bytes, read_cpu_info
from accelscope.hardware.fastpaths import PrecisionSupport
from accelscope.hardware.fastpaths import precision_support as _precision_support
from accelscope.hardware.gpu import GpuInfo, discover_gpus
from accelscope.hardware.tf32 import numerics as _numerics

__all__ = ["LIBRARIES", "Environment", "collect_environment", "library_versions", "torch_build"]

LIBRARIES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("accelscope", ("accelscope",)),
    ("numpy", ("numpy",)),
    ("onnx", ("onnx",)),
    ("onnxruntime", ("onnxruntime", "onnxruntime-gpu", "onnxruntime-openvino")),
    ("openvino", ("openvino",)),
    ("scikit-learn", ("scikit-learn",)),
    ("tensorrt", ("tensorrt", "tensorrt-cu12", "tensorrt-cu11")),
    ("torch", ("torch",)),
    ("torch_tensorrt", ("torch_tensorrt",)),
    ("transformers", ("transformers",)),
)
"""Reported name -> distribution names tried in order (the first installed one wins)."""

_GIB = 1 << 30


@dataclass(frozen=True, kw_only=True)
class Environment:
    """Where a measurement ran: host, OS, interpreter, hardware and relevant library versions.

    Attributes:
        hostname: Network name of the host.
        os: ``platform.platform()`` string, e.g. ``Linux-6.8.0-x86_64-with-glibc2.39``.
        python: Interpreter version, e.g. ``3.11.9``.
        cpu: The host CPU.
        memory_bytes: Total physical memory in bytes.
        gpus: Visible CUDA devices by ordinal (empty on a CPU-only machine).
        libraries: Sorted ``(name, version)`` of installed relevant libraries.
        torch_build: Sorted ``(key, value)`` facts about the torch build (cuda, mkldnn, ...).
        collected_at: When this was collected, ISO-8601 in UTC.
        numerics: Sorted ``(key, value)`` of the settings that decide what fp32 means on CUDA
            when it was read (:func:`accelscope.hardware.tf32.numerics`): ``cuda_matmul_fp32``
            and ``cudnn_conv_fp32`` (``ieee`` or ``tf32``), ``cudnn_benchmark`` (``on``/``off``).
            A measured result carries the state its measurement ran under. Empty in
            environments stored before it was recorded (not known).
    """

    hostname: str
    os: str
    python: str
    cpu: CpuInfo
    memory_bytes: int
    # The defaults are for environments stored without these keys (they still load).
    gpus: tuple[GpuInfo, ...] = ()
    libraries: tuple[tuple[str, str], ...] = ()
    torch_build: tuple[tuple[str, str], ...] = ()
    collected_at: str
    numerics: tuple[tuple[str, str], ...] = ()

    def with_numerics(self) -> Environment:
        """This environment with :attr:`numerics` read now (the state a measurement runs
        under, set by its backend)."""
        return replace(self, numerics=_numerics())

    def identity(self) -> dict[str, Any]:
        """The hardware facts :meth:`fingerprint` hashes (JSON-ready).

        Memory is rounded to whole GiB so small kernel reservations do not change it. Excluded:
        hostname, time, OS, library versions, drivers, GPU UUIDs and the process's CPU affinity
        (callers keying ceilings by thread count should add that themselves).
        """
        cpu = self.cpu
        return {
            "cpu": [cpu.vendor, cpu.model_name, cpu.arch, list(cpu.isa)],
            "cores": [cpu.logical_cores, cpu.physical_cores, cpu.sockets],
            "memory_gib": round(self.memory_bytes / _GIB),
            "gpus": [
                [g.name, round(g.memory_bytes / _GIB), g.compute_capability] for g in self.gpus
            ],
        }

    def fingerprint(self) -> str:
        """16-hex-digit digest of the hardware identity, for caching per-machine ceilings."""
        payload = json.dumps(self.identity(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(payload.encode("utf-8")).hexdigest()[:16]

    def precision_support(self) -> tuple[PrecisionSupport, ...]:
        """Fast-path verdict for every (precision, device) here; see :mod:`.fastpaths`."""
        verdicts: tuple[PrecisionSupport, ...] = _precision_support(self.cpu, self.gpus)
        return verdicts


def library_versions() -> tuple[tuple[str, str], ...]:
    """Sorted ``(name, version)`` of the installed :data:`LIBRARIES`, read from metadata only."""
    found: list[tuple[str, str]] = []
    for name, distributions in LIBRARIES:
        for dist in distributions:
            try:
                version = metadata.version(dist)
            except (metadata.PackageNotFoundError, ValueError):
                continue
            if version:
                found.append((name if dist == distributions[0] else dist, str(version)))
                break
    return tuple(sorted(found))


def torch_build() -> tuple[tuple[str, str], ...]:
    """Sorted facts about the torch build; ``()`` when torch cannot be imported.

    Keys: ``version``, ``cuda`` and ``hip`` (``"none"`` when absent), ``cudnn`` (only with a usable
    GPU), ``mkldnn``, ``openmp``, ``mkl`` (``"True"``/``"False"``), ``cpu_capability``.
    """
    try:
        import torch
    except Exception:  # noqa: BLE001 - a broken torch install is "unknown", not a crash
        return ()
    facts: dict[str, str] = {
        "version": str(getattr(torch, "__version__", "unknown")),
        "cuda": str(getattr(torch.version, "cuda", None) or "none"),
        "hip": str(getattr(torch.version, "hip", None) or "none"),
    }
    backends: Any = getattr(torch, "backends", None)
    probes = (  # (key, backend module name, function); looked up lazily, so absent ones are skipped
        ("mkldnn", "mkldnn", "is_available"),
        ("openmp", "openmp", "is_available"),
        ("mkl", "mkl", "is_available"),
        ("cpu_capability", "cpu", "get_cpu_capability"),
    )
    for key, module, function in probes:
        try:
            facts[key] = str(getattr(getattr(backends, module), function)())
        except Exception:  # noqa: BLE001 - an absent or broken backend module is "unknown"
            continue
    try:
        if facts["cuda"] != "none" and torch.cuda.is_available():
            facts["cudnn"] = str(backends.cudnn.version() or "none")
    except Exception:  # noqa: BLE001 - cudnn probing can fail on broken installs
        pass
    return tuple(sorted(facts.items()))


def _hostname() -> str:
    try:
        return socket.gethostname() or platform.node()
    except OSError:
        return platform.node()


def _os_string() -> str:
    try:
        return platform.platform()
    except Exception:  # noqa: BLE001 - platform probes shell out on some systems
        return sys.platform


@functools.lru_cache(maxsize=1)
def collect_environment() -> Environment:
    """Describe this process's environment once (cached); never raises.

    Reads ``/proc`` and sysfs, package metadata and ``torch`` (imported if not yet); with GPUs
    present it initialises torch's CUDA state in this process to read device properties (no
    memory is allocated and nothing runs on a device). :attr:`Environment.numerics` is this
    process's state at collection; a result replaces it with the state it was measured under.
    """
    return Environment(
        hostname=_hostname(),
        os=_os_string(),
        python=platform.python_version(),
        cpu=read_cpu_info(),
        memory_bytes=memory_total_bytes(),
        gpus=discover_gpus(),
        libraries=library_versions(),
        torch_build=torch_build(),
        collected_at=datetime.now(UTC).isoformat(timespec="seconds"),
        numerics=_numerics(),
    )
