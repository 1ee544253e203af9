"""Rich terminal views of ``plan`` documents (capacity, memory, API and LLM serving modes).

They render the stored JSON form, so a live plan and ``accelscope runs show`` print the same.
A projected capacity is never printed without its ``estimate`` label.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from accelscope.report.format import format_bytes, format_seconds, money_usd, percent

__all__ = [
    "api_view",
    "capacity_view",
    "energy_cell",
    "fleet_view",
    "llm_view",
    "memory_view",
    "plan_view",
]


def capacity_cell(capacity: Mapping[str, Any] | None) -> str:
    """``"1,234 qps/inst (estimate)"``: the number always with its basis label."""
    if capacity is None:
        return "—"
    qps = float(capacity.get("qps_per_instance", 0.0))
    label = str(capacity.get("label", ""))
    number = f"{_rate(qps)} qps" if capacity.get("meets_sla") else "misses SLA"
    published = capacity.get("published")
    if isinstance(published, Mapping) and capacity.get("meets_sla"):
        low, high = published["low_qps_per_instance"], published["high_qps_per_instance"]
        number += f" [{_rate(low)}-{_rate(high)}, {published['coverage']:.0%}]"
    return f"{number} ({label})"


def _rate(qps: float) -> str:
    return f"{qps:,.0f}" if qps >= 100 else f"{qps:.3g}"


def energy_cell(energy: Mapping[str, Any] | None) -> str:
    """``"0.41 J · $0.02/M"``: joules per item measured with the capacity (and, priced, the
    energy's $ per million inferences); ``n/m`` when not measured, ``—`` for plans stored
    before energy."""
    if energy is None:
        return "—"
    per_item = energy.get("joules_per_item")
    if per_item is None:
        return "n/m"
    priced = energy.get("usd_per_million")
    return f"{float(per_item):.3g} J" + ("" if priced is None else f" · {money_usd(priced)}/M")


def _energy_lines(doc: Mapping[str, Any], choice: str | None) -> list[Text]:
    """How energy was priced, the chosen option's month, and why the rest is not measured."""
    options = [o for o in doc["options"] if o.get("capacity") is not None]
    if not any(o.get("energy") for o in options):
        return []
    price = doc.get("energy_price")
    lines = []
    chosen = next((o for o in options if o["name"] == choice and o.get("energy")), None)
    measured = chosen["energy"] if chosen else None
    if measured and measured.get("kwh_per_month") is not None:
        cost = measured.get("usd_per_month")
        spread = measured.get("uncertainty_rel")
        lines.append(
            Text(
                f"energy of {choice}: {measured['joules_per_item']:.3g} J/item"
                + ("" if spread is None else f" (±{spread:.0%})")
                + f", {measured['kwh_per_month']:,.4g} kWh/month"
                + ("" if cost is None else f" = {money_usd(cost)}/month")
                + f" ({measured.get('source', '')})",
            )
        )
    reasons: dict[str, list[str]] = {}
    for option in options:
        energy = option.get("energy") or {}
        if energy.get("joules_per_item") is None and energy.get("reason"):
            reasons.setdefault(str(energy["reason"]), []).append(option["name"])
    for reason, names in reasons.items():
        shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
        lines.append(Text(f"energy not measured for {shown}: {reason}", style="dim"))
    basis = (
        f"at ${price['usd_per_kwh']:g}/kWh x PUE {price['pue']:g}"
        if price
        else "not priced (give --energy-price $/kWh)"
    )
    lines.append(
        Text(
            f"energy: J/item measured with the capacity (whole GPU board), {basis}; the served "
            "items only, idle power of spare capacity not counted (a lower bound)",
            style="dim",
        )
    )
    return lines


def capacity_view(doc: Mapping[str, Any]) -> RenderableType:
    """The ranked options and the recommendation."""
    settings, traffic = doc["settings"], doc["traffic"]
    head = Text.assemble(
        ("plan: ", "bold"),
        (str(doc.get("model", "")), "bold cyan"),
        f" · p99 SLA {settings['sla_p99_s'] * 1e3:g} ms · headroom {settings['headroom']:.0%} · "
        f"min instances {settings['min_instances']} · traffic {traffic['description']} "
        f"(peak {traffic['peak_qps']:,.4g} qps, mean "
        f"{sum(traffic['hourly_qps']) / len(traffic['hourly_qps']):,.4g} qps)",
    )
    table = Table(show_lines=False, header_style="bold")
    for name, justify in (
        ("#", "right"),
        ("option", "left"),
        ("capacity / instance", "left"),
        ("at peak", "right"),
        ("$/mo always on", "right"),
        ("$/mo autoscaled", "right"),
        ("$/mo to zero", "right"),
        ("$/M inferences", "right"),
        ("util.", "right"),
        ("energy", "right"),
    ):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    choice = doc.get("recommendation", {}).get("choice")
    unknown: dict[str, list[str]] = {}
    rank = 0
    for option in doc["options"]:
        if option.get("capacity") is None:
            unknown.setdefault(str(option.get("reason", "")), []).append(option["name"])
            continue
        rank += 1
        feasible = option.get("feasible")
        style = "bold green" if option["name"] == choice else ("" if feasible else "dim")
        name = f"{option['name']}\n[dim]{option.get('description', '')}[/]"
        if feasible:
            table.add_row(
                str(rank),
                name,
                capacity_cell(option.get("capacity")),
                str(option["instances_at_peak"]),
                money_usd(option["monthly_always_on"]),
                money_usd(option["monthly_autoscaled"]),
                money_usd(option["monthly_scale_to_zero"]),
                money_usd(option["per_million_autoscaled"]),
                percent(option["utilisation_autoscaled"]),
                energy_cell(option.get("energy")),
                style=style,
            )
        else:
            reason = f"{capacity_cell(option.get('capacity'))}: {option.get('reason', '')}"
            table.add_row(str(rank), name, reason, "—", "", "", "", "", "", "", style=style)
    rec = doc.get("recommendation", {})
    lines = [
        Text("recommendation: ", style="bold")
        + Text(str(rec.get("choice") or "none"), style="bold green")
    ]
    lines += [Text(f"  · {why}") for why in rec.get("why", [])]
    if doc.get("ranking"):
        lines.append(Text(f"ranking: {doc['ranking']}", style="yellow"))
    for reason, names in unknown.items():
        lines.append(Text(f"no capacity for {', '.join(names)}: {reason}", style="dim"))
    chosen = next((o for o in doc["options"] if o["name"] == choice), None)
    if chosen and chosen.get("capacity"):
        lines.append(Text("assumptions:", style="bold"))
        lines += [Text(f"  · {a}", style="dim") for a in chosen["capacity"].get("assumptions", [])]
    lines += _energy_lines(doc, choice)
    for note in traffic.get("notes", []):
        lines.append(Text(f"note: {note}", style="yellow"))
    lines.append(
        Text(
            "$/M inferences and utilisation: following the traffic curve (hourly "
            "autoscaling). Prices: catalog list prices; see catalog sources.",
            style="dim",
        )
    )
    if doc.get("fleet"):
        return Group(head, table, *lines, fleet_view(doc["fleet"]))
    return Group(head, table, *lines)


def _hours(series: list[float]) -> str:
    """A 24-hour series as its range: ``1`` (flat) or ``0-3 (peak at 14 UTC)``."""
    low, high = min(series), max(series)
    if abs(high - low) < 1e-9:
        return f"{high:g}"
    return f"{low:g}-{high:g} (peak at {series.index(high):02d} UTC)"


def fleet_view(fleet: Mapping[str, Any]) -> RenderableType:
    """Buy or recover: the audited fleet's idle GPUs against each option's need."""
    head = Text(f"buy or recover: against audit run {fleet['run_id']}", style="bold")
    classes = Table(title="the fleet's GPUs (audited)", title_justify="left")
    for column in ("family", "GPUs", "idle GPUs by hour", "busy, not useful", "$/useful GPU-h"):
        classes.add_column(column, justify="left" if column == "family" else "right")
    for c in fleet["classes"]:
        useful, cost = c["useful_gpu_h_per_day"], c["cost_usd_per_day"]
        classes.add_row(
            c["family"],
            f"{c['gpus']:.3g}",
            _hours([round(v, 3) for v in c["idle_gpus_by_hour"]]),
            f"{c['busy_not_useful_gpu_h_per_day']:.3g} GPU-h/day",
            money_usd(cost / useful) if useful else "n/m",
        )
    paths = Table(title="per option of a family the fleet has", title_justify="left")
    for column in (
        "option",
        "needs (GPUs)",
        "recovered (GPUs)",
        "rent (inst.)",
        "buy",
        "all new $/month",
        "recover + rent $/month",
        "$/useful GPU-h before → after",
    ):
        paths.add_column(column, justify="left" if column == "option" else "right")
    for path in fleet["paths"]:
        before = path["fleet_usd_per_useful_gpu_hour_before"]
        after = path["fleet_usd_per_useful_gpu_hour_after"]
        paths.add_row(
            f"{path['option']} ({path['capacity_source']})",
            _hours(path["needed_gpus_by_hour"]),
            _hours([round(v, 3) for v in path["recovered_gpus_by_hour"]]),
            _hours(path["rented_instances_by_hour"]),
            str(path["buy_instances"]),
            money_usd(path["all_new_usd_per_month"]),
            money_usd(path["recover_usd_per_month"]),
            "n/m"
            if before is None
            else f"{money_usd(before)} → {'n/m' if after is None else money_usd(after)}",
        )
    lines: list[RenderableType] = [head, classes]
    if fleet["paths"]:
        lines.append(paths)
        best = fleet["paths"][0]
        lines.append(
            Text(
                f"recover {best['recovered_gpu_h_per_day']:.3g} GPU-hours a day of "
                f"{best['family']} and rent the rest: {money_usd(best['recover_usd_per_month'])}"
                f"/month against {money_usd(best['all_new_usd_per_month'])} all new "
                f"({money_usd(best['saved_usd_per_month'])}/month saved) on {best['option']}",
                style="bold green",
            )
        )
    else:
        lines.append(
            Text("no priced option of this plan is of a GPU family the fleet has", style="yellow")
        )
    lines += [
        Text(f"  · {name}: {text}", style="dim") for name, text in fleet["definitions"].items()
    ]
    lines.append(
        Text(
            "sources: the fleet's hours and prices audited; each option's capacity as its "
            "label says (measured or projected); rent prices: the catalog",
            style="dim",
        )
    )
    return Group(*lines)


def memory_view(doc: Mapping[str, Any]) -> RenderableType:
    """Memory breakdown and the GPU fit table."""
    head = Text.assemble(
        ("plan memory: ", "bold"),
        (str(doc["config"]), "bold cyan"),
        f" · context {doc['context_tokens']:,} tokens · batch {doc['batch']} · "
        f"{doc['precision']} weights, {doc['kv_precision']} KV cache",
    )
    parts = Table(header_style="bold", title="memory (estimate)")
    parts.add_column("part")
    parts.add_column("bytes", justify="right")
    parts.add_column("", justify="right")
    params = sum(int(v) for v in doc["params"].values())
    rows = (
        ("weights", doc["weights_bytes"], f"{params / 1e9:.2f} B params"),
        (
            "KV cache",
            doc["kv_bytes"],
            f"{doc['kv_bytes_per_token']:,.0f} B/token, "
            f"{format_bytes(doc['kv_bytes_per_sequence'])}/sequence",
        ),
        ("activations", doc["activation_bytes"], "estimate"),
        ("runtime overhead", doc["overhead_bytes"], "estimate"),
        ("total", doc["total_bytes"], ""),
    )
    for name, value, note in rows:
        parts.add_row(
            name, format_bytes(float(value)), note, style="bold" if name == "total" else ""
        )
    fits = Table(header_style="bold", title="catalog GPUs")
    for name, justify in (
        ("instance", "left"),
        ("GPUs", "left"),
        ("fits", "left"),
        ("max sequences at this context", "right"),
        ("$/h", "right"),
    ):
        fits.add_column(name, justify=justify)  # type: ignore[arg-type]
    for fit in doc["fits"]:
        needed = fit["gpus_needed"]
        verdict = f"yes, on {needed} GPU{'s' if needed > 1 else ''}" if needed else "no"
        fits.add_row(
            fit["instance"],
            f"{fit['gpus']}x {fit['accelerator']} ({format_bytes(fit['device_memory_bytes'])})",
            verdict,
            f"{fit['max_sequences']:,}",
            # memory documents stored before the rename hold price_per_hour
            money_usd(fit.get("price_usd_per_hour", fit.get("price_per_hour"))),
            style="" if needed else "dim",
        )
    notes = [Text(f"  · {a}", style="dim") for a in doc.get("assumptions", [])]
    return Group(head, parts, fits, Text("assumptions:", style="bold"), *notes)


def api_view(doc: Mapping[str, Any]) -> RenderableType:
    """API bill vs own instances, and the break-even volume."""
    table = Table(header_style="bold", title="API vs own hardware (per month)")
    table.add_column("")
    table.add_column("API", justify="right")
    table.add_column(f"own: {doc['instance']}", justify="right")
    table.add_row("tokens", f"{doc['tokens_per_month']:,.4g}", f"{doc['tokens_per_month']:,.4g}")
    table.add_row(
        "$ per million tokens",
        money_usd(doc["api_per_million"]),
        f"{money_usd(doc['own_per_million_full_use'])} at full use",
    )
    table.add_row(
        "monthly bill",
        money_usd(doc["api_monthly"]),
        f"{money_usd(doc['own_monthly'])} ({doc['own_instances']} instance(s))",
    )
    if doc.get("usd_per_million_good_output_tokens") is not None:
        table.add_row(
            "$ per million good output tokens",
            "",
            f"{money_usd(doc['usd_per_million_good_output_tokens'])} at the SLO (measured)",
        )
    even = doc.get("break_even_tokens_per_month")
    verdict = Text(
        f"cheaper: {'own hardware' if doc['cheaper'] == 'own' else 'the API'}; "
        + (
            f"break-even at {even:,.4g} tokens/month"
            if even
            else "no break-even: the API is cheaper at any volume"
        ),
        style="bold",
    )
    notes = [Text(f"  · {a}", style="dim") for a in doc.get("assumptions", [])]
    return Group(table, verdict, *notes)


def _span(value: Any, low: Any, high: Any, money: bool = False) -> str:
    """``point [low-high, 80%]`` (``—`` when there is no point)."""
    if value is None:
        return "—"
    if money:
        return f"{money_usd(value)} [{money_usd(low)}-{money_usd(high)}]"
    return f"{value:,.0f} [{low:,.0f}-{high:,.0f}, 80%]"


def llm_view(doc: Mapping[str, Any]) -> RenderableType:
    """``plan llm``: per accelerator, the degree, concurrency, TPOT, TTFT, tokens/s per device
    and $ per million output tokens, each projected with its interval."""
    head = Text.assemble(
        ("plan llm: ", "bold"),
        (str(doc["config"]), "bold cyan"),
        f" · {doc['params'] / 1e9:.1f} B params at {doc['dtype']} "
        f"({format_bytes(doc['weights_bytes'])}), KV {doc['kv_dtype']} · "
        f"{doc['input_tokens']:,.0f} in / {doc['output_tokens']:,.0f} out tokens · "
        f"SLO TTFT <= {format_seconds(doc['ttft_s'])}, TPOT <= {format_seconds(doc['tpot_s'])}",
    )
    table = Table(header_style="bold", title="LLM serving (estimate, MLPerf-calibrated)")
    for name, justify in (
        ("accelerator", "left"),
        ("TP", "right"),
        ("concurrency", "right"),
        ("TPOT", "right"),
        ("TTFT", "right"),
        ("tokens/s/device", "right"),
        ("$/M output tokens", "right"),
        ("efficiency from", "left"),
    ):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for o in doc["options"]:
        if o["tp"] is None:
            table.add_row(
                o["accelerator"], "—", "—", "—", "—", o["why"], "—", o["basis"], style="dim"
            )
            continue
        cost = _span(
            o["usd_per_million_output_tokens"],
            o["low_usd_per_million_output_tokens"],
            o["high_usd_per_million_output_tokens"],
            money=True,
        )
        near = o.get("smallest_near_tp")
        table.add_row(
            o["accelerator"],
            str(o["tp"]) if near in (None, o["tp"]) else f"{o['tp']} ({near} within 10%)",
            f"{o['concurrency']:,} ({o['limited_by']})",
            format_seconds(o["tpot_s"]),
            format_seconds(o["ttft_s"]),
            _span(
                o["tokens_per_s_per_device"],
                o["low_tokens_per_s_per_device"],
                o["high_tokens_per_s_per_device"],
            ),
            cost if o["usd_per_million_output_tokens"] is not None else "— (not in the catalog)",
            o["basis"],
        )
    notes = [Text(f"  · {a}", style="dim") for a in doc.get("assumptions", [])]
    ranking = doc.get("ranking") or ""
    decided = [Text(f"ranking: {ranking}", style="bold")] if ranking else []
    return Group(head, table, *decided, Text("assumptions:", style="bold"), *notes)


def plan_view(doc: Mapping[str, Any]) -> RenderableType:
    """Dispatch on the document's mode."""
    mode = doc.get("mode")
    if mode == "llm":
        return llm_view(doc)
    if mode == "memory":
        return memory_view(doc)
    if mode == "api":
        return api_view(doc)
    if mode == "train":
        from accelscope.commands.plan.train import TrainPlan, train_view
        from accelscope.serialise import load

        return train_view(load(TrainPlan, doc))
    return capacity_view(doc)
