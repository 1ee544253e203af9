"""What-ifs: the catalogue of single changes, which ones to run, and how to compare them.

``--what-if`` takes ``all``, ``auto`` (the ones the fired findings point to), ``none``, or a
comma-separated list of ``NAME[=VALUE]``: ``workers[=N]``, ``pin_memory``, ``persistent``,
``prefetch[=N]``, ``bf16``, ``fp16``, ``compile``, ``batch[=K]``, ``cache``, ``threads[=N]``.
Each is turned into an injection spec (:mod:`.inject`) from what the baseline run recorded;
one that cannot apply (no DataLoader to change, no CUDA to pin for) is skipped with the reason.

Results are compared on items/s (so ``batch=K`` is not flattered by fewer, bigger steps) as a
ratio of medians, with bounds from the medians' 95 % intervals.

In a training loop (``backward()`` and ``optimizer.step()`` seen) two what-ifs also answer
for more than speed (:mod:`.train_whatif`): ``batch`` is sized to the memory estimated from the
measured peak (a smaller factor that fits, else gradient accumulation, estimated from the
measured phases), and ``fp16`` runs with a GradScaler; ``bf16``/``fp16`` runs are compared
with the re-measured fp32 baseline's loss over the same measured steps, from the same seed,
and one whose loss diverges is not recommended.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from accelscope.doctor.breakdown import Rate
from accelscope.doctor.findings import RuleContext
from accelscope.doctor.inprocess.inject import describe
from accelscope.doctor.train_whatif import (
    LossComparison,
    accumulation_speedup,
    batch_memory,
    is_training,
)
from accelscope.errors import BadInputError
from accelscope.measurement.stats import ratio_from_intervals
from accelscope.serialise import FiniteOrNull
from accelscope.spec import Device, Precision

__all__ = [
    "NAMES",
    "PlannedWhatIf",
    "WhatIfResult",
    "caveat_for",
    "loss_caveat",
    "pair_variants",
    "parse_what_ifs",
    "plan_what_ifs",
    "recommend",
    "speedup",
]

NAMES: dict[str, str] = {
    "workers": "DataLoader num_workers (default: one per core, or double the current)",
    "pin_memory": "DataLoader pin_memory=True (CUDA only)",
    "persistent": "DataLoader persistent_workers=True (needs workers)",
    "prefetch": "DataLoader prefetch_factor (default 4; needs workers)",
    "bf16": "torch.autocast bf16 around the model's forward",
    "fp16": "torch.autocast fp16 around the model's forward",
    "compile": "torch.compile of the model",
    "batch": "batch size x K (default 4), compared as items/s",
    "cache": "dataset samples cached in memory before the timed steps",
    "threads": "torch intra-op threads (default: cores minus the workers' measured busy cores)",
}
_VALUED = {"workers", "prefetch", "batch", "threads"}
_CHANGES_RESULTS = {
    "bf16": "changes numerics: check accuracy",
    "fp16": "changes numerics: check accuracy (and use a GradScaler)",
    "batch": "changes the batch size the script was written for",
}


def parse_what_ifs(text: str) -> tuple[str, tuple[tuple[str, int | None], ...]]:
    """``"auto"`` -> ``("auto", ())``; ``"workers=4,bf16"`` -> ``("list", (...))``."""
    value = text.strip().lower()
    if value in ("all", "auto", "none"):
        return value, ()
    chosen: list[tuple[str, int | None]] = []
    for part in (p.strip() for p in value.split(",")):
        if not part:
            continue
        name, _, raw = part.partition("=")
        name = name.strip()
        if name not in NAMES:
            raise BadInputError(
                f"unknown what-if {name!r}; choose all, auto, none or a list of: {', '.join(NAMES)}"
            )
        number: int | None = None
        if raw:
            if name not in _VALUED:
                raise BadInputError(f"what-if {name!r} takes no value (got {part!r})")
            if not raw.strip().isdigit() or int(raw) <= 0:
                raise BadInputError(f"what-if {name} needs a positive integer, got {raw!r}")
            number = int(raw)
        chosen.append((name, number))
    if not chosen:
        raise BadInputError("--what-if is empty; use all, auto, none or a list like workers,bf16")
    return "list", tuple(chosen)


@dataclass(frozen=True)
class PlannedWhatIf:
    """A what-if ready to run (``spec`` set) or skipped (``reason`` set)."""

    name: str
    label: str
    spec: dict[str, Any] | None
    reason: str = ""
    notes: tuple[str, ...] = ()


def _plan_one(name: str, value: int | None, ctx: RuleContext, explicit: bool) -> PlannedWhatIf:
    facts = ctx.profile.facts
    loaders = facts.loaders if facts is not None else ()
    loader = loaders[0] if loaders else None
    main = facts.main_model if facts is not None else {}

    def skip(reason: str) -> PlannedWhatIf:
        return PlannedWhatIf(name, name, None, reason)

    def plan(spec: dict[str, Any], *notes: str) -> PlannedWhatIf:
        return PlannedWhatIf(name, describe(spec), spec, notes=notes)

    if name in ("workers", "pin_memory", "persistent", "prefetch", "cache") and loader is None:
        return skip("the script builds no DataLoader")
    if name == "workers":
        assert loader is not None
        workers = value or (ctx.cores if loader.num_workers == 0 else 2 * loader.num_workers)
        if workers == loader.num_workers:
            return skip(f"the DataLoader already has {workers} workers")
        return plan({"kind": "dataloader", "set": {"num_workers": workers}})
    if name == "pin_memory":
        assert loader is not None
        if ctx.device != "cuda":
            return skip("not applicable: no CUDA device (pinning only speeds host->GPU copies)")
        if loader.pin_memory:
            return skip("pin_memory is already on")
        return plan({"kind": "dataloader", "set": {"pin_memory": True}})
    if name in ("persistent", "prefetch"):
        assert loader is not None
        if loader.num_workers == 0:
            return skip(f"{name} needs DataLoader workers (num_workers=0)")
        if name == "persistent":
            if loader.persistent_workers:
                return skip("persistent_workers is already on")
            return plan({"kind": "dataloader", "set": {"persistent_workers": True}})
        factor = value or 4
        return plan({"kind": "dataloader", "set": {"prefetch_factor": factor}})
    if name in ("bf16", "fp16"):
        if not main:
            return skip("no model forward was seen")
        device = Device.CUDA if ctx.device == "cuda" else Device.CPU
        precision = Precision(name)
        support = next(
            (s for s in ctx.support if s.device is device and s.precision is precision), None
        )
        if support is not None and not support.fast and not explicit:
            return skip(f"no {name} fast path: {support.reason}")
        if facts is not None and facts.autocast:
            return skip(f"autocast is already on ({facts.autocast})")
        dtype = "bfloat16" if name == "bf16" else "float16"
        if not is_training(ctx):
            return plan({"kind": "autocast", "dtype": dtype})
        if name == "bf16":  # bf16 keeps fp32's exponent range: gradients do not underflow
            return plan({"kind": "autocast", "dtype": dtype}, "training: no GradScaler (bf16)")
        return plan({"kind": "autocast", "dtype": dtype, "grad_scaler": True})
    if name == "compile":
        if not main:
            return skip("no model forward was seen")
        if main.get("compiled"):
            return skip("the model is already compiled")
        return plan({"kind": "compile"})
    if name == "batch":
        return _plan_batch(value or 4, ctx, plan, skip)
    if name == "cache":
        assert loader is not None
        if loader.iterable:
            return skip("the dataset is iterable-style (no indexing to cache)")
        return plan({"kind": "cache"})
    if name == "threads":
        threads = value or ctx.threads_to_try()[0]
        if facts is not None and threads == facts.torch_threads:
            return skip(f"torch already uses {threads} threads")
        return plan({"kind": "threads", "threads": threads})
    raise BadInputError(f"unknown what-if {name!r}")  # pragma: no cover - parse rejects it


def _plan_batch(
    factor: int,
    ctx: RuleContext,
    plan: Callable[..., PlannedWhatIf],
    skip: Callable[[str], PlannedWhatIf],
) -> PlannedWhatIf:
    """``batch`` x ``factor``; in a training loop sized to the estimated memory: the largest
    factor up to ``factor`` that fits, else gradient accumulation (not run: estimated)."""
    if not is_training(ctx):
        return plan({"kind": "batch", "factor": factor})
    memory, why = batch_memory(ctx, factor)
    if memory is None:
        return plan({"kind": "batch", "factor": factor}, f"memory at x{factor} {why}")
    if memory.fits:
        return plan({"kind": "batch", "factor": factor}, f"memory {memory.sentence()}")
    largest = memory.largest_factor()
    if largest >= 2:
        return plan(
            {"kind": "batch", "factor": largest},
            f"memory {memory.sentence()}: too much; x{largest} is the largest that fits",
        )
    gain = accumulation_speedup(ctx, factor)
    return skip(
        f"a larger micro-batch would not fit: {memory.sentence()}; gradient accumulation over "
        f"{factor} micro-batches gives the same samples per optimizer step at today's memory: "
        f"~{gain:.2f}x samples/s, estimated from the measured phases (the optimizer step paid "
        f"once per {factor}), not measured"
    )


def plan_what_ifs(
    mode: str,
    chosen: tuple[tuple[str, int | None], ...],
    ctx: RuleContext,
    pointed: tuple[str, ...],
) -> list[PlannedWhatIf]:
    """The what-ifs to run for ``mode`` (``pointed``: what the fired findings suggest)."""
    if mode == "none":
        return []
    if mode == "all":
        items: list[tuple[str, int | None]] = [(n, None) for n in NAMES]
    elif mode == "auto":
        items = []
        for text in dict.fromkeys(pointed):  # a finding may suggest a value: "threads=1"
            name, _, value = text.partition("=")
            items.append((name, int(value) if value.isdigit() else None))
    else:
        items = list(chosen)
    planned: list[PlannedWhatIf] = []
    facts = ctx.profile.facts
    convs = bool(facts is not None and facts.main_model.get("conv2d"))
    for what, number in items:
        one = _plan_one(what, number, ctx, explicit=mode == "list")
        planned.append(one)
        if convs and one.spec is not None and one.spec.get("kind") == "autocast":
            # 4-D convolutions in bf16/fp16 need channels-last to be fast: measure both
            spec = {**one.spec, "channels_last": True}
            planned.append(PlannedWhatIf(what, describe(spec), spec))
    return planned


def pair_variants(results: list[WhatIfResult]) -> list[WhatIfResult]:
    """Where one what-if was measured in several variants (bf16 and bf16 + channels_last),
    each says what the other measured, and the better one is marked as the what-if's figure."""
    out = list(results)
    groups: dict[str, list[int]] = {}
    for i, r in enumerate(out):
        if r.status == "ok" and r.speedup is not None and r.name != "baseline":
            groups.setdefault(r.name, []).append(i)
    for indices in groups.values():
        if len(indices) < 2:
            continue
        best = max(indices, key=lambda i: out[i].speedup or 0.0)
        for i in indices:
            others = "; ".join(
                f"also measured: {out[j].label} {out[j].speedup:.2f}x" for j in indices if j != i
            )
            mark = "the better variant: this is the figure" if i == best else "not the figure"
            r = out[i]
            out[i] = WhatIfResult(
                **{
                    **r.__dict__,
                    "notes": (*r.notes, f"{others} ({mark})"),
                    "details": {**r.details, "figure": i == best},
                }
            )
    return out


def speedup(base: Rate, other: Rate) -> tuple[float, float, float]:
    """Ratio of medians and its bounds from the two 95 % intervals
    (:func:`accelscope.measurement.stats.ratio_from_intervals`)."""
    return ratio_from_intervals(
        (base.median, base.low, base.high), (other.median, other.low, other.high)
    )


@dataclass(frozen=True, kw_only=True)
class WhatIfResult:
    """One measured (or failed, or skipped) what-if.

    ``status``: ``ok``, ``failed`` (the run broke; ``reason`` says how), ``not applied`` (the
    run found nothing to change) or ``skipped`` (not run; ``reason``). Speedups are items/s
    relative to the re-measured baseline.
    """

    name: str
    label: str
    status: str
    reason: str = ""
    notes: tuple[str, ...] = ()
    steps: int = 0
    steps_per_s: Rate | None = None
    items_per_s: Rate | None = None
    items_per_step: float = 0.0
    speedup: FiniteOrNull | None = None
    speedup_low: FiniteOrNull | None = None
    speedup_high: FiniteOrNull | None = None
    caveat: str = ""
    details: dict[str, Any] = field(default_factory=dict)
    loss_gap: FiniteOrNull | None = None
    """Training runs of ``bf16``/``fp16``: the relative loss gap to the fp32 baseline over the
    same measured steps (:mod:`.train_whatif`); ``None``: not compared (stored ``null`` when
    infinite: the loss became non-finite, and ``caveat`` says so)."""


def caveat_for(name: str, details: dict[str, Any]) -> str:
    """What a what-if changes besides speed ("" when it changes nothing else)."""
    if name == "cache" and details.get("deterministic") is False:
        return "changes results: freezes random augmentation in __getitem__"
    return _CHANGES_RESULTS.get(name, "")


def loss_caveat(name: str, comparison: LossComparison | None) -> str:
    """The caveat of a training what-if whose loss was compared: a diverging recipe
    "changes results" (so :func:`recommend` passes it over), one within the bound says so."""
    if comparison is None:
        return caveat_for(name, {})
    if comparison.diverging:
        return f"changes results: {comparison.sentence()}"
    return f"changes numerics: {comparison.sentence()}"


def recommend(results: list[WhatIfResult]) -> tuple[str | None, str]:
    """The measured best what-if and the sentence saying so.

    Eligible: measured, its speedup's lower bound above 1 (a real gain, not noise), and not
    one that changes the script's results (a cache that freezes random augmentation).
    """
    eligible = [
        r
        for r in results
        if r.status == "ok"
        and r.name != "baseline"
        and r.speedup is not None
        and (r.speedup_low or 0.0) > 1.0
        and not r.caveat.startswith("changes results")
    ]
    measured = [r for r in results if r.status == "ok" and r.name != "baseline"]
    if not eligible:
        if not measured:
            return None, "no what-if was measured"
        return None, "no what-if measurably beat the baseline (every gain was within the noise)"
    best = max(eligible, key=lambda r: r.speedup or 0.0)
    low, high = best.speedup_low or 0.0, best.speedup_high
    bounds = f"{low:.2f}-{high:.2f}x" if high is not None else f">= {low:.2f}x"
    extra = f"; {best.caveat}" if best.caveat else ""
    return best.name, (
        f"measured best: {best.label}: {best.speedup:.2f}x items/s vs the baseline "
        f"(95 % bounds {bounds}){extra}"
    )
