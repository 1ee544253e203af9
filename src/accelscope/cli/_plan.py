"""The ``plan`` command(s): capacity and cost (default), ``plan memory`` and ``plan api``."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from accelscope.cli._app import JsonOption, StoreOption, _out, app, command_line
from accelscope.cli._runs import register_show
from accelscope.cli._types import duration_option
from accelscope.commands.plan.view import plan_view
from accelscope.commands.plan.workflow import (
    ApiRequest,
    MemoryRequest,
    PlanOutcome,
    PlanRequest,
    parse_node_type_map,
    plan_api,
    plan_capacity,
    plan_memory,
)
from accelscope.errors import BadInputError
from accelscope.plan.energy import EnergyPrice
from accelscope.plan.quantities import (
    parse_count,
    parse_money,
    parse_percent,
    parse_rate_per_s,
    parse_tokens,
)
from accelscope.store.sqlite import DEFAULT_STORE_PATH, RunRecord

plan_app = typer.Typer(
    help="Right-size: instances, dollars and memory fit from what was measured.",
    invoke_without_command=True,
)
app.add_typer(plan_app, name="plan")

CatalogOption = typer.Option(None, "--catalog", help="Your catalog TOML (extends/overrides).")


def _print(outcome: PlanOutcome, as_json: bool) -> None:
    if as_json:
        document = {
            "run_id": outcome.run_id,
            "report": str(outcome.report_path or ""),
            **outcome.document,
        }
        _out.print_json(json.dumps(document))
        return
    _out.print(plan_view(outcome.document))
    if outcome.report_path:
        _out.print(f"[dim]report: {outcome.report_path}[/]")
    if outcome.run_id:
        _out.print(f"stored run [bold]{outcome.run_id}[/] in {outcome.store_path}")


def _energy_price(price: str | None, pue: float | None) -> EnergyPrice | None:
    """``--energy-price 0.12`` ($/kWh) with an optional ``--pue 1.4``."""
    if price is None:
        if pue is not None:
            raise BadInputError("--pue needs --energy-price (the $/kWh it scales)")
        return None
    usd = parse_money(price.removesuffix("/kWh").removesuffix("/kwh"), "--energy-price")
    return EnergyPrice(usd_per_kwh=usd, pue=1.0 if pue is None else pue)


@plan_app.callback()
def plan_command(
    ctx: typer.Context,
    model: str = typer.Option(None, "--model", help="Model whose stored measurements to use."),
    run: str = typer.Option(None, "--run", help="A stored roofline/load/bench run id."),
    traffic: str = typer.Option(
        None, "--traffic", help="peak=300qps, hourly.csv (hour,qps) or trace.csv."
    ),
    sla_p99: float | None = duration_option("--sla-p99", "p99 latency SLA, e.g. 100ms."),
    headroom: str = typer.Option(
        f"{PlanRequest.headroom:.0%}", "--headroom", help="Spare capacity at peak."
    ),
    min_instances: int = typer.Option(
        PlanRequest.min_instances, "--min-instances", help="Never fewer instances (1)."
    ),
    catalog: list[Path] = CatalogOption,
    here: str = typer.Option(None, "--here", help="Catalog type of the machine measured on."),
    capacity: str = typer.Option(
        None, "--capacity", help="Known capacity per instance of --here (e.g. 120qps)."
    ),
    profile: Path = typer.Option(None, "--profile", help="Roofline payload JSON file."),
    only: str = typer.Option(None, "--only", help="Only these catalog types, comma-separated."),
    node_type: list[str] = typer.Option(
        None,
        "--node-type",
        metavar="TYPE=NODE_TYPE",
        help="Catalog type measured by a --run's Ray node type, e.g. g6.xlarge=l4-pool.",
    ),
    energy_price: str = typer.Option(
        None, "--energy-price", metavar="USD", help="$ per kWh: price the measured energy."
    ),
    pue: float = typer.Option(
        None, "--pue", help="With --energy-price: wall / IT energy (1.0: the GPU board only)."
    ),
    report: Path = typer.Option(None, "--report", help="HTML report path."),
    store: Path = StoreOption,
    no_store: bool = typer.Option(False, "--no-store", help="Do not store the plan."),
    as_json: bool = JsonOption,
) -> None:
    """Capacity at the SLA per catalog option, fleet size, $/month and $/M inferences."""
    if ctx.invoked_subcommand is not None:
        return
    if traffic is None:
        raise BadInputError("give the traffic: --traffic peak=300qps, hourly.csv or trace.csv")
    if sla_p99 is None:
        raise BadInputError("give the latency SLA: --sla-p99 100ms")
    request = PlanRequest(
        traffic=traffic,
        sla_p99_s=sla_p99,
        model=model,
        run_id=run,
        headroom=parse_percent(headroom, "--headroom"),
        min_instances=min_instances,
        catalog_files=tuple(catalog or ()),
        here=here,
        capacity_qps=parse_rate_per_s(capacity, "--capacity") if capacity else None,
        profile_file=profile,
        only=tuple(p.strip() for p in only.split(",") if p.strip()) if only else (),
        node_types=parse_node_type_map(node_type or ()),
        report_path=report,
        energy_price=_energy_price(energy_price, pue),
    )
    store_path = store or DEFAULT_STORE_PATH
    outcome = plan_capacity(
        request, store_path=store_path, save=not no_store, command_line=command_line()
    )
    _print(outcome, as_json)


@plan_app.command("memory")
def plan_memory_command(
    config: Path = typer.Argument(..., help="A local Hugging Face config.json."),
    context: str = typer.Option("8k", "--context", help="Tokens per sequence, e.g. 32k."),
    batch: int = typer.Option(MemoryRequest.batch, "--batch", help="Concurrent sequences."),
    precision: str = typer.Option(
        MemoryRequest.precision, "--precision", help="fp32, bf16, fp16, fp8, int8, int4."
    ),
    kv_precision: str = typer.Option(None, "--kv-precision", help="KV cache dtype (= weights)."),
    catalog: list[Path] = CatalogOption,
    store: Path = StoreOption,
    save: bool = typer.Option(False, "--save", help="Store the estimate as a plan run."),
    as_json: bool = JsonOption,
) -> None:
    """LLM memory: weights + KV cache + activations + overhead; GPU fit and concurrency."""
    request = MemoryRequest(
        config=config,
        context_tokens=parse_tokens(context, "--context"),
        batch=batch,
        precision=precision.lower(),
        kv_precision=kv_precision.lower() if kv_precision else None,
        catalog_files=tuple(catalog or ()),
    )
    outcome = plan_memory(
        request,
        store_path=(store or DEFAULT_STORE_PATH) if save else None,
        command_line=command_line(),
    )
    _print(outcome, as_json)


@plan_app.command("api")
def plan_api_command(
    tokens_per_month: str = typer.Option(..., "--tokens-per-month", help="e.g. 2B."),
    input_price: str = typer.Option(..., "--input-price", help="API $ per million input tokens."),
    output_price: str = typer.Option(..., "--output-price", help="$ per million output tokens."),
    instance: str = typer.Option(..., "--instance", help="Catalog type to run it on."),
    throughput: str | None = typer.Option(
        None, "--throughput", help="Measured tokens/s per instance (input + output)."
    ),
    from_run: str | None = typer.Option(
        None, "--from-run", help="An llm run with --capacity: its goodput at the SLO."
    ),
    output_share: str = typer.Option(
        f"{ApiRequest.output_share:.0%}", "--output-share", help="Share of output tokens."
    ),
    headroom: str = typer.Option(
        f"{ApiRequest.headroom:.0%}", "--headroom", help="Spare capacity."
    ),
    catalog: list[Path] = CatalogOption,
    store: Path = StoreOption,
    save: bool = typer.Option(False, "--save", help="Store the comparison as a plan run."),
    as_json: bool = JsonOption,
) -> None:
    """API vs own hardware: the monthly bills and the break-even volume."""
    request = ApiRequest(
        tokens_per_month=parse_count(tokens_per_month, "--tokens-per-month"),
        input_price=parse_money(input_price, "--input-price"),
        output_price=parse_money(output_price, "--output-price"),
        instance=instance,
        throughput_tokens_per_s=parse_rate_per_s(throughput, "--throughput")
        if throughput is not None
        else None,
        from_run=from_run,
        output_share=parse_percent(output_share, "--output-share", maximum=1.0),
        headroom=parse_percent(headroom, "--headroom"),
        catalog_files=tuple(catalog or ()),
    )
    outcome = plan_api(
        request,
        store_path=(store or DEFAULT_STORE_PATH) if save else None,
        command_line=command_line(),
        runs_store=store or DEFAULT_STORE_PATH,
    )
    _print(outcome, as_json)


def _show(run: RunRecord) -> None:
    documents = run.documents_of("plan")
    if not documents:
        _out.print("[dim]no plan document in this run[/]")
        return
    _out.print(plan_view(documents[-1]))


register_show("plan", _show)
