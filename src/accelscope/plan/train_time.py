"""Training time and cost projected to accelerators not at hand: FLOPs per token over peak x
MFU, the MFU learned from MLPerf Training's published time-to-train, with an 80 % interval.

**FLOPs per token.** ``N`` is the weights a token multiplies: every linear layer of the
decoder and the output projection (not the embedding lookup, not the norms). For a sequence of
``S`` tokens, ``L`` layers of ``n`` heads of width ``d``, full training costs, per token::

    6 N + 12 L n d S

PaLM's accounting (Chowdhery et al. 2022, "PaLM", appendix B: ``6N + 12LHQT``): the forward
multiplies each weight once (``2N``), the backward twice (the input's gradient and the weight's,
``4N``; Kaplan et al. 2020, section 2.1); attention's ``Q K^T`` and ``P V`` are ``4 n d S`` a
layer forward, twice that backward. The causal mask is not halved (the convention MFU is
quoted in; the fitted MFU absorbs it). LoRA as MLPerf's ``llama2_70b_lora`` runs it (NeMo,
``adapter_dim`` 16 on the attention's fused QKV and output projections,
``mlcommons/training_results_v4.0@62f111b7`` ``NVIDIA/benchmarks/llama2_70b_lora/implementations/
nemo/conf/megatron_gpt_peft_tuning_config.yaml``) skips the frozen weights' gradients::

    4 N + 12 L n d S + 6 N_lora

(the backward still carries every input's gradient down to the first adapter).

**The MFU.** Each published row of a decoder benchmark (``gpt3``: GPT-3 175B from a checkpoint,
2048 tokens a sequence; ``llama2_70b_lora``: 8192-token packed sequences; ``llama31_405b``: 8192)
gives the work of its runs, tokens consumed to the target x FLOPs per token, over accelerators x
peak x wall-clock minutes (``run_start`` to ``run_stop``, evaluation included)::

    MFU = sum(tokens_i) x F / (count x peak x sum(minutes_i) x 60)

Tokens: ``samples_at_stop`` x the sequence length (llama), ``gpt3``'s last ``train_samples``
(a token count: 1,207,959,552 = 288 steps of 2048 x 2048). The peak is the datasheet's
fastest dense 8-bit rate (fp8 or int8), else bf16: NVIDIA's submissions set ``FP8=True`` (e.g.
``config_DGXH100_1x8x4xtp4pp1cp1.sh`` in the same commit), Google's GPT-3 on TPU v5p trains
with ``quantization=int8`` (``AI-Hypercomputer/maxtext@e1fde457``
``MaxText/configs/v5p/gpt3_175b/gpt3_175b_base.sh``, "the shared config between Google's
various MLPerf 4.0 submissions"); **assumed** for AMD, Intel and TPU
Trillium, whose configs were not read. A row whose part has no datasheet here (GB200) is
left out and says so.

``log MFU`` is fitted by the mixed model every projection uses
(:func:`accelscope.plan.projection.efficiency.fit`): group = recipe (full, LoRA), random family
effects, quantile-matched residual spread; a Student-t 80 % interval, wider for a family with
no row. A projection of a full training run predicts the ``full`` group for the part's family.
The user's precision sets the peak it is applied to (bf16 mixed: the bf16 peak; fp8: the fp8
peak): an MFU measured at 8 bits applied to the bf16 peak **assumes** the share of peak carries
over (8-bit runs pay casts and scaling that bf16 does not, so a bf16 projection leans long).

**Time** for ``T`` tokens on ``D`` devices: ``T x F / (D x peak x MFU)``, the interval from the
MFU's (slow end from the low MFU). Linear in ``D``: the spread across the table's counts (4 to
11,616) is in the interval, not in a scaling law.
"""

from __future__ import annotations

import functools
import math
import statistics
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from accelscope.errors import BadInputError
from accelscope.plan.accelerators import Accelerators, AcceleratorSpec, load_accelerators
from accelscope.plan.llm_memory import ModelShape
from accelscope.plan.projection.efficiency import EfficiencyModel, Measured, Observation, fit
from accelscope.plan.projection.llm_serving import llama2_70b_shape
from accelscope.plan.projection.tighten import RUN_TO_RUN_LOG_SD, Tightened, stand_in
from accelscope.plan.projection.validation import COVERAGE, Holdout
from accelscope.validation import PositiveCount, PositiveNumber, Text, validate

__all__ = [
    "LORA_RANK",
    "MLPERF_MODELS",
    "MeasuredStep",
    "MlperfModel",
    "Recipe",
    "TrainCalibration",
    "TrainTime",
    "TrainingResult",
    "TrainingRow",
    "calibrate_training",
    "flops_per_token",
    "forward_check",
    "leave_one_out",
    "load_published_training",
    "lora_params",
    "matmul_params",
    "project_train_time",
    "shipped_training_calibration",
    "tighten_training_leave_one_out",
    "tightened_training",
    "training_rows",
]

Recipe = Literal["full", "lora"]
LORA_RANK = 16
"""MLPerf ``llama2_70b_lora``'s ``adapter_dim`` (NeMo config, module docstring)."""
_SHIPPED = "published_training.toml"
_CLASS = "train"


def _positive(name: str, value: float) -> None:
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be finite and > 0, got {value}")


def matmul_params(shape: ModelShape) -> int:
    """Weights one token multiplies: every layer's linears and the output projection (tied
    or not: the product is made either way); not the embedding lookup nor the norms."""
    if shape.experts or shape.mla:
        raise ValueError(f"FLOPs are modelled for dense decoders; {shape.model_type!r} is not")
    return shape.layers * (shape.attention_params() + shape.mlp_params(shape.intermediate)) + (
        shape.vocab * shape.hidden
    )


def lora_params(shape: ModelShape, rank: int = LORA_RANK) -> int:
    """Adapter weights of rank ``rank`` on each layer's fused QKV (``h -> (n + 2k) d``) and
    output projection (``n d -> h``): ``rank x (in + out)`` each."""
    if rank < 1:
        raise ValueError(f"LoRA rank must be >= 1, got {rank}")
    h, d = shape.hidden, shape.head_dim
    qkv = h + (shape.heads + 2 * shape.kv_heads) * d
    out = shape.heads * d + h
    return shape.layers * rank * (qkv + out)


def flops_per_token(
    shape: ModelShape, seq_len: int, recipe: Recipe = "full", lora_rank: int = LORA_RANK
) -> float:
    """Training FLOPs per token at sequence length ``seq_len`` (module docstring): full
    ``6N + 12 L n d S``; LoRA ``4N + 12 L n d S + 6 N_lora``."""
    if isinstance(seq_len, bool) or not isinstance(seq_len, int) or seq_len < 1:
        raise ValueError(f"seq_len must be an integer >= 1, got {seq_len!r}")
    n = matmul_params(shape)
    attention = 12.0 * shape.layers * shape.heads * shape.head_dim * seq_len
    if recipe == "full":
        return 6.0 * n + attention
    if recipe == "lora":
        return 4.0 * n + attention + 6.0 * lora_params(shape, lora_rank)
    raise ValueError(f"recipe {recipe!r} unknown; choose full or lora")


@dataclass(frozen=True, kw_only=True)
class MlperfModel:
    """An MLPerf Training decoder benchmark: the model, its sequence, how its tokens are read."""

    benchmark: str
    shape: ModelShape
    seq_len: int
    recipe: Recipe
    source: str

    @property
    def flops_per_token(self) -> float:
        return flops_per_token(self.shape, self.seq_len, self.recipe)


def _llama31(hidden: int, layers: int, heads: int, intermediate: int) -> ModelShape:
    return ModelShape(
        model_type="llama",
        hidden=hidden,
        layers=layers,
        heads=heads,
        kv_heads=8,
        head_dim=128,
        intermediate=intermediate,
        vocab=128256,
        tied_embeddings=False,
        gated_mlp=True,
    )


MLPERF_MODELS: Mapping[str, MlperfModel] = {
    "gpt3": MlperfModel(
        benchmark="gpt3",
        shape=ModelShape(
            model_type="gpt3",
            hidden=12288,
            layers=96,
            heads=96,
            kv_heads=96,
            head_dim=128,
            intermediate=4 * 12288,
            vocab=50257,
            tied_embeddings=True,
            gated_mlp=False,
        ),
        seq_len=2048,
        recipe="full",
        source="GPT-3 175B (Brown et al. 2020, table 2.1: 96 layers, d_model 12288, 96 heads "
        "of 128); vocabulary 50257 (the output projection is 0.4 % of the FLOPs); sequence "
        "2048 as the logs' max_sequence_length",
    ),
    "llama2_70b_lora": MlperfModel(
        benchmark="llama2_70b_lora",
        shape=llama2_70b_shape(),
        seq_len=8192,
        recipe="lora",
        source="Llama-2-70B's config; GovReport 'tokenized and packed so that each sequence "
        "has length 8192' (training_results_v5.1 llama2_70b_lora READMEs; NeMo "
        "max_seq_length 8192); LoRA rank 16 on QKV and the output projection",
    ),
    "llama31_405b": MlperfModel(
        benchmark="llama31_405b",
        shape=_llama31(16384, 126, 128, 53248),
        seq_len=8192,
        recipe="full",
        source="Llama-3.1-405B (Llama 3 paper, table 3: 126 layers, 16384 wide, 128 heads, "
        "8 KV heads, FFN 53248, vocabulary 128256); sequence 8192 as logged",
    ),
    "llama31_8b": MlperfModel(
        benchmark="llama31_8b",
        shape=_llama31(4096, 32, 32, 14336),
        seq_len=8192,
        recipe="full",
        source="Llama-3.1-8B's config (examples/llama-3.1-8b-config.json); sequence 8192 as "
        "logged (v5.1 only: the forward check)",
    ),
}
"""The decoder benchmarks whose rows calibrate the MFU (``llama31_8b`` is v5.1 only)."""


class TrainingResult(BaseModel):
    """One published MLPerf Training row (the fields the projection reads; the file's header
    documents every field)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    round: Text
    submitter: Text
    system: Text
    family: Text
    accelerator: Text
    accelerator_count: PositiveCount
    benchmark: Text
    runs_minutes: tuple[PositiveNumber, ...]
    runs_converged: tuple[bool, ...] | None = None
    samples_at_stop: tuple[PositiveCount, ...] | None = None
    train_samples_logged_at_end: tuple[PositiveCount, ...] | None = None
    max_sequence_length: PositiveCount | None = None
    repo: Text
    commit: Text

    @property
    def key(self) -> str:
        return f"{self.round} {self.submitter}/{self.system} {self.benchmark}"

    @property
    def system_key(self) -> tuple[str, str, str]:
        """Round, submitter, system: the rows left out together."""
        return (self.round, self.submitter, self.system)


def load_published_training(path: Path | None = None) -> tuple[TrainingResult, ...]:
    """The shipped table (v4.0-v5.0), or a file of the same schema (the v5.1 held-out one)."""
    if path is None:
        text = resources.files("accelscope.plan").joinpath("data", _SHIPPED).read_text("utf-8")
        origin = f"(shipped) {_SHIPPED}"
    else:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise BadInputError(f"published training table {path}: cannot read: {exc}") from None
        origin = str(path)
    try:
        data: Mapping[str, Any] = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise BadInputError(f"published training table {origin}: not valid TOML: {exc}") from None
    tables = data.get("result")
    if not isinstance(tables, list) or not tables:
        raise BadInputError(f"published training table {origin}: no [[result]] tables")
    return tuple(
        validate(TrainingResult, t, f"published training table {origin}: row {i + 1}")
        for i, t in enumerate(tables)
    )


@dataclass(frozen=True, kw_only=True)
class TrainingRow:
    """One published row with its datasheet, the dtype its peak is read at, and its MFU."""

    result: TrainingResult
    spec: AcceleratorSpec
    model: MlperfModel
    dtype: str
    peak_flops_per_s: float
    tokens: float
    """Mean tokens consumed to the target over the converged runs."""
    minutes: float
    """Mean wall-clock minutes of the converged runs (not the RCP-scaled score)."""
    mfu: float

    def __post_init__(self) -> None:
        for name in ("peak_flops_per_s", "tokens", "minutes"):
            _positive(name, getattr(self, name))
        if not 0 < self.mfu < 1:
            raise ValueError(f"{self.result.key}: MFU {self.mfu:.3f} is outside (0, 1)")

    @property
    def observation(self) -> Observation:
        return Observation(self.model.recipe, self.result.family, _CLASS, math.log(self.mfu))

    def minutes_at(self, mfu: float) -> float:
        """This row's mean minutes projected at ``mfu``."""
        work = self.tokens * self.model.flops_per_token
        return work / (self.result.accelerator_count * self.peak_flops_per_s * mfu) / 60


def _tokens(result: TrainingResult, model: MlperfModel) -> tuple[float, ...] | None:
    if result.samples_at_stop:
        return tuple(float(s * model.seq_len) for s in result.samples_at_stop)
    if result.train_samples_logged_at_end:
        return tuple(float(t) for t in result.train_samples_logged_at_end)
    return None


def _reference_dtype(spec: AcceleratorSpec) -> str | None:
    """The part's fastest 8-bit rate (fp8 or int8), else bf16 (module docstring)."""
    eight = [d for d in ("fp8", "int8") if spec.peak(d) is not None]
    if eight:
        return max(eight, key=lambda d: spec.peak(d) or 0.0)
    return "bf16" if spec.peak("bf16") is not None else None


def training_rows(
    results: Sequence[TrainingResult], accelerators: Accelerators
) -> tuple[list[TrainingRow], list[tuple[TrainingResult, str]]]:
    """Each decoder row with its MFU, and the rows left out with why."""
    rows: list[TrainingRow] = []
    left_out: list[tuple[TrainingResult, str]] = []
    for result in results:
        model = MLPERF_MODELS.get(result.benchmark)
        if model is None:
            left_out.append((result, f"{result.benchmark} is not a decoder benchmark"))
            continue
        parts = accelerators.of_family(result.family)
        sxm = [p for p in parts if "SXM" in p.name.upper()]
        spec = (sxm or list(parts))[0] if len(sxm) == 1 or len(parts) == 1 else None
        if spec is None:
            left_out.append((result, f"no datasheet for {result.family} here"))
            continue
        dtype = _reference_dtype(spec)
        tokens = _tokens(result, model)
        if dtype is None or tokens is None:
            left_out.append((result, "no fp8/bf16 peak or no token count logged"))
            continue
        converged = result.runs_converged or (True,) * len(result.runs_minutes)
        if len(tokens) != len(result.runs_minutes) or len(converged) != len(tokens):
            left_out.append((result, "runs, tokens and convergence flags do not pair up"))
            continue
        kept = [
            (t, m) for t, m, ok in zip(tokens, result.runs_minutes, converged, strict=True) if ok
        ]
        peak = spec.peak(dtype)
        assert peak is not None  # _reference_dtype chose a dtype with a peak
        work = math.fsum(t for t, _ in kept) * model.flops_per_token
        seconds = math.fsum(m for _, m in kept) * 60
        mfu = work / (result.accelerator_count * peak * seconds)
        rows.append(
            TrainingRow(
                result=result,
                spec=spec,
                model=model,
                dtype=dtype,
                peak_flops_per_s=peak,
                tokens=statistics.fmean(t for t, _ in kept),
                minutes=statistics.fmean(m for _, m in kept),
                mfu=mfu,
            )
        )
    return rows, left_out


@dataclass(frozen=True)
class TrainCalibration:
    """The rows, those left out (with why), the fitted MFU model, and the user's measured steps
    it was updated with (:func:`tightened_training`)."""

    rows: tuple[TrainingRow, ...]
    left_out: tuple[tuple[TrainingResult, str], ...]
    model: EfficiencyModel
    measured: tuple[MeasuredStep, ...] = ()

    def rows_of(self, family: str) -> int:
        """Published rows of ``family``."""
        return sum(r.result.family == family for r in self.rows)

    def measured_of(self, family: str) -> tuple[MeasuredStep, ...]:
        """The user's measured steps on a part of ``family``."""
        return tuple(m for m in self.measured if m.spec.family == family)


@dataclass(frozen=True, kw_only=True)
class MeasuredStep:
    """The user's own measured training step, set on the MFU model's scale: ``tokens_per_step``
    x FLOPs per token over (``devices`` x the part's ``dtype`` peak x ``step_s``), the peak the
    projection applies the MFU to. It enters the model as one more row of the part's family
    (:meth:`~accelscope.plan.projection.efficiency.EfficiencyModel.updated`), its own variance
    the run-to-run spread of a measurement (:data:`~.tighten.RUN_TO_RUN_LOG_SD`) on top of the
    spread between systems: the user's stack is another system."""

    spec: AcceleratorSpec
    dtype: str
    devices: int
    tokens_per_step: float
    flops_per_token: float
    step_s: float
    label: str

    def __post_init__(self) -> None:
        if self.devices < 1:
            raise ValueError(f"devices must be >= 1, got {self.devices}")
        for name in ("tokens_per_step", "flops_per_token", "step_s"):
            _positive(name, getattr(self, name))
        if self.spec.peak(self.dtype) is None:
            raise ValueError(f"{self.spec.name} has no {self.dtype} peak in its datasheet")
        if not 0 < self.mfu < 1:
            raise ValueError(
                f"a {self.step_s:g} s step of {self.tokens_per_step:g} tokens on {self.devices} "
                f"x {self.spec.name} is MFU {self.mfu:.3g} of its {self.dtype} peak; a step "
                "cannot beat the datasheet (check the step time, the devices and the batch)"
            )
        if not self.label:
            raise ValueError("a measured step needs a label (what narrowed the interval)")

    @property
    def mfu(self) -> float:
        peak = self.spec.peak(self.dtype)
        assert peak is not None  # checked when built
        return self.tokens_per_step * self.flops_per_token / (self.devices * peak * self.step_s)

    def measurement(self, recipe: Recipe = "full") -> Measured:
        observation = Observation(recipe, self.spec.family, _CLASS, math.log(self.mfu))
        return Measured(observation, RUN_TO_RUN_LOG_SD**2, self.label)


def tightened_training(
    calibration: TrainCalibration, steps: Sequence[MeasuredStep]
) -> TrainCalibration:
    """``calibration`` with the user's measured steps added as rows of their families: the
    family measured narrows; the others move only through the mean they share."""
    if not steps:
        return calibration
    model = calibration.model.updated([s.measurement() for s in steps])
    return TrainCalibration(
        calibration.rows, calibration.left_out, model, (*calibration.measured, *steps)
    )


def calibrate_training(
    results: Sequence[TrainingResult], accelerators: Accelerators
) -> TrainCalibration:
    """The MFU model fitted to every decoder row with a datasheet."""
    rows, left_out = training_rows(results, accelerators)
    return TrainCalibration(tuple(rows), tuple(left_out), fit([r.observation for r in rows]))


@functools.cache
def shipped_training_calibration() -> TrainCalibration:
    """The calibration of the shipped table and datasheets (once per process)."""
    return calibrate_training(load_published_training(), load_accelerators())


@dataclass(frozen=True, kw_only=True)
class TrainTime:
    """Time for a token budget on ``devices`` of one part, with the MFU's 80 % interval."""

    accelerator: str
    family: str
    devices: int
    tokens: float
    flops_per_token: float
    dtype: str
    peak_flops_per_s: float
    mfu: float
    mfu_low: float
    mfu_high: float
    time_s: float
    time_low_s: float
    """At ``mfu_high``."""
    time_high_s: float
    """At ``mfu_low``."""
    coverage: float
    basis: str
    rows: int
    """Published rows of this family (0: the pooled MFU of the other families)."""

    def __post_init__(self) -> None:
        if self.devices < 1:
            raise ValueError(f"devices must be >= 1, got {self.devices}")
        for name in ("tokens", "flops_per_token", "peak_flops_per_s"):
            _positive(name, getattr(self, name))
        if not 0 < self.mfu_low <= self.mfu <= self.mfu_high:
            raise ValueError("the MFU's point must lie within its interval")
        if self.mfu >= 1:
            raise ValueError(f"MFU {self.mfu:.3f}: a run cannot beat the datasheet's peak")
        if not 0 < self.time_low_s <= self.time_s <= self.time_high_s:
            raise ValueError("the time's point must lie within its interval")
        expected = (
            self.tokens * self.flops_per_token / (self.devices * self.peak_flops_per_s * self.mfu)
        )
        if not math.isclose(self.time_s, expected, rel_tol=1e-9):
            raise ValueError(f"time_s {self.time_s} is not FLOPs / (devices x peak x MFU)")


def project_train_time(
    spec: AcceleratorSpec,
    *,
    dtype: str,
    tokens: float,
    flops_per_token: float,
    devices: int,
    calibration: TrainCalibration | None = None,
    recipe: Recipe = "full",
) -> TrainTime:
    """``tokens`` of training on ``devices`` of ``spec`` computing at ``dtype``'s peak."""
    _positive("tokens", tokens)
    _positive("flops_per_token", flops_per_token)
    calibration = calibration or shipped_training_calibration()
    peak = spec.peak(dtype)
    if peak is None:
        raise ValueError(f"{spec.name} has no {dtype} peak in its datasheet")
    prediction = calibration.model.predict(recipe, spec.family, _CLASS)
    low, high = prediction.interval(COVERAGE)
    point = prediction.point
    rows = calibration.rows_of(spec.family)
    if rows:
        basis = f"MLPerf Training: {spec.family}, {rows} rows"
    else:
        basis = f"pooled: no MLPerf Training row for {spec.family} (wider interval)"
    mine = calibration.measured_of(spec.family)
    if mine:
        basis += " + " + "; ".join(m.label for m in mine)
    work = tokens * flops_per_token

    def seconds(mfu: float) -> float:
        return work / (devices * peak * mfu)

    return TrainTime(
        accelerator=spec.name,
        family=spec.family,
        devices=devices,
        tokens=tokens,
        flops_per_token=flops_per_token,
        dtype=dtype,
        peak_flops_per_s=peak,
        mfu=point,
        mfu_low=low,
        mfu_high=high,
        time_s=seconds(point),
        time_low_s=seconds(high),
        time_high_s=seconds(low),
        coverage=COVERAGE,
        basis=basis,
        rows=rows,
    )


def _holdout(row: TrainingRow, model: EfficiencyModel) -> Holdout:
    o = row.observation
    prediction = model.predict(o.group, o.family, o.workload_class)
    low, high = prediction.interval(COVERAGE)
    return Holdout(
        key=row.result.key,
        family=row.result.family,
        workload_class=row.result.benchmark,
        published=row.minutes,
        point=row.minutes_at(prediction.point),
        low=row.minutes_at(high),
        high=row.minutes_at(low),
        basis=prediction.basis,
    )


def leave_one_out(calibration: TrainCalibration) -> list[Holdout]:
    """Each system's rows projected (mean minutes to train, from the tokens its runs consumed)
    from a fit to every other system's rows. ``Holdout.workload_class`` is the benchmark."""
    held = []
    for row in calibration.rows:
        key = row.result.system_key
        rest = [r.observation for r in calibration.rows if r.result.system_key != key]
        if not any(o.group == row.observation.group for o in rest):
            continue
        held.append(_holdout(row, fit(rest)))
    return held


def forward_check(
    calibration: TrainCalibration, results: Sequence[TrainingResult], accelerators: Accelerators
) -> tuple[list[Holdout], list[tuple[TrainingResult, str]]]:
    """Rows of a later round (the v5.1 held-out file) projected from ``calibration`` alone."""
    rows, left_out = training_rows(results, accelerators)
    return [_holdout(row, calibration.model) for row in rows], left_out


def tighten_training_leave_one_out(
    calibration: TrainCalibration, *, unpublished: bool
) -> list[Tightened]:
    """Each published row projected before and after "the user's measured step": the first
    row (in table order) of the same family and recipe from another system, at its own MFU.
    The fit leaves out the row's system and the measuring system (a user's machine is not in
    the table); ``unpublished``: every row of the family too, as for a part MLPerf Training
    has no result of (the measurement is then all the model knows of it)."""
    held: list[Tightened] = []
    rows = calibration.rows
    for row in rows:
        o = row.observation
        partner = stand_in(
            row,
            rows,
            system=lambda r: r.result.system_key,
            key=lambda r: (r.observation.family, r.observation.group),
        )
        if partner is None:
            continue
        if unpublished:
            rest = [r.observation for r in rows if r.observation.family != o.family]
        else:
            away = {row.result.system_key, partner.result.system_key}
            rest = [r.observation for r in rows if r.result.system_key not in away]
        if o.group not in {r.group for r in rest}:
            continue
        model = fit(rest)
        measured = Measured(
            partner.observation, RUN_TO_RUN_LOG_SD**2, f"published row {partner.result.key}"
        )
        held.append(
            Tightened(
                before=_holdout(row, model),
                after=_holdout(row, model.updated([measured])),
                measured=partner.result.key,
            )
        )
    return held
