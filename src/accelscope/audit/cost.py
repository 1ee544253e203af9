"""Dollars with provenance, and actions ranked by the dollars a month they concern.

A GPU-hour's price is the catalog instance's hourly price over its GPU count, matched by GPU
model (``A100``, ``H100``, ``L4``, ... and the memory size when both say it), with the
catalog's source and date; ``--price MODEL=USD`` overrides. A MIG instance costs its share of
the GPU. Monthly figures scale the window to 30 days.

Actions carry the evidence, the dollars a month, whether those are *recovered* (the hours go
away: idle allocations, GPUs freed by MIG, hours a diurnal service does not need) or only *at
stake* (an upper bound: the cost of the hours a change would speed up), and the accelscope
command that verifies them.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from accelscope.audit.analysis import DeviceFigures, gpu_slices
from accelscope.errors import BadInputError
from accelscope.plan.catalog import Catalog

__all__ = [
    "Action",
    "GpuPrice",
    "OnPremCost",
    "actions",
    "gpu_family",
    "gpu_memory_gib",
    "gpu_price",
    "look_at",
    "mig_profiles",
]

_MODEL = re.compile(r"\b(H200|H100|A100|A10G|A30|L40S|L40|L4|T4|V100)\b", re.IGNORECASE)
_MEMORY = re.compile(r"(\d+)\s*GB", re.IGNORECASE)
HOURS_PER_MONTH = 30 * 24


@dataclass(frozen=True)
class GpuPrice:
    """$ per GPU-hour and where it comes from."""

    usd_per_gpu_hour: float
    source: str


def gpu_family(model: str) -> tuple[str, str]:
    """A GPU model name's family (``H100``, ``A100``, ``L4``, ...; "" when none is named) and
    the memory size it states in GB ("" when none)."""
    kind = _MODEL.search(model)
    memory = _MEMORY.search(model)
    return (kind.group(1).upper() if kind else "", memory.group(1) if memory else "")


def gpu_memory_gib(model: str, catalog: Catalog | None) -> float | None:
    """The memory of one ``model`` GPU in GiB when the telemetry does not give it: the size its
    name says (``A100-SXM4-40GB``), else the catalog's device memory for its GPU family (the
    largest where the catalog has several: a memory fraction of it then needs the most, so no
    workload is squeezed into too small a slice); ``None`` when neither says it."""
    family, memory = gpu_family(model)
    if memory:
        return float(memory)
    sizes = [
        instance.device_memory_bytes / 2**30
        for instance in (catalog.gpus() if catalog is not None and family else ())
        if gpu_family(instance.accelerator)[0] == family
    ]
    return max(sizes, default=None)


def gpu_price(model: str, catalog: Catalog, given: Mapping[str, float]) -> GpuPrice:
    """The price of one GPU-hour of ``model``: ``given`` (by exact model name or family),
    else the catalog; a model without one is bad input."""
    family, memory = gpu_family(model)
    tiers = (
        [n for n in given if n == model],
        [n for n in given if family and gpu_family(n) == (family, memory)],
        [n for n in given if family and gpu_family(n)[0] == family and not gpu_family(n)[1]],
        [n for n in given if n == "*"],
    )
    for names in tiers:
        if names:
            return GpuPrice(given[names[0]], f"--price {names[0]}={given[names[0]]:g}")
    candidates = []
    for instance in catalog.instances:
        if instance.kind != "gpu":
            continue
        other, other_memory = gpu_family(instance.accelerator)
        if family and other == family:
            exact = not memory or not other_memory or memory == other_memory
            candidates.append(
                (not exact, instance.price_usd_per_hour / instance.accelerator_count, instance)
            )
    if not candidates:
        raise BadInputError(
            f"no price for GPU model {model or '(unnamed)'} in the catalog: give "
            f"--price '{model or '*'}=USD_PER_GPU_HOUR' (or '*=USD' for every unpriced GPU) "
            "or a --catalog with it"
        )
    candidates.sort(key=lambda c: (c[0], c[1]))
    inexact, per_gpu, instance = candidates[0]
    source = instance.sources.get("price_usd_per_hour")
    cited = f"{source.source}, {source.date}" if source else "catalog"
    caveat = " (same GPU family, other memory size)" if inexact else ""
    return GpuPrice(
        per_gpu,
        f"{instance.type} ${instance.price_usd_per_hour:g}/h ÷ {instance.accelerator_count} "
        f"GPU(s){caveat}: {cited}",
    )


@dataclass(frozen=True)
class OnPremCost:
    """What a GPU you own costs an hour: its purchase spread over its life, its operations, and
    its energy (measured mean power, or ``watts`` when not measured, x PUE x $/kWh)."""

    capex_usd: float
    life_years: float
    pue: float = 1.4
    usd_per_kwh: float = 0.12
    ops_usd_per_year: float = 0.0
    watts: float | None = None

    @classmethod
    def parse(cls, text: str) -> OnPremCost:
        """``capex=25000,life=4,pue=1.4,kwh=0.12,ops=2000,watts=400`` (capex and life needed)."""
        names = {
            "capex": "capex_usd",
            "life": "life_years",
            "pue": "pue",
            "kwh": "usd_per_kwh",
            "ops": "ops_usd_per_year",
            "watts": "watts",
        }
        values: dict[str, float] = {}
        for part in text.split(","):
            key, sep, raw = part.partition("=")
            key = key.strip().lower()
            if not sep or key not in names:
                raise BadInputError(
                    f"--onprem {text!r}: give capex=USD,life=YEARS"
                    "[,pue=1.4,kwh=USD,ops=USD_PER_YEAR,watts=W]"
                )
            try:
                number = float(raw.strip().rstrip("y"))
            except ValueError as exc:
                raise BadInputError(f"--onprem {key}={raw!r}: not a number") from exc
            if not (math.isfinite(number) and number >= 0) or (key == "life" and number <= 0):
                raise BadInputError(f"--onprem {key}={raw!r}: must be a positive number")
            values[names[key]] = number
        if "capex_usd" not in values or "life_years" not in values:
            raise BadInputError("--onprem needs at least capex=USD and life=YEARS")
        return cls(**values)

    def price(self, power_w: float | None) -> GpuPrice:
        """$ per GPU-hour at ``power_w`` (measured), else at :attr:`watts`."""
        watts = power_w if power_w is not None else self.watts
        if watts is None:
            raise BadInputError(
                "--onprem: no power measured for this GPU model (DCGM_FI_DEV_POWER_USAGE): "
                "add watts=W"
            )
        hours = self.life_years * 8760
        energy = watts / 1000 * self.pue * self.usd_per_kwh
        usd = self.capex_usd / hours + self.ops_usd_per_year / 8760 + energy
        how = "measured mean" if power_w is not None else "given"
        return GpuPrice(
            usd,
            f"on-prem: ${self.capex_usd:,.0f} over {self.life_years:g} y + ops "
            f"${self.ops_usd_per_year:,.0f}/y + {watts:.0f} W ({how}) x PUE {self.pue:g} x "
            f"${self.usd_per_kwh:g}/kWh",
        )


def mig_profiles(model: str) -> dict[int, float]:
    """Compute slices → memory (GiB) of the smallest MIG profile with that many slices."""
    family, memory = gpu_family(model)
    if family == "A30":
        return {1: 6, 2: 12, 4: 24}
    if family in ("A100", "H100", "H200"):
        if family == "H200":
            return {1: 18.0, 2: 35.0, 3: 71.0, 4: 71.0, 7: 141.0}
        per_slice = 5.0 if (family == "A100" and memory == "40") else 10.0
        return {g: per_slice * m for g, m in ((1, 1), (2, 2), (3, 4), (4, 4), (7, 8))}
    return {}


@dataclass(frozen=True)
class Action:
    """One thing to do: what, the dollars a month, recovered or at stake, evidence, and the
    command that verifies it."""

    kind: str
    title: str
    usd_per_month: float
    basis: str
    """``recovered`` or ``at stake (upper bound)``."""
    evidence: tuple[str, ...]
    verify: str
    devices: tuple[str, ...]
    assumptions: tuple[str, ...] = ()
    detail: Mapping[str, Any] | None = None
    """Figures behind the action (never empty: ``None`` when there are none)."""


def _usd(figure: DeviceFigures, hours: float, price: GpuPrice, per_month: float) -> float:
    return hours * figure.share * price.usd_per_gpu_hour * per_month


def actions(
    figures: Sequence[DeviceFigures],
    prices: Mapping[str, GpuPrice],
    window_hours: float,
    *,
    catalog: Catalog | None = None,
) -> list[Action]:
    """Every action the figures support, ranked by dollars a month; ``catalog`` gives a GPU's
    memory where neither the telemetry nor its model name does (:func:`gpu_memory_gib`)."""
    per_month = HOURS_PER_MONTH / window_hours
    found: list[Action] = []
    for f in figures:
        price = prices[f.model]
        if f.streaks:
            longest = max(s.hours for s in f.streaks)
            holders = sorted({s.holder for s in f.streaks})
            found.append(
                Action(
                    kind="release-idle",
                    title=f"release {', '.join(holders)} on {f.key}: held but idle",
                    usd_per_month=_usd(f, f.hours["held_idle"], price, per_month),
                    basis="recovered",
                    evidence=(
                        f"{len(f.streaks)} held-idle streak(s) ≥ 30 min, "
                        f"{f.hours['held_idle']:.1f} h in the window, longest {longest:.1f} h",
                    ),
                    verify="accelscope audit again after releasing: its held-idle hours go",
                    devices=(f.key,),
                )
            )
        if f.hours.get("busy_minus_useful", 0.0) > 0:
            found.append(_busy_not_useful(f, price, per_month))
        useful_share = f.useful_share or 0.0
        if (
            f.tensor_median is not None
            and f.tensor_median < 0.02
            and useful_share >= 0.3
            and not f.mig_profile
        ):
            found.append(
                Action(
                    kind="mixed-precision",
                    title=f"{f.key}: SMs busy, tensor cores idle: try bf16/fp16",
                    usd_per_month=_usd(f, f.hours.get("useful", 0.0), price, per_month),
                    basis="at stake (upper bound)",
                    evidence=(
                        f"useful share {useful_share:.0%}, median tensor activity "
                        f"{f.tensor_median:.1%}",
                    ),
                    verify="accelscope doctor TRAIN_SCRIPT --what-if amp (or accelscope bench "
                    "MODEL --precision fp32,bf16,fp16)",
                    devices=(f.key,),
                    assumptions=("the saving is a share of these hours; doctor measures it",),
                )
            )
        curve = f.hourly_activity
        if curve and max(curve) >= 0.2 and min(curve) < 0.3 * max(curve):
            peak = max(curve)
            need = sum(a / peak for a in curve) / 24
            found.append(
                Action(
                    kind="follow-diurnal",
                    title=f"{f.key}: diurnal load ({min(curve):.0%}-{peak:.0%} by hour): "
                    "scale with it",
                    usd_per_month=_usd(f, f.hours["held"] * (1 - need), price, per_month),
                    basis="recovered",
                    evidence=(
                        f"mean activity per hour of day from {min(curve):.0%} to {peak:.0%}; "
                        f"capacity following it needs {need:.0%} of the peak GPU-hours",
                    ),
                    verify="accelscope plan --traffic hourly.csv (the profile below as "
                    "hour,qps) --sla-p99 ...",
                    devices=(f.key,),
                    assumptions=("capacity needed is proportional to engine activity",),
                    detail={"hourly_activity": list(curve)},
                )
            )
    found.extend(_consolidate(figures, prices, per_month, catalog))
    return sorted(found, key=lambda a: -a.usd_per_month)


_LOOK_AT_GAP = 0.2
"""A difference of activities (GPU_UTIL vs engine, engine vs SM) this large names its cause."""


def look_at(f: DeviceFigures) -> tuple[str, ...]:
    """What to look at for a device's busy-minus-useful hours, most telling first, from the
    mean activities over the window: the engine idle inside the sample windows nvidia-smi
    counts busy (input pipeline, host syncs), the engine active on few SMs (batch size, small
    kernels), tensor cores idle (precision). All three when the figures do not tell."""
    observed = f.hours.get("observed", 0.0)
    if observed <= 0:
        return ()

    def mean(name: str) -> float | None:
        return f.hours[name] / observed if name in f.hours else None

    util, engine, sm = mean("busy"), mean("active"), mean("useful")
    hints = []
    if util is not None and engine is not None and util - engine >= _LOOK_AT_GAP:
        hints.append(
            f"input pipeline / host syncs: the engine is active {engine:.0%} of the time while "
            f"nvidia-smi shows {util:.0%} (it idles inside each sample window)"
        )
    busy = engine if engine is not None else util
    if busy is not None and sm is not None and busy - sm >= _LOOK_AT_GAP:
        hints.append(
            f"batch size: the engine is active {busy:.0%} of the time but SMs only {sm:.0%}: "
            "small kernels or batches leave most SMs waiting"
        )
    if f.tensor_median is not None and f.tensor_median < 0.05 and (sm or 0.0) >= 0.05:
        hints.append(f"precision: tensor cores idle (median {f.tensor_median:.1%}): bf16/fp16")
    if not hints:
        hints = [
            "input pipeline (accelscope doctor)",
            "batch size (accelscope bench --batch)",
            "precision (accelscope bench --precision)",
        ]
    return tuple(hints)


def _busy_not_useful(f: DeviceFigures, price: GpuPrice, per_month: float) -> Action:
    """The device's busy-minus-useful GPU-hours priced: at stake, ranked with the rest."""
    gap = f.hours["busy_minus_useful"]
    busy_name = "GPU_UTIL" if f.gap_basis == "gpu_util" else "GR_ENGINE_ACTIVE"
    observed = max(f.hours.get("observed", 0.0), 1e-9)
    busy_h = f.hours.get("busy" if f.gap_basis == "gpu_util" else "active", 0.0)
    hints = look_at(f)
    busy_word = "busy" if f.gap_basis == "gpu_util" else "engine-active"
    topics = ", ".join(h.split(":")[0].split(" (")[0] for h in hints)
    return Action(
        kind="busy-not-useful",
        title=f"{f.key}: busy but not useful {gap / observed:.0%} of the time "
        f"({busy_h / observed:.0%} {busy_word}, {f.hours.get('useful', 0.0) / observed:.0%} "
        f"SM-active): look at {topics}",
        usd_per_month=_usd(f, gap, price, per_month),
        basis="at stake (upper bound)",
        evidence=(
            f"{gap:.1f} GPU-h of {busy_name} without SM activity (Σ max(0, {busy_name} - "
            f"SM_ACTIVE) x hours) in {f.hours.get('observed', 0.0):.1f} h observed",
            f"busy-but-not-useful slots (GPU_UTIL ≥ 50 %, SM_ACTIVE < 25 %): "
            f"{f.hours.get('busy_not_useful', 0.0):.1f} h",
            *(f"look at: {h}" for h in hints),
        ),
        verify="accelscope doctor TRAIN_SCRIPT (input-bound? sync-bound?), then "
        "accelscope bench MODEL --batch 8,32,128 --precision fp32,bf16",
        devices=(f.key,),
        assumptions=(
            "an upper bound: SM-active cannot reach 100 % of busy time; the change that recovers "
            "part of it is what doctor and bench measure",
        ),
        detail={"busy_minus_useful_h": gap, "busy_basis": f.gap_basis, "look_at": list(hints)},
    )


def _consolidate(
    figures: Sequence[DeviceFigures],
    prices: Mapping[str, GpuPrice],
    per_month: float,
    catalog: Catalog | None,
) -> list[Action]:
    """Whole GPUs whose p99 memory and p95 SM activity fit a MIG slice, bin-packed per GPU
    model (first fit decreasing on compute slices): the GPUs freed. A GPU whose memory size
    nothing says (telemetry, model name, catalog) is left out."""
    by_model: dict[str, list[tuple[int, DeviceFigures]]] = {}
    for f in figures:
        profiles = mig_profiles(f.model)
        if f.mig_profile or not profiles or f.memory_p99_fraction is None or f.sm_p95 is None:
            continue
        slices = gpu_slices(f.model)
        total_gib = (f.memory_total_mib or 0.0) / 1024 or gpu_memory_gib(f.model, catalog)
        if not total_gib:
            continue
        need_gib = f.memory_p99_fraction * total_gib
        fits = [
            g
            for g, gib in sorted(profiles.items())
            if g < slices and gib >= need_gib and g / slices >= f.sm_p95
        ]
        if fits:
            by_model.setdefault(f.model, []).append((fits[0], f))
    found = []
    for model, items in by_model.items():
        if len(items) < 2:
            continue
        capacity = gpu_slices(model)
        bins: list[int] = []
        for need, _ in sorted(items, key=lambda x: -x[0]):
            for i, used in enumerate(bins):
                if used + need <= capacity:
                    bins[i] += need
                    break
            else:
                bins.append(need)
        freed = len(items) - len(bins)
        if freed <= 0:
            continue
        hours = sum(f.hours["held"] for _, f in items) / len(items)
        found.append(
            Action(
                kind="consolidate-mig",
                title=f"consolidate {len(items)} {model} GPUs onto {len(bins)} with MIG",
                usd_per_month=freed * hours * prices[model].usd_per_gpu_hour * per_month,
                basis="recovered",
                evidence=tuple(
                    f"{f.key}: p99 memory {f.memory_p99_fraction:.0%}, p95 SM "
                    f"{f.sm_p95:.0%} → {g}g slice"
                    for g, f in items
                    if f.memory_p99_fraction is not None and f.sm_p95 is not None
                ),
                verify="accelscope load MODEL on the slice (CUDA_VISIBLE_DEVICES=MIG-...) "
                "--sla-p99 ...",
                devices=tuple(f.key for _, f in items),
                assumptions=(
                    f"a whole GPU's p95 SM activity s needs ceil({capacity} s) of its "
                    f"{capacity} compute slices; a MIG instance's own activity is relative to "
                    "its slice",
                    "first-fit-decreasing on compute slices; memory per the smallest profile "
                    "with that many slices",
                ),
            )
        )
    return found


def monthly(hours: float, window_hours: float) -> float:
    """Hours in the window scaled to 30 days."""
    return hours * HOURS_PER_MONTH / window_hours if window_hours > 0 else math.nan
