"""``plan llm``: an LLM's serving projected to accelerators not at hand, at a TTFT/TPOT SLO.

The request names a local Hugging Face ``config.json``, the weights' dtype, the mean prompt and
output tokens, the SLO and the accelerators; the workflow returns the plan document
(:class:`accelscope.plan.projection.llm_serving.ServingPlan`, dumped) for
:func:`accelscope.commands.plan.view.plan_view`. It is stored, as a ``plan`` run, only when
asked (``--save``, as ``plan memory`` and ``plan api``): it is an estimate.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from accelscope.commands._lifecycle import check_paths
from accelscope.commands.plan.workflow import (
    PlanOutcome,
    llm_capacity,
    llm_tpot_points,
    store_plan_document,
)
from accelscope.errors import BadInputError
from accelscope.hardware.fingerprint import Environment
from accelscope.plan.accelerators import Accelerators, AcceleratorSpec, load_accelerators
from accelscope.plan.catalog import load_catalog
from accelscope.plan.llm_memory import BYTES_PER_PARAM, load_model_config, shape_from_config
from accelscope.plan.projection.llm_serving import (
    ServedModel,
    ServingCalibration,
    ServingRun,
    ServingSlo,
    ServingWorkload,
    served_model,
    serving_plan,
    tightened_serving,
)
from accelscope.serialise import dump
from accelscope.store.sqlite import DEFAULT_STORE_PATH

__all__ = ["LlmServingRequest", "plan_llm", "resolve_accelerators"]


@dataclass(frozen=True, kw_only=True)
class LlmServingRequest:
    """``plan llm``: the config, dtype, workload, SLO and accelerators (empty: every GPU, TPU
    and NPU datasheet)."""

    config: Path
    dtype: str = "bf16"
    input_tokens: float = 1024
    output_tokens: float = 256
    ttft_s: float = 2.0
    tpot_s: float = 0.2
    accelerators: tuple[str, ...] = ()
    catalog_files: tuple[Path, ...] = ()
    from_run: str | None = None
    """A stored ``llm`` run with a capacity search, measured on ``measured_on``: its goodput
    narrows that family's projection (the module's measure-then-tighten)."""
    measured_on: str | None = None
    run_devices: int = 1
    """The devices the measured server used (its tensor-parallel degree)."""


def resolve_accelerators(
    names: tuple[str, ...], accelerators: Accelerators
) -> list[AcceleratorSpec]:
    """The datasheets named (a part's name or a family, any case); every GPU, TPU and NPU
    datasheet when none is named; an unknown name is one line with the known ones."""
    if not names:
        return [s for s in accelerators.specs if s.kind != "cpu"]
    chosen: list[AcceleratorSpec] = []
    for name in names:
        key = name.strip().lower()
        found = [s for s in accelerators.specs if key in (s.name.lower(), s.family.lower())]
        if not found:
            known = ", ".join(s.name for s in accelerators.specs if s.kind != "cpu")
            raise BadInputError(f"--accelerators: no accelerator {name!r} (known: {known})")
        if any(s.kind == "cpu" for s in found):
            raise BadInputError(
                f"--accelerators: {name!r} is a CPU; plan llm projects GPUs, TPUs and NPUs"
            )
        chosen.extend(s for s in found if s not in chosen)
    return chosen


def _tightened(
    request: LlmServingRequest, model: ServedModel, slo: ServingSlo, runs_store: Path
) -> ServingCalibration:
    """The shipped calibration narrowed by the user's ``llm`` run on ``measured_on``: its good
    output tokens/s per device at its own workload, and its SLO where it bounds TTFT or TPOT
    (the request's otherwise)."""
    assert request.from_run is not None and request.measured_on is not None
    if request.run_devices < 1:
        raise BadInputError(f"--run-devices must be 1 or more, got {request.run_devices}")
    found = resolve_accelerators((request.measured_on,), load_accelerators())
    if len(found) != 1:
        names = ", ".join(s.name for s in found)
        raise BadInputError(f"--measured-on {request.measured_on!r} names {names}: give one part")
    measured, _ = llm_capacity(request.from_run, runs_store)
    run_slo = measured.slo
    try:
        run = ServingRun(
            run_id=request.from_run,
            spec=found[0],
            model=model,
            workload=ServingWorkload(
                measured.prompt_tokens_mean or request.input_tokens,
                measured.output_tokens_mean or request.output_tokens,
            ),
            slo=ServingSlo(
                (run_slo.ttft_s if run_slo is not None else None) or slo.ttft_s,
                (run_slo.tpot_s if run_slo is not None else None) or slo.tpot_s,
            ),
            tokens_per_s_per_device=(measured.good_output_tokens_per_s or 0.0)
            / request.run_devices,
            devices=request.run_devices,
            points=llm_tpot_points(request.from_run, runs_store),
        )
        return tightened_serving([run])
    except ValueError as exc:
        raise BadInputError(f"--from-run {request.from_run}: {exc}") from None


def plan_llm(
    request: LlmServingRequest,
    *,
    store_path: Path | None = None,
    environment: Environment | None = None,
    command_line: str | None = None,
    runs_store: Path = DEFAULT_STORE_PATH,
) -> PlanOutcome:
    """The serving projection of the request's model on each accelerator, as a document;
    stored as a ``plan`` run when ``store_path`` is given."""
    if request.dtype not in BYTES_PER_PARAM:
        raise BadInputError(
            f"--dtype {request.dtype!r} unknown; choose one of {', '.join(BYTES_PER_PARAM)}"
        )
    try:
        workload = ServingWorkload(request.input_tokens, request.output_tokens)
        slo = ServingSlo(request.ttft_s, request.tpot_s)
    except ValueError as exc:
        raise BadInputError(str(exc)) from None
    specs = resolve_accelerators(request.accelerators, load_accelerators())
    config = load_model_config(request.config)
    shape = shape_from_config(config, str(request.config))
    name = str(config.get("_name_or_path") or request.config)
    model = served_model(shape, request.dtype, name=name)
    catalog = load_catalog(request.catalog_files)
    check_paths(store_path)
    calibration = None
    if request.from_run is not None:
        calibration = _tightened(request, model, slo, runs_store)
    plan = serving_plan(model, specs, workload, slo, catalog, config=name, calibration=calibration)
    document = dump(plan)
    if store_path is None:
        return PlanOutcome(document=document)
    settings = {
        "mode": "llm",
        "dtype": request.dtype,
        "input_tokens": request.input_tokens,
        "output_tokens": request.output_tokens,
        "ttft_s": request.ttft_s,
        "tpot_s": request.tpot_s,
        "accelerators": list(request.accelerators),
        "from_run": request.from_run,
        "measured_on": request.measured_on,
    }
    run = store_plan_document(store_path, name, settings, document, environment, command_line)
    return PlanOutcome(document=document, run_id=run.run_id, store_path=run.stored_path)
