"""The terminal view of an audit document (rich renderables; the CLI prints them)."""

from __future__ import annotations

from typing import Any

from rich.console import Group, RenderableType
from rich.markup import escape
from rich.table import Table
from rich.text import Text

__all__ = ["audit_view"]


def _h(value: Any) -> str:
    return "-" if value is None else f"{float(value):,.1f}"


def _usd(value: Any) -> str:
    return "-" if value is None else f"${float(value):,.0f}"


def audit_view(document: dict[str, Any], *, title: str = "audit") -> RenderableType:
    """Per-device hours and dollars, the fleet totals, and the actions ranked by $/month."""
    window = document["window"]
    table = Table(title=escape(f"{title}: {window['hours']:.0f} h window, {document['source']}"))
    for column in (
        "device",
        "GPU",
        "held by",
        "held h",
        "busy h",
        "useful h",
        "useful",
        "busy-useful h",
        "idle h",
        "held-idle h",
        "cost",
        "idle $",
        "coverage",
    ):
        table.add_column(
            column, justify="left" if column in ("device", "GPU", "held by") else "right"
        )
    for d in document["devices"]:
        hours = d["hours"]
        gpu = d["model"].replace("NVIDIA ", "") + (
            f" {d['mig_profile']}" if d["mig_profile"] else ""
        )
        share = d["useful_share"]
        coverage = min(d["coverage"].values()) if d["coverage"] else 0.0
        table.add_row(
            escape(d["key"]),
            escape(gpu),
            escape(", ".join(d["holders"]) or "-"),
            _h(hours.get("held")),
            _h(hours.get("busy")) if "busy" in hours else "n/m",
            _h(hours.get("useful")) if "useful" in hours else "n/m",
            "-" if share is None else f"{share:.0%}",
            _h(hours.get("busy_minus_useful")) if "busy_minus_useful" in hours else "n/m",
            _h(hours.get("idle")),
            _h(hours.get("held_idle")),
            _usd(d["usd"]["cost_usd"]),
            _usd(d["usd"]["idle_usd"]),
            f"{coverage:.0%}",
        )
    totals = document["totals"]
    share = totals.get("useful_share")
    per_useful = totals.get("usd_per_useful_gpu_hour")
    summary = Text(
        f"fleet: {totals['gpus']:.2f} GPUs, {totals['held']:,.0f} held GPU-h, "
        f"{totals['busy']:,.0f} busy (nvidia-smi), {totals['useful']:,.0f} useful (SM-active)"
        f"{'' if share is None else f' = {share:.0%} of held'}; cost {_usd(totals['cost_usd'])} "
        f"({_usd(totals['cost_usd_per_month'])}/month), idle {_usd(totals['idle_usd'])} "
        f"({_usd(totals['idle_usd_per_month'])}/month)"
        + ("" if per_useful is None else f", ${per_useful:,.2f} per useful GPU-hour"),
        style="bold",
    )
    parts: list[RenderableType] = [table, summary]
    actions = document["actions"]
    if actions:
        ranked = Table(title="actions, by $/month")
        for column in ("#", "$/month", "basis", "action", "verify with"):
            ranked.add_column(column, justify="right" if column in ("#", "$/month") else "left")
        for i, a in enumerate(actions, 1):
            ranked.add_row(
                str(i), _usd(a["usd_per_month"]), a["basis"], escape(a["title"]), a["verify"]
            )
        parts.append(ranked)
    else:
        parts.append(Text("no action: nothing idle, busy-but-not-useful or consolidatable"))
    not_measured = sorted(
        {f"{name}: {why}" for d in document["devices"] for name, why in d["not_measured"].items()}
    )
    if not_measured:
        parts.append(Text("not measured: " + "; ".join(not_measured), style="dim"))
    for model, price in document["prices"].items():
        parts.append(
            Text(
                f"{model}: ${price['usd_per_gpu_hour']:.3f}/GPU-h ({price['source']})", style="dim"
            )
        )
    parts.append(
        Text(
            "definitions: busy = nvidia-smi's GPU_UTIL; useful = SM-active GPU-hours; "
            "busy-useful = Σ max(0, GPU_UTIL - SM_ACTIVE) x h; idle = engine activity < 5 %; "
            "held = a pod held it (JSON: definitions)",
            style="dim",
        )
    )
    return Group(*parts)
