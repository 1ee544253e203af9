"""Cheap system telemetry sampled from *outside* the measured process, at 10 Hz or more.

Sampling from the parent keeps the instrumented process free of an extra thread fighting for
its GIL. Per sample: per-core CPU utilisation and iowait (from ``psutil.cpu_times(percpu=True)``
deltas), the run queue (``procs_running`` of ``/proc/stat``), the measured process tree's
resident memory and CPU use (the script and its DataLoader workers, via psutil), available
memory and swap; per GPU, through NVML when present: utilisation, memory, power, clocks, and
SM / tensor-core activity from GPM (Hopper and newer) where the driver offers it. What is
missing is said (``"not available: ..."``), never guessed.

Every source is a seam: the per-CPU times, the run queue, the process probe and the NVML module
can be replaced, so the arithmetic is tested without the hardware.
"""

from __future__ import annotations

import contextlib
import math
import re
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "CpuTimes",
    "GpuSample",
    "MigInstance",
    "NvmlSource",
    "ProcessTree",
    "Telemetry",
    "TelemetrySample",
    "TelemetrySampler",
    "cpu_times_from_psutil",
    "cpu_utilisation",
]

_PROC_STAT = Path("/proc/stat")
_CHILDREN_REFRESH_S = 1.0
_TOTAL_FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")
"""psutil ``scputimes`` fields that add up to a CPU's total time (guest is inside user)."""


@dataclass(frozen=True)
class CpuTimes:
    """Cumulative CPU seconds: per core ``(busy, total)``, iowait and total over all cores."""

    cores: tuple[tuple[float, float], ...]
    iowait: float
    total: float
    procs_running: int


def cpu_times_from_psutil(per_cpu: Sequence[Any], procs_running: int) -> CpuTimes:
    """Fold ``psutil.cpu_times(percpu=True)`` into :class:`CpuTimes`: busy = total - idle -
    iowait; a field the platform lacks (iowait off Linux) counts as 0."""
    cores = []
    for times in per_cpu:
        core_total = sum(float(getattr(times, name, 0.0)) for name in _TOTAL_FIELDS)
        idle = float(times.idle) + float(getattr(times, "iowait", 0.0))
        cores.append((core_total - idle, core_total))
    iowait = sum(float(getattr(times, "iowait", 0.0)) for times in per_cpu)
    return CpuTimes(tuple(cores), iowait, sum(total for _, total in cores), procs_running)


def cpu_utilisation(before: CpuTimes, after: CpuTimes) -> tuple[tuple[float, ...], float]:
    """Per-core busy % and the aggregate iowait % between two readings."""
    per_core = []
    for (b0, t0), (b1, t1) in zip(before.cores, after.cores, strict=False):
        span = t1 - t0
        per_core.append(100.0 * (b1 - b0) / span if span > 0 else 0.0)
    span = after.total - before.total
    iowait = 100.0 * (after.iowait - before.iowait) / span if span > 0 else 0.0
    return tuple(per_core), iowait


@dataclass(frozen=True, kw_only=True)
class GpuSample:
    """One GPU, or one MIG instance of it, at one instant (NVML). ``None`` where the driver
    does not report the value (not measured), never 0."""

    index: int
    utilisation_percent: float | None
    memory_used_bytes: int | None
    memory_total_bytes: int | None
    power_w: float | None
    sm_clock_mhz: float | None
    memory_clock_mhz: float | None
    sm_active_percent: float | None = None
    tensor_active_percent: float | None = None
    gr_active_percent: float | None = None
    """GPM graphics-engine activity (DCGM's GR_ENGINE_ACTIVE)."""
    dram_active_percent: float | None = None
    energy_mj: int | None = None
    """NVML's total-energy counter (mJ since the driver loaded); None on a MIG instance."""
    gpu_instance_id: int | None = None
    """The MIG GPU instance id (``None``: the whole GPU); ``index`` is then its GPU's."""
    mig_profile: str = ""


@dataclass(frozen=True, kw_only=True)
class TelemetrySample:
    """One telemetry sample; ``t_s`` is seconds since sampling started."""

    t_s: float
    cpu_percent: tuple[float, ...]
    iowait_percent: float
    procs_running: int
    process_rss_bytes: int
    process_cpu_cores: float
    processes: int
    available_bytes: int
    swap_used_bytes: int
    gpus: tuple[GpuSample, ...] = ()


@dataclass(frozen=True)
class Telemetry:
    """Samples of one run with what was and was not available."""

    interval_s: float
    samples: tuple[TelemetrySample, ...]
    gpu_status: str
    sm_activity_status: str

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready, columnar (one list per field) to stay small."""
        samples = self.samples
        return {
            "interval_s": self.interval_s,
            "gpu_status": self.gpu_status,
            "sm_activity_status": self.sm_activity_status,
            "t_s": [s.t_s for s in samples],
            "cpu_percent": [list(s.cpu_percent) for s in samples],
            "iowait_percent": [s.iowait_percent for s in samples],
            "procs_running": [s.procs_running for s in samples],
            "process_rss_bytes": [s.process_rss_bytes for s in samples],
            "process_cpu_cores": [s.process_cpu_cores for s in samples],
            "processes": [s.processes for s in samples],
            "available_bytes": [s.available_bytes for s in samples],
            "swap_used_bytes": [s.swap_used_bytes for s in samples],
            "gpus": [[asdict(g) for g in s.gpus] for s in samples],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Telemetry:
        """Inverse of :meth:`to_dict`."""
        count = len(data["t_s"])
        samples = tuple(
            TelemetrySample(
                t_s=float(data["t_s"][i]),
                cpu_percent=tuple(float(v) for v in data["cpu_percent"][i]),
                iowait_percent=float(data["iowait_percent"][i]),
                procs_running=int(data["procs_running"][i]),
                process_rss_bytes=int(data["process_rss_bytes"][i]),
                process_cpu_cores=float(data["process_cpu_cores"][i]),
                processes=int(data["processes"][i]),
                available_bytes=int(data["available_bytes"][i]),
                swap_used_bytes=int(data["swap_used_bytes"][i]),
                gpus=tuple(GpuSample(**g) for g in data["gpus"][i]),
            )
            for i in range(count)
        )
        return cls(
            float(data["interval_s"]),
            samples,
            str(data["gpu_status"]),
            str(data["sm_activity_status"]),
        )


class ProcessTree:
    """Resident memory and CPU use of a process and its descendants (psutil)."""

    def __init__(self, pid: int, clock: Callable[[], float] = time.monotonic) -> None:
        import psutil

        self._psutil = psutil
        self._clock = clock
        self._root = psutil.Process(pid)
        self._members: list[Any] = [self._root]
        self._refreshed = -1e9
        self._cpu: dict[int, float] = {}
        self._last_t: float | None = None

    def _refresh(self, now: float) -> None:
        if now - self._refreshed < _CHILDREN_REFRESH_S:
            return
        self._refreshed = now
        try:
            self._members = [self._root, *self._root.children(recursive=True)]
        except self._psutil.Error:
            self._members = [self._root]

    def sample(self) -> tuple[int, float, int]:
        """``(rss_bytes, cpu_cores_used_since_last_sample, process_count)``."""
        now = self._clock()
        self._refresh(now)
        rss, cpu_total, alive = 0, 0.0, 0
        seen: dict[int, float] = {}
        for proc in self._members:
            try:
                with proc.oneshot():
                    rss += int(proc.memory_info().rss)
                    times = proc.cpu_times()
            except self._psutil.Error:
                continue
            alive += 1
            used = float(times.user + times.system)
            seen[proc.pid] = used
            if proc.pid in self._cpu:
                cpu_total += max(0.0, used - self._cpu[proc.pid])
        elapsed = None if self._last_t is None else now - self._last_t
        self._cpu, self._last_t = seen, now
        cores = cpu_total / elapsed if elapsed else 0.0
        return rss, cores, alive


_GPM_METRICS = (
    ("sm_active_percent", "NVML_GPM_METRIC_SM_UTIL", "SM activity"),
    ("tensor_active_percent", "NVML_GPM_METRIC_ANY_TENSOR_UTIL", "tensor activity"),
    ("gr_active_percent", "NVML_GPM_METRIC_GRAPHICS_UTIL", "graphics-engine activity"),
    ("dram_active_percent", "NVML_GPM_METRIC_DRAM_BW_UTIL", "DRAM bandwidth use"),
)
"""(GpuSample field, NVML GPM metric, what it is): the activity GPM reads per GPU or instance."""
_NVML_SUCCESS = 0


@dataclass(frozen=True)
class MigInstance:
    """One MIG instance NVML enumerated on a GPU: its handle, GPU instance id and profile."""

    parent_index: int
    parent_handle: Any
    handle: Any
    gpu_instance_id: int
    profile: str
    uuid: str


class NvmlSource:
    """GPU samples through NVML (``pynvml`` from the nvidia-ml-py distribution).

    ``nvml`` is the module (a seam for tests); by default ``pynvml`` is imported. ``indices``
    keeps those NVML GPUs only (``missing``: the ones NVML does not have). With ``mig``, a GPU
    in MIG mode is also sampled per MIG instance (utilisation is NOT_SUPPORTED there: only what
    NVML gives per instance is reported: memory, and GPM activity through
    ``nvmlGpmMigSampleGet``). ``status`` says what is measured or why not; ``sm_status`` the
    same for GPM activity; ``notes`` what was refused along the way (a GPM metric's own return
    code, memory v1 used instead of v2, MIG).

    Memory is read with ``nvmlDeviceGetMemoryInfo_v2`` (its ``used`` leaves out the driver's
    reservation) and falls back to v1 (whose ``used`` includes it, about 0.5 GiB) where the
    driver or binding lacks it. Each GPM metric's own return code is checked: a refused metric
    is ``None`` (not measured), never 0 %.
    """

    def __init__(
        self, nvml: Any = None, indices: tuple[int, ...] | None = None, *, mig: bool = False
    ) -> None:
        self.handles: list[tuple[int, Any]] = []
        self.instances: list[MigInstance] = []
        self.count = 0
        self.missing: tuple[int, ...] = ()
        self.status = "not available: no NVIDIA GPU"
        self.sm_status = "not available: no NVIDIA GPU"
        self.notes: list[str] = []
        self._gpm: dict[tuple[int, int | None], Any] = {}
        self._memory_v1: set[int] = set()
        self._refused_seen: set[tuple[int, int | None, str]] = set()
        if nvml is None:
            try:
                import pynvml as nvml_module
            except ImportError:
                self.status = "not available: pynvml (nvidia-ml-py) is not installed"
                self.sm_status = self.status
                return
            nvml = nvml_module
        self.nvml = nvml
        try:
            nvml.nvmlInit()
            count = int(nvml.nvmlDeviceGetCount())
        except Exception as exc:  # noqa: BLE001 - NVMLError: no driver, no permission
            self.status = f"not available: NVML did not initialise ({exc})"
            self.sm_status = self.status
            return
        self.count = count
        wanted = list(range(count)) if indices is None else [i for i in indices if i < count]
        self.missing = tuple(i for i in (indices or ()) if not 0 <= i < count)
        self.handles = [(i, nvml.nvmlDeviceGetHandleByIndex(i)) for i in wanted if i >= 0]
        if not self.handles:
            self.status = self.sm_status = "not available: NVML sees no GPU"
            return
        if mig:
            self._find_mig()
        mig_text = f", {len(self.instances)} MIG instance(s)" if self.instances else ""
        self.status = f"measured: NVML, {len(self.handles)} GPU(s){mig_text}"
        self._start_gpm()

    def _find_mig(self) -> None:
        """The MIG instances of every GPU in MIG mode (empty slots raise NOT_FOUND)."""
        nvml = self.nvml
        for index, handle in self.handles:
            try:
                current = nvml.nvmlDeviceGetMigMode(handle)[0]
            except Exception:  # noqa: BLE001 - not MIG-capable (NOT_SUPPORTED)
                continue
            if current != getattr(nvml, "NVML_DEVICE_MIG_ENABLE", 1):
                continue
            self.notes.append(
                f"GPU {index} is in MIG mode: utilisation is not supported there; its "
                "instances are sampled one by one"
            )
            try:
                slots = int(nvml.nvmlDeviceGetMaxMigDeviceCount(handle))
            except Exception as exc:  # noqa: BLE001
                self.notes.append(f"GPU {index}: MIG instances not enumerated ({exc})")
                continue
            for slot in range(slots):
                try:
                    child = nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
                    gi = int(nvml.nvmlDeviceGetGpuInstanceId(child))
                except Exception:  # noqa: BLE001 - NOT_FOUND: an empty slot
                    continue
                name = _text(_call(nvml, "nvmlDeviceGetName", child)) or ""
                match = re.search(r"MIG\s+(\S+)\s*$", name)
                uuid = _text(_call(nvml, "nvmlDeviceGetUUID", child)) or f"{index}/{gi}"
                self.instances.append(
                    MigInstance(
                        parent_index=index,
                        parent_handle=handle,
                        handle=child,
                        gpu_instance_id=gi,
                        profile=match.group(1) if match else "",
                        uuid=uuid,
                    )
                )

    def _gpm_get(self, handle: Any, instance: MigInstance | None, sample: Any) -> None:
        if instance is None:
            self.nvml.nvmlGpmSampleGet(handle, sample)
        else:
            self.nvml.nvmlGpmMigSampleGet(instance.parent_handle, instance.gpu_instance_id, sample)

    def _start_gpm(self) -> None:
        nvml = self.nvml
        reasons = []
        mig_gpus = {m.parent_index for m in self.instances}
        targets: list[tuple[int, Any, MigInstance | None]] = [
            (index, handle, None) for index, handle in self.handles if index not in mig_gpus
        ]
        targets += [(m.parent_index, m.parent_handle, m) for m in self.instances]
        supported: dict[int, bool] = {}
        for index, handle, instance in targets:
            where = f"GPU {index}" + (
                f" MIG instance {instance.gpu_instance_id}" if instance else ""
            )
            try:
                if index not in supported:
                    support = nvml.nvmlGpmQueryDeviceSupport(handle)
                    supported[index] = bool(getattr(support, "isSupportedDevice", 0))
                if not supported[index]:
                    reasons.append(f"GPU {index} has no GPM (needs Hopper or newer)")
                    continue
                sample = nvml.nvmlGpmSampleAlloc()
                self._gpm_get(handle, instance, sample)
                self._gpm[(index, instance.gpu_instance_id if instance else None)] = sample
            except Exception as exc:  # noqa: BLE001 - old driver or pynvml without GPM
                reasons.append(f"GPM unavailable on {where} ({exc})")
        reasons = list(dict.fromkeys(reasons))
        if self._gpm:
            self.sm_status = "measured: NVML GPM SM, tensor, graphics-engine and DRAM activity"
            if reasons:
                self.sm_status += " (not on: " + "; ".join(reasons) + ")"
        else:
            self.sm_status = "not available: " + "; ".join(reasons or ["no GPM support"])

    def _gpm_read(
        self, index: int, handle: Any, instance: MigInstance | None = None
    ) -> dict[str, float | None]:
        """Each GPM metric since the previous sample, ``None`` where its own return code says
        it was refused (its ``value`` is then meaningless, usually 0)."""
        nvml = self.nvml
        key = (index, instance.gpu_instance_id if instance else None)
        empty: dict[str, float | None] = {name: None for name, _, _ in _GPM_METRICS}
        previous = self._gpm.get(key)
        if previous is None:
            return empty
        # a metric the binding has no constant for (an old nvidia-ml-py) is not asked for
        wanted = [(n, getattr(nvml, m), w) for n, m, w in _GPM_METRICS if hasattr(nvml, m)]
        current = None
        try:
            current = nvml.nvmlGpmSampleAlloc()
            self._gpm_get(handle, instance, current)
            request = nvml.c_nvmlGpmMetricsGet_t()
            request.version = nvml.NVML_GPM_METRICS_GET_VERSION
            request.numMetrics = len(wanted)
            request.sample1, request.sample2 = previous, current
            for i, (_, metric_id, _) in enumerate(wanted):
                request.metrics[i].metricId = metric_id
            nvml.nvmlGpmMetricsGet(request)
        except Exception:  # noqa: BLE001 - one failed read is a gap, not a crash
            if current is not None:
                with contextlib.suppress(Exception):
                    nvml.nvmlGpmSampleFree(current)
            return empty
        with contextlib.suppress(Exception):
            nvml.nvmlGpmSampleFree(previous)
        self._gpm[key] = current
        out = dict(empty)
        for i, (name, _, what) in enumerate(wanted):
            result = request.metrics[i]
            code = int(getattr(result, "nvmlReturn", _NVML_SUCCESS))
            if code == _NVML_SUCCESS:
                value = float(result.value)
                # NVML answers NaN for a metric with nothing to divide (seen on an H100 with an
                # idle GPU): a gap, not a figure.
                out[name] = value if math.isfinite(value) else None
            elif (key[0], key[1], name) not in self._refused_seen:
                self._refused_seen.add((key[0], key[1], name))
                where = f"GPU {index}" + (f" MIG instance {key[1]}" if key[1] else "")
                self.notes.append(f"{where}: GPM {what} refused (NVML return {code}): not measured")
        return out

    def _memory(self, index: int, handle: Any, slot: int) -> tuple[int | None, int | None]:
        """``(used, total)`` bytes: memory v2 (driver reservation left out), else v1."""
        nvml = self.nvml
        version = getattr(nvml, "nvmlMemory_v2", None)
        if version is None and slot not in self._memory_v1:
            self._memory_v1.add(slot)
            self.notes.append(
                f"GPU {index}: this nvidia-ml-py has no memory v2; v1 used, whose 'used' "
                "includes the driver's reservation (about 0.5 GiB)"
            )
        if version is not None and slot not in self._memory_v1:
            try:
                memory = nvml.nvmlDeviceGetMemoryInfo(handle, version=version)
                return int(memory.used), int(memory.total)
            except Exception as exc:  # noqa: BLE001 - an old driver: FUNCTION_NOT_FOUND
                self._memory_v1.add(slot)
                self.notes.append(
                    f"GPU {index}: NVML memory v2 refused ({exc}); v1 used, whose 'used' "
                    "includes the driver's reservation (about 0.5 GiB)"
                )
        memory = _call(nvml, "nvmlDeviceGetMemoryInfo", handle)
        if memory is None:
            return None, None
        return int(memory.used), int(memory.total)

    def sample(self) -> tuple[GpuSample, ...]:
        """One sample per GPU (and per MIG instance, with ``mig``); values the driver refuses
        are ``None``."""
        if not self.handles:
            return ()
        nvml: Any = self.nvml
        out = []
        for index, handle in self.handles:
            rates = _call(nvml, "nvmlDeviceGetUtilizationRates", handle)
            util = None if rates is None else rates.gpu
            used, total = self._memory(index, handle, id(handle))
            power = _call(nvml, "nvmlDeviceGetPowerUsage", handle)
            energy = _call(nvml, "nvmlDeviceGetTotalEnergyConsumption", handle)
            sm_clock = _call(nvml, "nvmlDeviceGetClockInfo", handle, nvml.NVML_CLOCK_SM)
            mem_clock = _call(nvml, "nvmlDeviceGetClockInfo", handle, nvml.NVML_CLOCK_MEM)
            activity = self._gpm_read(index, handle)
            out.append(
                GpuSample(
                    index=index,
                    utilisation_percent=None if util is None else float(util),
                    memory_used_bytes=used,
                    memory_total_bytes=total,
                    power_w=None if power is None else float(power) / 1000.0,
                    sm_clock_mhz=None if sm_clock is None else float(sm_clock),
                    memory_clock_mhz=None if mem_clock is None else float(mem_clock),
                    energy_mj=None if energy is None else int(energy),
                    sm_active_percent=activity["sm_active_percent"],
                    tensor_active_percent=activity["tensor_active_percent"],
                    gr_active_percent=activity["gr_active_percent"],
                    dram_active_percent=activity["dram_active_percent"],
                )
            )
        for instance in self.instances:
            used, total = self._memory(instance.parent_index, instance.handle, id(instance.handle))
            rates = _call(nvml, "nvmlDeviceGetUtilizationRates", instance.handle)
            activity = self._gpm_read(instance.parent_index, instance.parent_handle, instance)
            out.append(
                GpuSample(
                    index=instance.parent_index,
                    utilisation_percent=None if rates is None else float(rates.gpu),
                    memory_used_bytes=used,
                    memory_total_bytes=total,
                    power_w=None,  # GPU-wide: on the GPU's own sample
                    sm_clock_mhz=None,
                    memory_clock_mhz=None,
                    gpu_instance_id=instance.gpu_instance_id,
                    mig_profile=instance.profile,
                    sm_active_percent=activity["sm_active_percent"],
                    tensor_active_percent=activity["tensor_active_percent"],
                    gr_active_percent=activity["gr_active_percent"],
                    dram_active_percent=activity["dram_active_percent"],
                )
            )
        return tuple(out)

    def close(self) -> None:
        """Free GPM samples and shut NVML down."""
        if not self.handles:
            return
        for sample in self._gpm.values():
            with contextlib.suppress(Exception):  # best effort at shutdown
                self.nvml.nvmlGpmSampleFree(sample)
        with contextlib.suppress(Exception):
            self.nvml.nvmlShutdown()


def _call(nvml: Any, name: str, *args: Any) -> Any:
    """``nvml.<name>(*args)``, ``None`` where the driver refuses (NOT_SUPPORTED and friends)."""
    try:
        return getattr(nvml, name)(*args)
    except Exception:  # noqa: BLE001 - NVML_ERROR_NOT_SUPPORTED and friends
        return None


def _text(value: Any) -> str | None:
    if value is None:
        return None
    return value.decode() if isinstance(value, bytes) else str(value)


def _read_cpu_times() -> list[Any]:
    import psutil

    return list(psutil.cpu_times(percpu=True))


def _read_procs_running() -> int:
    """The run queue now (``procs_running`` of ``/proc/stat``; psutil has no such call)."""
    for line in _PROC_STAT.read_text(encoding="ascii").splitlines():
        if line.startswith("procs_running "):
            return int(line.split()[1])
    raise OSError("/proc/stat has no procs_running line")


class TelemetrySampler:
    """Samples a process tree and the machine in a background thread (see the module doc).

    Args:
        pid: The measured process (its descendants are included).
        interval_s: Time between samples (0.1 s = 10 Hz).
        gpu: An :class:`NvmlSource`, or ``None`` for none.
        cpu_times: Returns per-CPU times shaped as ``psutil.cpu_times(percpu=True)`` (seam).
        procs_running: Returns the run queue length; ``OSError`` where unknown (seam).
        clock: Monotonic seconds (seam).
    """

    def __init__(
        self,
        pid: int,
        interval_s: float = 0.1,
        gpu: NvmlSource | None = None,
        cpu_times: Callable[[], Sequence[Any]] = _read_cpu_times,
        procs_running: Callable[[], int] = _read_procs_running,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.interval_s = interval_s
        self.gpu = gpu
        self._cpu_times = cpu_times
        self._procs_running = procs_running
        self._clock = clock
        self._tree = ProcessTree(pid, clock)
        self._samples: list[TelemetrySample] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._start = clock()
        self._previous: CpuTimes | None = None

    def sample_once(self) -> TelemetrySample | None:
        """Take one sample (the first call only primes the CPU counters and returns None)."""
        import psutil

        try:
            current = cpu_times_from_psutil(self._cpu_times(), self._procs_running())
        except OSError:
            current = None
        rss, cores, alive = self._tree.sample()
        if current is None or self._previous is None:
            self._previous = current
            return None
        per_core, iowait = cpu_utilisation(self._previous, current)
        self._previous = current
        memory, swap = psutil.virtual_memory(), psutil.swap_memory()
        sample = TelemetrySample(
            t_s=self._clock() - self._start,
            cpu_percent=per_core,
            iowait_percent=iowait,
            procs_running=current.procs_running,
            process_rss_bytes=rss,
            process_cpu_cores=cores,
            processes=alive,
            available_bytes=int(memory.available),
            swap_used_bytes=int(swap.used),
            gpus=self.gpu.sample() if self.gpu is not None else (),
        )
        self._samples.append(sample)
        return sample

    def _loop(self) -> None:
        next_at = self._clock()
        while not self._stop.is_set():
            with contextlib.suppress(Exception):  # the process may vanish between calls
                self.sample_once()
            next_at += self.interval_s
            self._stop.wait(max(0.0, next_at - self._clock()))

    def start(self) -> None:
        """Start sampling in a daemon thread."""
        self._thread = threading.Thread(target=self._loop, name="accelscope-telemetry", daemon=True)
        self._thread.start()

    def stop(self) -> Telemetry:
        """Stop sampling and return what was sampled."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5.0)
        gpu_status = self.gpu.status if self.gpu is not None else "not available: no NVIDIA GPU"
        sm_status = self.gpu.sm_status if self.gpu is not None else gpu_status
        if self.gpu is not None:
            self.gpu.close()
        return Telemetry(self.interval_s, tuple(self._samples), gpu_status, sm_status)
