"""Energy over a measured window, from NVML's total-energy counter.

``nvmlDeviceGetTotalEnergyConsumption`` counts millijoules since the driver was loaded (Volta
and newer; the whole board, every process on it). An :class:`EnergyMeter` reads it at
:meth:`~EnergyMeter.begin` and :meth:`~EnergyMeter.end` of a window and returns an
:class:`EnergyFigure`: the joules of that window only, or "not measured: why".

What decides whether a figure is valid:

- **the counter's update period.** The driver refreshes the counter every 20-100 ms (NVIDIA
  documents no figure; 20-100 ms is what tools that read it report, e.g. PETSc's
  ``PetscLogGpuEnergyMeter``), so each reading is stale by up to one period. A window shorter
  than the period may see no update at all: it is "not measured: window shorter than the
  counter's update period". A longer window is uncertain by up to one period's energy at the
  mean power (``uncertainty_j``): ±5 % at 20 periods. The period is
  :data:`DEFAULT_UPDATE_PERIOD_S` (the slow end) unless :meth:`EnergyMeter.probe_update_period`
  measured it.
- **the resolution**, 1 mJ, added to the uncertainty.
- **the counter's own faults**: it went backwards (the driver was reloaded), did not advance over
  a window longer than its period (it is not updated), or could not be read.

Where there is no counter (no NVIDIA GPU, no NVML, a GPU older than Volta, a MIG instance, a CPU
run), the meter is built "not measured" with the reason, and its windows cost nothing. Energy
per output token (``llm``) or per item (``bench``, ``measure``, ``load``) is
:meth:`EnergyFigure.for_items` of a window.

Every source is a seam: the NVML module and the clock can be replaced, so the arithmetic is
tested with :class:`accelscope.testing.nvml.FakeNvml` on a fake clock.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable
from typing import Any, Protocol

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, computed_field

__all__ = [
    "COUNTER_RESOLUTION_J",
    "DEFAULT_UPDATE_PERIOD_S",
    "WINDOW_PERIODS",
    "EnergyCounter",
    "EnergyFigure",
    "EnergyMeter",
    "NvmlEnergyCounter",
    "cpu_energy_meter",
    "nvml_energy_meter",
]

DEFAULT_UPDATE_PERIOD_S = 0.1
"""The slow end of the 20-100 ms the counter is reported to update at (NVIDIA gives none)."""
COUNTER_RESOLUTION_J = 1e-3
"""The counter counts whole millijoules."""
WINDOW_PERIODS = 20
"""A window this many update periods long is uncertain by at most 1/20 = 5 %."""
CPU_REASON = (
    "no energy counter is read for CPU runs (accelscope reads GPU energy from NVML only; "
    "RAPL is not read)"
)


class EnergyFigure(BaseModel):
    """Energy of one window. ``energy_j`` is ``None`` when not measured (``reason`` says why);
    ``items`` (set by :meth:`for_items`) is what the window processed.

    Units: joules, seconds, watts. ``uncertainty_j`` bounds the error: one update period at the
    window's mean power (each reading is stale by up to one period) plus the resolution.

    Stored with ``model_dump(mode="json")``: the derived ``joules_per_item`` and
    ``mean_power_w`` are written for readers of the JSON and recomputed when read back.
    """

    model_config = ConfigDict(frozen=True)

    energy_j: float | None = None
    window_s: float | None = None
    items: int | None = Field(default=None, validation_alias=AliasChoices("items", "output_tokens"))
    """What the window processed: items (``bench``, ``measure``), queries (``load``), or the
    output tokens of an ``llm`` trial's completed requests (stored as ``output_tokens`` by
    the trial energy of earlier versions, which still loads)."""
    source: str = ""
    """What was read: the counter, the GPU, and that it covers the whole board."""
    reason: str = ""
    """Why it was not measured (empty when measured)."""
    update_period_s: float | None = None
    update_period_basis: str = ""
    """``measured`` (probed here) or ``assumed`` (the default)."""
    resolution_j: float | None = None
    uncertainty_j: float | None = None

    @classmethod
    def not_measured(cls, reason: str, *, source: str = "", **known: Any) -> EnergyFigure:
        """A figure without energy, with why."""
        return cls(energy_j=None, reason=reason, source=source, **known)

    @property
    def measured(self) -> bool:
        """True when the window has a valid energy figure."""
        return self.energy_j is not None

    @computed_field  # type: ignore[prop-decorator]
    @property
    def joules_per_item(self) -> float | None:
        """Joules per item processed in the window (``None``: not measured, or no items)."""
        if self.energy_j is None or not self.items:
            return None
        return self.energy_j / self.items

    @computed_field  # type: ignore[prop-decorator]
    @property
    def mean_power_w(self) -> float | None:
        """Mean board power over the window, in watts."""
        if self.energy_j is None or not self.window_s:
            return None
        return self.energy_j / self.window_s

    @property
    def uncertainty_rel(self) -> float | None:
        """``uncertainty_j`` over ``energy_j``."""
        if self.energy_j is None or self.uncertainty_j is None or self.energy_j <= 0:
            return None
        return self.uncertainty_j / self.energy_j

    def for_items(self, items: int) -> EnergyFigure:
        """This window's figure with the number of items it processed."""
        return self.model_copy(update={"items": int(items)})

    def describe(self, per: str = "item") -> str:
        """One line: ``0.41 J/item (±5 %, 212 J over 2.0 s, ...)`` or ``not measured: why``."""
        if self.energy_j is None:
            return f"not measured: {self.reason}"
        spread = "" if self.uncertainty_rel is None else f" ±{self.uncertainty_rel:.0%}"
        window = f"{self.energy_j:.4g} J over {self.window_s or 0:.3g} s"
        head = window if self.joules_per_item is None else f"{self.joules_per_item:.4g} J/{per}"
        body = window if self.joules_per_item is not None else ""
        detail = ", ".join(x for x in (spread.strip(), body, self.source) if x)
        return f"{head} ({detail})" if detail else head


class EnergyCounter(Protocol):
    """A monotonic energy counter (millijoules) and what it is."""

    source: str

    def read_mj(self) -> int:
        """The counter now, in millijoules; raises when it cannot be read."""

    def close(self) -> None:
        """Release what reading it holds."""


class NvmlEnergyCounter:
    """One GPU's ``nvmlDeviceGetTotalEnergyConsumption`` (mJ since the driver loaded)."""

    def __init__(self, nvml: Any, handle: Any, source: str, *, owns_nvml: bool = True) -> None:
        self.nvml = nvml
        self.handle = handle
        self.source = source
        self._owns = owns_nvml

    def read_mj(self) -> int:
        """The counter now, in millijoules."""
        return int(self.nvml.nvmlDeviceGetTotalEnergyConsumption(self.handle))

    def close(self) -> None:
        """Shut NVML down (when this counter initialised it)."""
        if self._owns:
            with contextlib.suppress(Exception):  # best effort at shutdown
                self.nvml.nvmlShutdown()


class EnergyMeter:
    """Joules over windows of an :class:`EnergyCounter` (``begin`` / ``end``).

    Built without a counter (``counter=None``), every window is "not measured" with
    ``reason``. ``update_period_s`` is the counter's refresh period (see the module doc);
    ``clock`` (seconds) and ``sleep`` are seams for tests.
    """

    def __init__(
        self,
        counter: EnergyCounter | None,
        *,
        reason: str = "",
        update_period_s: float = DEFAULT_UPDATE_PERIOD_S,
        resolution_j: float = COUNTER_RESOLUTION_J,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.counter = counter
        self.reason = reason if counter is None else ""
        self.update_period_s = update_period_s
        self.update_period_basis = "assumed"
        self.resolution_j = resolution_j
        self._clock = clock
        self._sleep = sleep
        self._begin: tuple[float, int] | None = None
        self._begin_error = ""

    @property
    def available(self) -> bool:
        """True when there is a counter to read."""
        return self.counter is not None

    @property
    def source(self) -> str:
        """What the meter reads (empty without a counter)."""
        return self.counter.source if self.counter is not None else ""

    def window_needed_s(self) -> float:
        """The shortest window whose uncertainty is within 1/:data:`WINDOW_PERIODS`."""
        return WINDOW_PERIODS * self.update_period_s

    def not_measured(self, reason: str | None = None) -> EnergyFigure:
        """A figure for a window that was not measured (``reason``: the meter's own)."""
        return EnergyFigure.not_measured(reason or self.reason, source=self.source)

    def probe_update_period(self, max_s: float = 0.5, poll_s: float = 0.002) -> float | None:
        """Measure the counter's update period: poll it until it has changed three times (the
        first change only finds the phase) or ``max_s`` passes. Busy for up to ``max_s``;
        returns the period (and keeps it), or ``None`` when it changed too rarely to say."""
        if self.counter is None:
            return None
        changes: list[float] = []
        try:
            last = self.counter.read_mj()
            began = self._clock()
            while len(changes) < 3 and self._clock() - began < max_s:
                self._sleep(poll_s)
                value = self.counter.read_mj()
                if value != last:
                    changes.append(self._clock())
                    last = value
        except Exception:  # noqa: BLE001 - NVMLError: keep the assumed period
            return None
        if len(changes) < 3:
            return None
        period = (changes[-1] - changes[0]) / (len(changes) - 1)
        if period > 0:
            self.update_period_s, self.update_period_basis = period, "measured"
            return period
        return None

    def begin(self) -> None:
        """Start a window: read the counter and the clock."""
        self._begin, self._begin_error = None, ""
        if self.counter is None:
            return
        try:
            value = self.counter.read_mj()
        except Exception as exc:  # noqa: BLE001 - NVMLError and friends: said, not raised
            self._begin_error = f"the energy counter could not be read ({exc})"
            return
        self._begin = (self._clock(), value)

    def end(self, items: int | None = None) -> EnergyFigure:
        """End the window begun last: its joules, or "not measured" with why. ``items``: what
        the window processed (for joules per item)."""
        if self.counter is None:
            return self.not_measured()
        now = self._clock()
        known: dict[str, Any] = {
            "source": self.source,
            "update_period_s": self.update_period_s,
            "update_period_basis": self.update_period_basis,
            "resolution_j": self.resolution_j,
            "items": items,
        }
        if self._begin is None:
            why = self._begin_error or "end() without begin()"
            return EnergyFigure.not_measured(why, **known)
        began, first = self._begin
        self._begin = None
        window = now - began
        known["window_s"] = window
        try:
            last = self.counter.read_mj()
        except Exception as exc:  # noqa: BLE001 - NVMLError and friends
            return EnergyFigure.not_measured(
                f"the energy counter could not be read ({exc})", **known
            )
        if window < self.update_period_s:
            return EnergyFigure.not_measured(
                f"window shorter than the counter's update period ({window * 1e3:.3g} ms < "
                f"{self.update_period_s * 1e3:.3g} ms, {self.update_period_basis})",
                **known,
            )
        if last < first:
            return EnergyFigure.not_measured(
                "the energy counter went backwards (the driver was reloaded)", **known
            )
        if last == first:
            return EnergyFigure.not_measured(
                f"the energy counter did not advance in {window:.3g} s (longer than its "
                f"{self.update_period_s * 1e3:.3g} ms update period): it is not being updated",
                **known,
            )
        energy_j = (last - first) / 1000.0
        spread = energy_j / window * self.update_period_s + 2 * self.resolution_j
        return EnergyFigure(
            energy_j=energy_j, uncertainty_j=spread if math.isfinite(spread) else None, **known
        )

    def close(self) -> None:
        """Release the counter."""
        if self.counter is not None:
            self.counter.close()


def cpu_energy_meter() -> EnergyMeter:
    """The meter of a CPU run: not measured, with why."""
    return EnergyMeter(None, reason=CPU_REASON)


def _name(nvml: Any, handle: Any) -> str:
    try:
        name = nvml.nvmlDeviceGetName(handle)
    except Exception:  # noqa: BLE001 - the name only labels the source
        return "NVIDIA GPU"
    return name.decode() if isinstance(name, bytes) else str(name)


def nvml_energy_meter(
    *,
    index: int | None = None,
    uuid: str | None = None,
    nvml: Any = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    update_period_s: float = DEFAULT_UPDATE_PERIOD_S,
) -> EnergyMeter:
    """A meter on one GPU's total-energy counter, found by ``uuid`` (as torch reports it: not
    affected by ``CUDA_VISIBLE_DEVICES``) or NVML ``index``; "not measured" with why when NVML,
    the GPU or its counter is missing. ``nvml``: the module (a seam; default ``pynvml``)."""
    if nvml is None:
        try:
            import pynvml as nvml_module
        except ImportError:
            return EnergyMeter(None, reason="pynvml (nvidia-ml-py) is not installed")
        nvml = nvml_module
    try:
        nvml.nvmlInit()
    except Exception as exc:  # noqa: BLE001 - NVMLError: no driver, no permission
        return EnergyMeter(None, reason=f"NVML did not initialise ({exc})")
    which = f"GPU {uuid}" if uuid else f"GPU {index or 0}"
    try:
        if uuid:
            handle = nvml.nvmlDeviceGetHandleByUUID(uuid)
        else:
            handle = nvml.nvmlDeviceGetHandleByIndex(index or 0)
    except Exception as exc:  # noqa: BLE001 - NOT_FOUND, INVALID_ARGUMENT
        with contextlib.suppress(Exception):  # best effort
            nvml.nvmlShutdown()
        return EnergyMeter(None, reason=f"NVML does not find {which} ({exc})")
    found = NvmlEnergyCounter(
        nvml, handle, f"NVML total-energy counter of {which} ({_name(nvml, handle)}), whole board"
    )
    counter: NvmlEnergyCounter | None = found
    reason = ""
    try:
        found.read_mj()
    except Exception as exc:  # noqa: BLE001 - NOT_SUPPORTED: pre-Volta, a MIG instance
        mig = " (a MIG instance has none: its GPU's counter covers every instance)"
        reason = f"{which} has no total-energy counter (NVML: {exc})" + (
            mig if uuid and uuid.startswith("MIG-") else ""
        )
        counter = None
        with contextlib.suppress(Exception):  # best effort
            nvml.nvmlShutdown()
    return EnergyMeter(
        counter, reason=reason, clock=clock, sleep=sleep, update_period_s=update_period_s
    )
