"""The stored ``audit`` document: window, definitions, every device's figures and dollars, the
roll-ups by node, GPU model and namespace, the CPU nodes, and the ranked actions."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from accelscope.audit.analysis import (
    BUSY_NOT_USEFUL,
    IDLE_BELOW,
    STREAK_MIN_S,
    DeviceFigures,
)
from accelscope.audit.cost import HOURS_PER_MONTH, Action, GpuPrice
from accelscope.audit.telemetry import Grid
from accelscope.serialise import dump

__all__ = ["AUDIT_SCHEMA", "DEFINITIONS", "audit_document"]

AUDIT_SCHEMA = 1
DEFINITIONS = {
    "busy_h": "Σ GPU_UTIL x hours: what nvidia-smi shows (a kernel ran at some point of each "
    "sample window); not measured under MIG",
    "active_h": "Σ GR_ENGINE_ACTIVE x hours",
    "useful_h": "Σ SM_ACTIVE x hours (SM-active GPU-hours)",
    "useful_share": "useful_h / held_h",
    "idle": f"engine activity (GR_ENGINE_ACTIVE, else GPU_UTIL) below {IDLE_BELOW:.0%}",
    "busy_not_useful": f"GPU_UTIL >= {BUSY_NOT_USEFUL[0]:.0%} while SM_ACTIVE < "
    f"{BUSY_NOT_USEFUL[1]:.0%}",
    "busy_minus_useful_h": "Σ max(0, GPU_UTIL - SM_ACTIVE) x hours over slots with both "
    "(GR_ENGINE_ACTIVE for GPU_UTIL where that is not measured, e.g. MIG): what nvidia-smi "
    "counts busy that the SMs did not work; priced and ranked among the actions whatever its "
    "size",
    "held": "a pod held the GPU (dcgm-exporter's pod label); = observed without pod labels",
    "held_idle": f"held and idle for >= {STREAK_MIN_S / 60:.0f} min in a row",
    "cost_usd": "observed GPU-hours x $ per GPU-hour x share of the GPU (the GPU was there, "
    "held or not); held_usd: the held part",
    "mig": "a MIG instance counts as its share of the GPU (g/7, g/4 on A30) in hours and $; "
    "its activity fields are relative to its own slice",
}
_SUMMED = (
    "observed",
    "held",
    "busy",
    "active",
    "useful",
    "idle",
    "held_idle",
    "busy_not_useful",
    "busy_minus_useful",
)


def _dollars(f: DeviceFigures, price: GpuPrice) -> dict[str, float]:
    rate = price.usd_per_gpu_hour * f.share
    out = {  # one basis: the hours the GPU was there (observed); held is a part of them
        "cost_usd": f.hours["observed"] * rate,
        "held_usd": f.hours["held"] * rate,
        "idle_usd": f.hours.get("idle", 0.0) * rate,
        "held_idle_usd": f.hours.get("held_idle", 0.0) * rate,
        "busy_minus_useful_usd": f.hours.get("busy_minus_useful", 0.0) * rate,
    }
    return out


def _per_useful(f: DeviceFigures, cost: float) -> float | None:
    useful = f.hours.get("useful", 0.0) * f.share
    return cost / useful if useful > 0 else None


def _rollup(rows: Sequence[tuple[str, DeviceFigures, dict[str, float]]]) -> list[dict[str, Any]]:
    groups: dict[str, dict[str, Any]] = {}
    for name, f, usd in rows:
        g = groups.setdefault(
            name, {"name": name, "gpus": 0.0, **{f"{k}_gpu_h": 0.0 for k in _SUMMED}}
        )
        g["gpus"] += f.share
        for key in _SUMMED:
            g[f"{key}_gpu_h"] += f.hours.get(key, 0.0) * f.share
        for key in ("cost_usd", "idle_usd", "held_idle_usd", "busy_minus_useful_usd"):
            g[key] = g.get(key, 0.0) + usd[key]
    for g in groups.values():
        held = g["held_gpu_h"]
        g["useful_share"] = g["useful_gpu_h"] / held if held > 0 else None
    return sorted(groups.values(), key=lambda g: -float(g.get("cost_usd", 0.0)))


def _cpu_node(busy: NDArray[np.float64], grid: Grid, usd_per_hour: float | None) -> dict[str, Any]:
    """A CPU node's coverage, busy share and (priced) cost and idle cost."""
    seen = ~np.isnan(busy)
    observed_h = float(np.count_nonzero(seen)) * grid.slot_h
    share = float(np.nanmean(busy)) if seen.any() else None
    node: dict[str, Any] = {
        "coverage": float(np.mean(seen)),
        "observed_h": observed_h,
        "busy_share": share,
    }
    if usd_per_hour is None:
        node["not_measured"] = {"usd": "no price for CPU nodes: give --price cpu=USD_PER_NODE_HOUR"}
    else:
        node["cost_usd"] = observed_h * usd_per_hour
        node["idle_usd"] = observed_h * usd_per_hour * (1.0 - (share or 0.0))
    return node


def audit_document(
    *,
    grid: Grid,
    source: str,
    figures: Sequence[DeviceFigures],
    prices: Mapping[str, GpuPrice],
    actions: Sequence[Action],
    cpu_busy: Mapping[str, NDArray[np.float64]],
    ignored: Mapping[str, int],
    cpu_usd_per_node_hour: float | None = None,
    requests: Mapping[str, NDArray[np.float64]] | None = None,
) -> dict[str, Any]:
    """Everything the views, the report and a later ``runs show`` need."""
    window_h = grid.slots * grid.slot_h
    per_month = HOURS_PER_MONTH / window_h
    rows = []
    devices = []
    for f in figures:
        usd = _dollars(f, prices[f.model])
        per_useful = _per_useful(f, usd["cost_usd"])
        devices.append({**f.to_dict(), "usd": {**usd, "usd_per_useful_gpu_hour": per_useful}})
        rows.append((f, usd))
    totals: dict[str, Any] = {
        k: sum(f.hours.get(k, 0.0) * f.share for f in figures) for k in _SUMMED
    }
    cost = sum(u["cost_usd"] for _, u in rows)
    useful = totals["useful"]
    totals.update(
        gpus=sum(f.share for f in figures),
        cost_usd=cost,
        idle_usd=sum(u["idle_usd"] for _, u in rows),
        held_idle_usd=sum(u["held_idle_usd"] for _, u in rows),
        busy_minus_useful_usd=sum(u["busy_minus_useful_usd"] for _, u in rows),
        usd_per_useful_gpu_hour=cost / useful if useful > 0 else None,
        useful_share=useful / totals["held"] if totals["held"] > 0 else None,
        cost_usd_per_month=cost * per_month,
        idle_usd_per_month=sum(u["idle_usd"] for _, u in rows) * per_month,
    )
    namespace_rows = [
        (holder.split("/")[0] if "/" in holder else holder, f, usd)
        for f, usd in rows
        for holder in (f.holders or ("(unallocated)",))[:1]
    ]
    requested = {node: float(np.sum(r)) * grid.slot_h for node, r in (requests or {}).items()}
    by_node = _rollup([(f.host, f, u) for f, u in rows])
    for group in by_node:
        if group["name"] in requested:
            group["requested_gpu_h"] = requested[group["name"]]
    known = any(f.holders for f in figures)
    totals["allocation"] = (
        "held = a pod held the GPU (dcgm-exporter's pod labels)"
        if known
        else "held = observed: the data has no pod labels"
    ) + (
        f"; kube-state-metrics GPU requests: {sum(requested.values()):,.1f} GPU-h"
        if requested
        else "; no kube-state-metrics GPU requests"
    )
    totals["requested_gpu_h"] = sum(requested.values()) if requested else None
    cpu = {host: _cpu_node(busy, grid, cpu_usd_per_node_hour) for host, busy in cpu_busy.items()}
    if cpu_usd_per_node_hour is not None:
        totals["cpu_cost_usd"] = sum(float(c["cost_usd"]) for c in cpu.values())
        totals["cpu_idle_usd"] = sum(float(c["idle_usd"]) for c in cpu.values())
    return {
        "schema": AUDIT_SCHEMA,
        "source": source,
        "window": {
            "start_s": grid.start_s,
            "end_s": grid.end_s,
            "step_s": grid.step_s,
            "hours": window_h,
        },
        "definitions": DEFINITIONS,
        "prices": {
            m: {"usd_per_gpu_hour": p.usd_per_gpu_hour, "source": p.source}
            for m, p in prices.items()
        },
        "totals": totals,
        "devices": devices,
        "by_node": by_node,
        "by_model": _rollup([(f.model, f, u) for f, u in rows]),
        "by_namespace": _rollup(namespace_rows),
        "by_workload": _rollup(
            [(f.holders[0] if f.holders else "(unallocated)", f, u) for f, u in rows]
        ),
        "cpu_nodes": cpu,
        "actions": [dump(a) for a in actions],
        "ignored_series": dict(ignored),
    }
