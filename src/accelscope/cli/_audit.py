"""The ``audit`` command: busy vs useful GPU-hours of a fleet, idle dollars, ranked actions."""

from __future__ import annotations

import json
import os
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from accelscope.cli._app import _out, app, command_line
from accelscope.cli._flag_groups import GROUP, CatalogFlags, OutputFlags, with_flag_groups
from accelscope.cli._runs import register_show
from accelscope.cli._types import duration_option
from accelscope.errors import BadInputError

if TYPE_CHECKING:
    from accelscope.store.sqlite import RunRecord

PASSWORD_ENV = "ACCELSCOPE_PROMETHEUS_PASSWORD"
TOKEN_ENV = "ACCELSCOPE_PROMETHEUS_TOKEN"


def _moment(text: str | None) -> float | None:
    """``--until``: unix seconds or an ISO 8601 time (UTC when no zone is given)."""
    if text is None:
        return None
    try:
        return float(text)
    except ValueError:
        pass
    try:
        moment = datetime.fromisoformat(text)
    except ValueError as exc:
        raise BadInputError(
            f"--until {text!r}: give unix seconds or an ISO time, e.g. 2026-11-16T00:00"
        ) from exc
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()


def _gpus(text: str | None) -> tuple[int, ...] | None:
    """``--gpus 0,2``: NVML indices (nvidia-smi's numbering)."""
    if text is None:
        return None
    indices = []
    for part in text.split(","):
        part = part.strip()
        if not part.isdigit():
            raise BadInputError(
                f"--gpus {text!r}: give GPU indices as nvidia-smi numbers them, e.g. 0,2"
            )
        indices.append(int(part))
    return tuple(dict.fromkeys(indices))


def _prices(items: list[str]) -> tuple[tuple[str, float], ...]:
    from accelscope.plan.quantities import parse_money

    pairs = []
    for item in items:
        model, sep, price = item.rpartition("=")
        if not sep or not model.strip():
            raise BadInputError(f"--price {item!r}: give MODEL=USD_PER_GPU_HOUR, e.g. L4=0.80")
        pairs.append((model.strip(), parse_money(price, f"--price {model.strip()}")))
    return tuple(pairs)


@app.command("audit")
@with_flag_groups
def audit_command(
    export: Path | None = typer.Option(
        None, "--from", help="A Prometheus query_range answer exported to a JSON file."
    ),
    prometheus: str | None = typer.Option(
        None, "--prometheus", help="Prometheus server, e.g. http://prometheus:9090."
    ),
    sample: float | None = duration_option("--sample", "Sample this host instead, e.g. 10m."),
    gpus: str | None = typer.Option(
        None, "--gpus", metavar="LIST", help="With --sample: these GPUs only (nvidia-smi's 0,2)."
    ),
    since: float | None = duration_option("--since", "Window length, e.g. 7d (default 7d)."),
    until: str | None = typer.Option(
        None, "--until", help="Window end: ISO time or unix seconds (default: now / last sample)."
    ),
    step: float | None = duration_option("--step", "Sample step (default: 60s or the export's)."),
    price: list[str] | None = typer.Option(
        None, "--price", metavar="MODEL=USD", help="$ per GPU-hour of a GPU model, e.g. L4=0.80."
    ),
    catalog: CatalogFlags = GROUP,
    onprem: str | None = typer.Option(
        None,
        "--onprem",
        metavar="capex=USD,life=Y[,pue,kwh,ops,watts]",
        help="Price owned GPUs: capex over life + ops + measured energy x PUE x $/kWh.",
    ),
    user: str | None = typer.Option(
        None, "--prometheus-user", help=f"Basic-auth user (password in ${PASSWORD_ENV})."
    ),
    save_export: Path | None = typer.Option(
        None, "--save-export", help="Save what Prometheus answered (audit --from reads it)."
    ),
    output: OutputFlags = GROUP,
) -> None:
    """Busy vs useful GPU-hours per GPU, idle $, and actions ranked by $/month."""
    from accelscope.audit.cost import OnPremCost
    from accelscope.commands.audit.view import audit_view
    from accelscope.commands.audit.workflow import AuditRequest, audit

    request = AuditRequest(
        export=export,
        prometheus=prometheus,
        sample_s=sample,
        since_s=since,
        until_s=_moment(until),
        step_s=step,
        prices=_prices(price or []),
        catalog_files=catalog.catalog_files,
        onprem=OnPremCost.parse(onprem) if onprem else None,
        gpus=_gpus(gpus),
        user=user,
        password=os.environ.get(PASSWORD_ENV),
        token=os.environ.get(TOKEN_ENV),
        save_export=save_export,
        report_path=output.report,
    )
    outcome = audit(request, store_path=output.target, command_line=command_line())
    if output.as_json:
        document = {"run_id": outcome.run_id, "report": str(outcome.report_path or "")}
        # plain JSON: a fleet's document is large, and rich's highlighting costs seconds
        sys.stdout.write(json.dumps({**document, **outcome.document}) + "\n")
        return
    _out.print(audit_view(outcome.document))
    if outcome.report_path:
        _out.print(f"[dim]report: {outcome.report_path}[/]")
    if outcome.run_id:
        _out.print(f"stored run [bold]{outcome.run_id}[/] in {outcome.store_path}")


def _show(run: RunRecord) -> None:
    from accelscope.commands.audit.view import audit_view

    for document in run.documents_of("audit")[-1:]:
        _out.print(audit_view(document, title=f"audit {run.id}"))


register_show("audit", _show)
