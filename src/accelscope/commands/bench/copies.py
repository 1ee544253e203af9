"""Each GPU row beside its twin that includes the host-to-device copy (``inputs=pinned``): the
two throughputs a figure is held against, MLPerf's (inputs already on the device) and what a
service sees (each batch copied from pinned host memory inside the timed call)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from accelscope.result import Result, Status
from accelscope.spec import Device, RunSpec
from accelscope.sweep.gpu_default import PINNED

__all__ = ["CopyPair", "copy_pairs"]


@dataclass(frozen=True, kw_only=True)
class CopyPair:
    """A device-resident GPU row and its pinned-copy twin (``None`` when it was not run)."""

    resident: Result
    pinned: Result | None

    @property
    def label(self) -> str:
        """The resident row's label."""
        return self.resident.spec.label()

    @staticmethod
    def _rate(result: Result | None) -> float | None:
        if result is None or result.status is not Status.OK or result.measurement is None:
            return None
        return result.measurement.throughput_items_per_s

    @property
    def resident_items_per_s(self) -> float | None:
        """Items/s with the inputs resident on the device (``None``: not measured)."""
        return self._rate(self.resident)

    @property
    def pinned_items_per_s(self) -> float | None:
        """Items/s with each batch's copy from pinned host memory (``None``: not measured)."""
        return self._rate(self.pinned)

    @property
    def copy_share(self) -> float | None:
        """The share of throughput the copy costs: ``1 - pinned / resident``."""
        resident, pinned = self.resident_items_per_s, self.pinned_items_per_s
        if resident is None or pinned is None:
            return None
        return 1.0 - pinned / resident

    @property
    def compile_s(self) -> float | None:
        """The row's compile time for its shape (``compile`` rows: ``prepare_s``, which holds the
        compile and its one warm call; never part of the throughput)."""
        if self.resident.spec.backend != "compile":
            return None
        return self.resident.prepare_s

    def pinned_text(self) -> str:
        """The twin's figure, or why there is none."""
        if self.pinned is None:
            return "not run"
        rate = self.pinned_items_per_s
        if rate is not None:
            return f"{rate:,.0f}"
        return self.pinned.status_reason or self.pinned.status.value


def _resident_key(spec: RunSpec) -> str:
    return replace(spec, options=tuple(o for o in spec.options if o != PINNED)).key


def copy_pairs(results: Sequence[Result]) -> list[CopyPair]:
    """Every measured (not skipped) device-resident GPU row with its twin, in results order."""
    twins = {
        _resident_key(r.spec): r
        for r in results
        if r.spec.device is Device.CUDA and PINNED in r.spec.options
    }
    if not twins:
        return []
    return [
        CopyPair(resident=r, pinned=twins.get(r.spec.key))
        for r in results
        if r.spec.device is Device.CUDA
        and PINNED not in r.spec.options
        and r.status is not Status.SKIPPED
    ]
