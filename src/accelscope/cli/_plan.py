"""The ``plan`` command(s): capacity and cost (default), ``plan memory``, ``plan api``,
``plan llm`` and ``plan train``."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from accelscope.cli._app import _out, app, command_line, given
from accelscope.cli._flag_groups import (
    GROUP,
    CatalogFlags,
    FlagGroup,
    JsonFlags,
    OutputFlags,
    SlaFlags,
    StoreFlags,
    flag,
    stand_in,
    with_flag_groups,
)
from accelscope.cli._llm_options import InputTokensOption, OutputTokensOption, SloFlags
from accelscope.cli._runs import register_show
from accelscope.cli._types import duration_option
from accelscope.errors import BadInputError

if TYPE_CHECKING:
    from accelscope.commands.plan.workflow import PlanOutcome
    from accelscope.llm.workload import Lengths
    from accelscope.plan.energy import EnergyPrice
    from accelscope.store.sqlite import RunRecord
else:  # the llm package costs the CLI's start most of its time: see stand_in
    Lengths = stand_in("Lengths")

plan_app = typer.Typer(
    help="Right-size: instances, dollars and memory fit from what was measured.",
    invoke_without_command=True,
)
app.add_typer(plan_app, name="plan")


@dataclass(frozen=True)
class HeadroomFlags(FlagGroup):
    """``--headroom``: the spare capacity a fleet keeps (``plan``, ``plan api``)."""

    headroom: str | None = flag(
        typer.Option(None, "--headroom", help="Spare capacity kept at peak (20%).")
    )

    @property
    def fraction(self) -> float | None:
        """The headroom as a fraction, or ``None``: the request's default."""
        if self.headroom is None:
            return None
        from accelscope.plan.quantities import parse_percent

        return parse_percent(self.headroom, "--headroom")


@dataclass(frozen=True)
class AcceleratorFlags(FlagGroup):
    """``--accelerators``: the datasheets a projection covers (``plan llm``, ``plan train``)."""

    accelerators: str | None = flag(
        typer.Option(
            None,
            "--accelerators",
            help="Datasheet names or families, comma-separated (default: every GPU, TPU, NPU).",
        )
    )

    @property
    def names(self) -> tuple[str, ...]:
        """The names given, in order (empty: every GPU, TPU and NPU datasheet)."""
        if not self.accelerators:
            return ()
        return tuple(n.strip() for n in self.accelerators.split(",") if n.strip())


@dataclass(frozen=True)
class MeasuredOnFlags(FlagGroup):
    """``--measured-on``: the part a user's own measurement ran on (``plan llm``'s
    ``--from-run``, ``plan train``'s ``--measured-step``)."""

    measured_on: str | None = flag(
        typer.Option(
            None,
            "--measured-on",
            metavar="PART",
            help="The accelerator your measurement ran on (--from-run, --measured-step, "
            "--measured-run): narrows that family's interval.",
        )
    )


@dataclass(frozen=True)
class FleetFlags(FlagGroup):
    """``--fleet``: a stored audit run to buy or recover against (``plan``, ``plan train``)."""

    fleet: str | None = flag(
        typer.Option(
            None,
            "--fleet",
            metavar="AUDIT_RUN",
            help="A stored audit run (id or 'latest'): buy or recover against its idle GPUs.",
        )
    )


@dataclass(frozen=True)
class LlmRunFlags(FlagGroup):
    """``--from-run``: a stored ``llm`` run's measured goodput (``plan api``, ``plan llm``)."""

    from_run: str | None = flag(
        typer.Option(None, "--from-run", help="An llm run with --capacity: its goodput at the SLO.")
    )


@dataclass(frozen=True)
class SaveFlags(StoreFlags):
    """``--save``: an estimate is stored only when asked (``plan memory``, ``plan api``)."""

    save: bool = flag(typer.Option(False, "--save", help="Store the result as a plan run."))

    @property
    def target(self) -> Path | None:
        """Where the estimate is stored: ``None`` unless ``--save``."""
        return self.path if self.save else None


def _print(outcome: PlanOutcome, as_json: bool) -> None:
    if as_json:
        document = {
            "run_id": outcome.run_id,
            "report": str(outcome.report_path or ""),
            **outcome.document,
        }
        _out.print_json(json.dumps(document))
        return
    from accelscope.commands.plan.view import plan_view

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
    from accelscope.plan.energy import EnergyPrice
    from accelscope.plan.quantities import parse_money

    usd = parse_money(price.removesuffix("/kWh").removesuffix("/kwh"), "--energy-price")
    return EnergyPrice(usd_per_kwh=usd, pue=1.0 if pue is None else pue)


@plan_app.callback()
@with_flag_groups
def plan_command(
    ctx: typer.Context,
    model: str = typer.Option(None, "--model", help="Model whose stored measurements to use."),
    run: str = typer.Option(None, "--run", help="A stored roofline/load/bench run id."),
    traffic: str = typer.Option(
        None, "--traffic", help="peak=300qps, hourly.csv (hour,qps) or trace.csv."
    ),
    sla: SlaFlags = GROUP,
    headroom: HeadroomFlags = GROUP,
    min_instances: int | None = typer.Option(
        None, "--min-instances", help="Never fewer instances (1)."
    ),
    catalog: CatalogFlags = GROUP,
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
    audited: FleetFlags = GROUP,
    output: OutputFlags = GROUP,
) -> None:
    """Capacity at the SLA per catalog option, fleet size, $/month and $/M inferences."""
    if ctx.invoked_subcommand is not None:
        return
    if traffic is None:
        raise BadInputError("give the traffic: --traffic peak=300qps, hourly.csv or trace.csv")
    if sla.sla_p99 is None:
        raise BadInputError("give the latency SLA: --sla-p99 100ms")
    from accelscope.commands.plan.workflow import PlanRequest, parse_node_type_map, plan_capacity
    from accelscope.plan.quantities import parse_rate_per_s

    request = PlanRequest(
        traffic=traffic,
        sla_p99_s=sla.sla_p99,
        model=model,
        run_id=run,
        catalog_files=catalog.catalog_files,
        here=here,
        capacity_qps=parse_rate_per_s(capacity, "--capacity") if capacity else None,
        profile_file=profile,
        only=tuple(p.strip() for p in only.split(",") if p.strip()) if only else (),
        node_types=parse_node_type_map(node_type or ()),
        report_path=output.report,
        energy_price=_energy_price(energy_price, pue),
        fleet_run=audited.fleet,
        **given(headroom=headroom.fraction, min_instances=min_instances),
    )
    outcome = plan_capacity(
        request, store_path=output.path, save=not output.no_store, command_line=command_line()
    )
    _print(outcome, output.as_json)


@plan_app.command("memory")
@with_flag_groups
def plan_memory_command(
    config: Path = typer.Argument(..., help="A local Hugging Face config.json."),
    context: str = typer.Option("8k", "--context", help="Tokens per sequence, e.g. 32k."),
    batch: int | None = typer.Option(None, "--batch", help="Concurrent sequences (1)."),
    precision: str | None = typer.Option(
        None, "--precision", help="fp32, bf16 (default), fp16, fp8, int8, int4."
    ),
    kv_precision: str = typer.Option(None, "--kv-precision", help="KV cache dtype (= weights)."),
    catalog: CatalogFlags = GROUP,
    store: SaveFlags = GROUP,
    output: JsonFlags = GROUP,
) -> None:
    """LLM memory: weights + KV cache + activations + overhead; GPU fit and concurrency."""
    from accelscope.commands.plan.workflow import MemoryRequest, plan_memory
    from accelscope.plan.quantities import parse_tokens

    request = MemoryRequest(
        config=config,
        context_tokens=parse_tokens(context, "--context"),
        kv_precision=kv_precision.lower() if kv_precision else None,
        catalog_files=catalog.catalog_files,
        **given(batch=batch, precision=precision.lower() if precision else None),
    )
    outcome = plan_memory(request, store_path=store.target, command_line=command_line())
    _print(outcome, output.as_json)


@plan_app.command("api")
@with_flag_groups
def plan_api_command(
    tokens_per_month: str = typer.Option(..., "--tokens-per-month", help="e.g. 2B."),
    input_price: str = typer.Option(..., "--input-price", help="API $ per million input tokens."),
    output_price: str = typer.Option(..., "--output-price", help="$ per million output tokens."),
    instance: str = typer.Option(..., "--instance", help="Catalog type to run it on."),
    throughput: str | None = typer.Option(
        None, "--throughput", help="Measured tokens/s per instance (input + output)."
    ),
    measured: LlmRunFlags = GROUP,
    output_share: str | None = typer.Option(
        None, "--output-share", help="Share of output tokens (25%)."
    ),
    headroom: HeadroomFlags = GROUP,
    catalog: CatalogFlags = GROUP,
    store: SaveFlags = GROUP,
    output: JsonFlags = GROUP,
) -> None:
    """API vs own hardware: the monthly bills and the break-even volume."""
    from accelscope.commands.plan.workflow import ApiRequest, plan_api
    from accelscope.plan.quantities import parse_count, parse_money, parse_percent, parse_rate_per_s

    share = parse_percent(output_share, "--output-share", maximum=1.0) if output_share else None
    request = ApiRequest(
        tokens_per_month=parse_count(tokens_per_month, "--tokens-per-month"),
        input_price=parse_money(input_price, "--input-price"),
        output_price=parse_money(output_price, "--output-price"),
        instance=instance,
        throughput_tokens_per_s=parse_rate_per_s(throughput, "--throughput")
        if throughput is not None
        else None,
        from_run=measured.from_run,
        catalog_files=catalog.catalog_files,
        **given(output_share=share, headroom=headroom.fraction),
    )
    outcome = plan_api(
        request,
        store_path=store.target,
        command_line=command_line(),
        runs_store=store.path,
    )
    _print(outcome, output.as_json)


def _mean_tokens(lengths: Lengths | None) -> float | None:
    """A length or a range's mean (the projection is of the mean request)."""
    return None if lengths is None else (lengths.low + lengths.high) / 2


@plan_app.command("llm")
@with_flag_groups
def plan_llm_command(
    config: Path = typer.Argument(..., help="A local Hugging Face config.json."),
    dtype: str | None = typer.Option(
        None, "--dtype", help="Weights: fp32, bf16 (default), fp16, fp8, int8, int4."
    ),
    input_tokens: Lengths | None = InputTokensOption,
    output_tokens: Lengths | None = OutputTokensOption,
    slo: SloFlags = GROUP,
    accelerators: AcceleratorFlags = GROUP,
    catalog: CatalogFlags = GROUP,
    measured: LlmRunFlags = GROUP,
    part: MeasuredOnFlags = GROUP,
    run_devices: int = typer.Option(
        1, "--run-devices", help="With --from-run: the devices its server used (its TP degree)."
    ),
    store: SaveFlags = GROUP,
    output: JsonFlags = GROUP,
) -> None:
    """LLM serving projected: TP degree, concurrency, TPOT, TTFT, tokens/s and $/M tokens."""
    from accelscope.commands.plan.llm import LlmServingRequest, plan_llm

    if slo.slo_percentile is not None:
        raise BadInputError("plan llm projects mean step times: --slo-percentile does not apply")
    if slo.slo is not None and slo.slo.e2e_s is not None:
        raise BadInputError("plan llm bounds TTFT and TPOT: drop e2e= from --slo")
    if (measured.from_run is None) != (part.measured_on is None):
        raise BadInputError("--from-run and --measured-on go together: the run and its part")
    request = LlmServingRequest(
        config=config,
        accelerators=accelerators.names,
        catalog_files=catalog.catalog_files,
        from_run=measured.from_run,
        measured_on=part.measured_on,
        run_devices=run_devices,
        **given(
            dtype=dtype.lower() if dtype else None,
            input_tokens=_mean_tokens(input_tokens),
            output_tokens=_mean_tokens(output_tokens),
            ttft_s=slo.slo.ttft_s if slo.slo else None,
            tpot_s=slo.slo.tpot_s if slo.slo else None,
        ),
    )
    outcome = plan_llm(
        request, store_path=store.target, command_line=command_line(), runs_store=store.path
    )
    _print(outcome, output.as_json)


@plan_app.command("train")
@with_flag_groups
def plan_train_command(
    config: Path = typer.Argument(..., help="A local Hugging Face config.json of a decoder."),
    optimizer: str | None = typer.Option(
        None, "--optimizer", help="sgd, adamw (default), adafactor or adam8bit."
    ),
    precision: str | None = typer.Option(
        None, "--precision", help="fp32, bf16-mixed (default) or fp8."
    ),
    micro_batch: int | None = typer.Option(
        None, "--micro-batch", help="Sequences per device per step (1)."
    ),
    seq_len: str | None = typer.Option(None, "--seq-len", help="Tokens per sequence (4k)."),
    checkpointing: bool | None = typer.Option(
        None,
        "--checkpointing/--no-checkpointing",
        help="Activation checkpointing (on by default).",
    ),
    sharding: str | None = typer.Option(
        None, "--sharding", help="ddp, zero1, zero2, zero3 or fsdp (default; = zero3)."
    ),
    tp: int | None = typer.Option(None, "--tp", help="Tensor-parallel degree (1)."),
    devices: int | None = typer.Option(None, "--devices", help="Devices in the run (8)."),
    tokens: str | None = typer.Option(None, "--tokens", help="Token budget, e.g. 1B or 1e9."),
    deadline: float | None = duration_option(
        "--deadline", "e.g. 24h or 3d: the cheapest option that meets it."
    ),
    budget_usd: str | None = typer.Option(
        None, "--budget-usd", help="e.g. 5000: the fastest option within it."
    ),
    measured_step: float | None = duration_option(
        "--measured-step",
        "e.g. 2.1s: your measured step of this configuration; narrows its family's interval.",
    ),
    measured_run: str | None = typer.Option(
        None,
        "--measured-run",
        metavar="DOCTOR_RUN",
        help="A stored doctor run of this training step (id or 'latest'): its median step, on "
        "the GPU it ran on.",
    ),
    part: MeasuredOnFlags = GROUP,
    measured_devices: int | None = typer.Option(
        None,
        "--measured-devices",
        help="Devices the measured step ran on (--devices; 1 for --measured-run).",
    ),
    accelerators: AcceleratorFlags = GROUP,
    catalog: CatalogFlags = GROUP,
    audited: FleetFlags = GROUP,
    store: SaveFlags = GROUP,
    output: JsonFlags = GROUP,
) -> None:
    """Training: memory per device per sharding, fit, time and $ for a token budget."""
    from accelscope.commands.plan.train import TrainRequest, plan_train, train_view
    from accelscope.plan.quantities import parse_count, parse_money, parse_tokens
    from accelscope.serialise import dump

    request = TrainRequest(
        config=config,
        accelerators=accelerators.names,
        catalog_files=catalog.catalog_files,
        deadline_s=deadline,
        budget_usd=parse_money(budget_usd, "--budget-usd") if budget_usd is not None else None,
        fleet_run=audited.fleet,
        store_path=store.path,
        measured_step_s=measured_step,
        measured_on=part.measured_on,
        measured_devices=measured_devices,
        measured_run=measured_run,
        **given(
            optimizer=optimizer.lower() if optimizer else None,
            precision=precision.lower() if precision else None,
            micro_batch=micro_batch,
            seq_len=parse_tokens(seq_len, "--seq-len") if seq_len is not None else None,
            checkpointing=checkpointing,
            sharding=sharding.lower() if sharding else None,
            tp=tp,
            devices=devices,
            tokens=parse_count(tokens, "--tokens") if tokens is not None else None,
        ),
    )
    plan = plan_train(request)
    stored = None
    if store.save:
        from accelscope.commands.plan.train import store_train_plan

        stored = store_train_plan(plan, store.path, command_line=command_line())
    if output.as_json:
        _out.print_json(json.dumps(dump(plan)))
        return
    _out.print(train_view(plan))
    if stored:
        _out.print(f"stored run [bold]{stored}[/] in {store.path}")


def _show(run: RunRecord) -> None:
    from accelscope.commands.plan.view import plan_view

    documents = run.documents_of("plan")
    if not documents:
        _out.print("[dim]no plan document in this run[/]")
        return
    _out.print(plan_view(documents[-1]))


register_show("plan", _show)
