"""Which CUDA GPUs this process can see, through ``torch.cuda``, plus the NVIDIA driver version.

:func:`discover_gpus` never raises: a CPU-only machine, a CPU-only torch build, a broken driver
or a missing torch all give an empty tuple. It only touches device properties (which initialises
CUDA in this process) after ``torch.cuda.is_available()`` has said yes.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass

from accelscope.errors import BadInputError, NotAvailableError
from accelscope.spec import Device, DeviceRef

__all__ = ["GpuInfo", "check_device", "discover_gpus", "driver_version"]

_SMI_TIMEOUT_S = 2.0


@dataclass(frozen=True, kw_only=True)
class GpuInfo:
    """One visible CUDA device.

    Attributes:
        index: CUDA ordinal as this process sees it (after ``CUDA_VISIBLE_DEVICES``).
        name: Device name, e.g. ``NVIDIA H200``.
        memory_bytes: Total device memory in bytes.
        compute_capability: ``"major.minor"``, e.g. ``"9.0"`` for Hopper.
        driver_version: NVIDIA driver version (``"550.54.15"``), ``None`` if unknown.
        cuda_runtime: CUDA version torch was built with (``torch.version.cuda``), ``None`` if none.
        uuid: Device UUID in NVML form (``GPU-xxxxxxxx-...``), ``None`` if unknown.
    """

    index: int
    name: str
    memory_bytes: int
    compute_capability: str
    driver_version: str | None = None
    cuda_runtime: str | None = None
    uuid: str | None = None

    @property
    def cc_tuple(self) -> tuple[int, int] | None:
        """Compute capability as ``(major, minor)``; ``None`` if it is not ``"M.m"``."""
        major, sep, minor = self.compute_capability.partition(".")
        if not sep or not major.isdigit() or not minor.isdigit():
            return None
        return int(major), int(minor)

    @property
    def sm(self) -> str:
        """The ``sm_XY`` architecture tag, e.g. ``sm_90``; ``sm_?`` if the capability is unknown."""
        cc = self.cc_tuple
        return f"sm_{cc[0]}{cc[1]}" if cc else "sm_?"


def _driver_version_nvml() -> str | None:
    try:
        import pynvml  # provided by the nvidia-ml-py distribution
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
        try:
            version = pynvml.nvmlSystemGetDriverVersion()
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # noqa: BLE001 - NVMLError and friends: no driver, no permission
        return None
    if isinstance(version, bytes):  # older pynvml returns bytes
        version = version.decode("ascii", errors="replace")
    return str(version).strip() or None


def _driver_version_smi() -> str | None:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        done = subprocess.run(
            [exe, "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=_SMI_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if done.returncode != 0:
        return None
    for line in done.stdout.splitlines():  # one line per GPU, all the same driver
        if line.strip():
            return line.strip()
    return None


def driver_version() -> str | None:
    """The NVIDIA driver version via NVML, else ``nvidia-smi`` (2 s timeout), else ``None``."""
    return _driver_version_nvml() or _driver_version_smi()


def _uuid_text(raw: object) -> str | None:
    if raw is None:
        return None
    text = str(raw).strip()
    if not text:
        return None
    return text if text.startswith(("GPU-", "MIG-")) else f"GPU-{text}"


def discover_gpus() -> tuple[GpuInfo, ...]:
    """Every CUDA device this process can see, by ordinal; ``()`` on a CPU-only machine.

    Never raises. Does not initialise CUDA unless ``torch.cuda.is_available()`` is true; when
    it is, reading device properties initialises CUDA in this process (as any later use would).
    """
    try:
        import torch
    except Exception:  # noqa: BLE001 - a broken torch install is "no GPUs", not a crash
        return ()
    try:
        if not torch.cuda.is_available():
            return ()
        count = int(torch.cuda.device_count())
    except Exception:  # noqa: BLE001 - driver/runtime mismatch raises RuntimeError and others
        return ()
    if count <= 0:
        return ()
    runtime = getattr(torch.version, "cuda", None)
    driver = driver_version()
    gpus: list[GpuInfo] = []
    for index in range(count):
        try:
            props = torch.cuda.get_device_properties(index)
            gpus.append(
                GpuInfo(
                    index=index,
                    name=str(props.name),
                    memory_bytes=int(props.total_memory),
                    compute_capability=f"{int(props.major)}.{int(props.minor)}",
                    driver_version=driver,
                    cuda_runtime=str(runtime) if runtime else None,
                    uuid=_uuid_text(getattr(props, "uuid", None)),
                )
            )
        except Exception:  # noqa: BLE001 - one unreadable device must not hide the others
            continue
    return tuple(gpus)


def check_device(device: DeviceRef, gpus: tuple[GpuInfo, ...]) -> None:
    """Refuse a device this machine does not have, before any work: ``cuda`` without a visible
    GPU is :class:`NotAvailableError`, an ordinal past the last visible GPU is
    :class:`BadInputError` naming the ones there are (both one line, exit 2)."""
    if device.kind is Device.CPU:
        return
    if not gpus:
        raise NotAvailableError(
            f"device '{device}' not available: no CUDA device found on this machine"
        )
    indices = {gpu.index for gpu in gpus}
    if device.index not in indices:
        visible = ", ".join(f"cuda:{gpu.index} {gpu.name}" for gpu in gpus)
        raise BadInputError(
            f"device {device} does not exist: {len(gpus)} CUDA device(s) visible ({visible})"
        )
