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
from accelscope.commands.plan.workflow import PlanOutcome, store_plan_document
from accelscope.errors import BadInputError
from accelscope.hardware.fingerprint import Environment
from accelscope.plan.accelerators import Accelerators, AcceleratorSpec, load_accelerators
from accelscope.plan.catalog import load_catalog
from accelscope.plan.llm_memory import BYTES_PER_PARAM, load_model_config, shape_from_config
from accelscope.plan.projection.llm_serving import (
    ServingSlo,
    ServingWorkload,
    served_model,
    serving_plan,
)
from accelscope.serialise import dump

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


def plan_llm(
    request: LlmServingRequest,
    *,
    store_path: Path | None = None,
    environment: Environment | None = None,
    command_line: str | None = None,
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
    plan = serving_plan(model, specs, workload, slo, catalog, config=name)
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
    }
    run = store_plan_document(store_path, name, settings, document, environment, command_line)
    return PlanOutcome(document=document, run_id=run.run_id, store_path=run.stored_path)
