"""What can be compared in a run, by the run's kind: one registry, so a new kind (``llm``'s
TTFT, TPOT and goodput) adds its extractor here and ``compare`` handles it unchanged.

An extractor turns one run's results and documents into observations per configuration: for
each metric either raw samples (per-item times; compared by bootstrap within runs, or by their
per-run statistic across several runs) or one value per run (peak memory, accuracy, capacity).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from accelscope.documents import LlmCapacity
from accelscope.llm.documents import LlmRun, LlmTrial
from accelscope.result import Result, Status
from accelscope.tune.documents import TuneRun

__all__ = [
    "EXTRACTORS",
    "METRICS",
    "ConfigObservations",
    "Metric",
    "Observation",
    "comparable_kinds",
    "config_identity",
    "describe_machine",
    "observations",
]


@dataclass(frozen=True, kw_only=True)
class Metric:
    """A comparable quantity. ``percentile`` is set for sample metrics (the statistic taken of
    the samples); ``higher_is_better`` decides which direction is a regression."""

    name: str
    unit: str
    higher_is_better: bool = False
    percentile: float | None = None
    definition: str | None = None
    """The key of the figure's definition a run stores with it (``LlmRun.definitions``): a
    figure whose definition changed between the runs is shown, never compared."""


METRICS: dict[str, Metric] = {
    "time_per_item_p50": Metric(name="time/item p50", unit="s", percentile=50.0),
    "time_per_item_p99": Metric(name="time/item p99", unit="s", percentile=99.0),
    "peak_memory": Metric(name="peak memory", unit="B"),
    "accuracy": Metric(name="accuracy metric", unit="", higher_is_better=True),
    "capacity": Metric(name="capacity at the p99 SLA", unit="q/s", higher_is_better=True),
    "ttft_p50": Metric(name="TTFT p50", unit="s", percentile=50.0, definition="ttft_s"),
    "ttft_p99": Metric(name="TTFT p99", unit="s", percentile=99.0, definition="ttft_s"),
    "tpot_p50": Metric(name="TPOT p50", unit="s", percentile=50.0, definition="tpot_s"),
    "tpot_p99": Metric(name="TPOT p99", unit="s", percentile=99.0, definition="tpot_s"),
    "e2e_p99": Metric(name="E2E p99", unit="s", percentile=99.0, definition="e2e_s"),
    "output_tokens_per_s": Metric(
        name="output tokens/s", unit="tok/s", higher_is_better=True, definition="output_tokens"
    ),
    "goodput_tokens_per_s": Metric(
        name="token goodput at the SLO", unit="tok/s", higher_is_better=True, definition="goodput"
    ),
    "llm_capacity": Metric(name="LLM capacity at the SLO", unit="load", higher_is_better=True),
}


@dataclass(frozen=True, kw_only=True)
class Observation:
    """One run's data for one metric of one configuration: ``samples`` or a single ``value``."""

    samples: tuple[float, ...] = ()
    value: float | None = None

    def statistic(self, metric: Metric) -> float:
        """The run's figure: the metric's percentile of the samples, or the value."""
        if metric.percentile is not None and self.samples:
            return float(np.percentile(self.samples, metric.percentile))
        if self.value is None:
            raise ValueError(f"no value for {metric.name}")
        return self.value


@dataclass(frozen=True, kw_only=True)
class ConfigObservations:
    """A configuration's identity (``key``: what must match across the two sides), its label
    and its observations by metric id."""

    key: str
    label: str
    model: str
    model_digest: str
    fingerprint: str
    machine: str
    libraries: tuple[tuple[str, str], ...]
    metrics: Mapping[str, Observation]
    definitions: Mapping[str, str] | None = None
    """Each figure's definition as the run stored it (``None``: the kind or the run stores
    none, e.g. an llm run from before definitions were stored)."""


def describe_machine(result: Result) -> str:
    """``AMD EPYC 7B13, 2 logical cores, 24 GiB`` (plus GPUs): what a fingerprint stands for."""
    identity = result.environment.identity()
    vendor_model = identity["cpu"][1] or identity["cpu"][0]
    text = f"{vendor_model}, {identity['cores'][0]} logical cores, {identity['memory_gib']} GiB"
    gpus = ", ".join(str(gpu[0]) for gpu in identity["gpus"])
    return f"{text}, {gpus}" if gpus else text


def config_identity(result: Result) -> str:
    """The match key of a result: its spec without the model's name and digest (the same
    configuration of a changed model file must match itself)."""
    data = result.spec.to_dict()
    data.pop("model")
    data.pop("model_digest")
    return repr(sorted((k, repr(v)) for k, v in data.items()))


def _from_results(results: Sequence[Result], _: Sequence[Any]) -> list[ConfigObservations]:
    latest: dict[str, Result] = {}
    for result in results:  # a resumed or re-measured configuration: its last result counts
        latest[result.spec.key] = result
    found: list[ConfigObservations] = []
    for result in latest.values():
        measurement = result.measurement
        if result.status is not Status.OK or measurement is None:
            continue
        per_item = tuple(s / measurement.items_per_call for s in measurement.samples_s)
        metrics: dict[str, Observation] = {
            "time_per_item_p50": Observation(samples=per_item),
            "time_per_item_p99": Observation(samples=per_item),
        }
        memory = result.memory
        if memory is not None:
            peak = memory.cuda_allocated_peak_bytes
            metrics["peak_memory"] = Observation(
                value=float(memory.rss_peak_bytes if peak is None else peak)
            )
        accuracy = result.accuracy
        if accuracy is not None and accuracy.metric_value is not None:
            metrics["accuracy"] = Observation(value=accuracy.metric_value)
        found.append(
            ConfigObservations(
                key=config_identity(result),
                label=result.spec.label(),
                model=result.spec.model,
                model_digest=result.spec.model_digest,
                fingerprint=result.environment.fingerprint(),
                machine=describe_machine(result),
                libraries=result.environment.libraries,
                metrics=metrics,
            )
        )
    return found


def _from_capacity(_: Sequence[Result], documents: Sequence[Any]) -> list[ConfigObservations]:
    found: list[ConfigObservations] = []
    for document in documents:
        payload: dict[str, Any] = document.payload
        if document.kind != "capacity" or payload.get("valid") is False:
            continue  # an invalid capacity (harness-bound, too few queries) is not a figure
        spec = payload.get("spec") or {}
        key_parts = {k: v for k, v in spec.items() if k not in ("model", "model_digest")}
        key_parts["scenario"] = payload.get("scenario")
        key_parts["sla_p99_s"] = payload.get("sla_p99_s")
        sla_ms = float(payload.get("sla_p99_s", 0.0)) * 1000.0
        found.append(
            ConfigObservations(
                key=repr(sorted((k, repr(v)) for k, v in key_parts.items())),
                label=f"{payload.get('label', '?')} at p99 <= {sla_ms:g} ms",
                model=str(payload.get("model", "")),
                model_digest=str(spec.get("model_digest", "")),
                fingerprint=str(payload.get("environment_fingerprint", "")),
                machine="",
                libraries=(),
                metrics={"capacity": Observation(value=float(payload.get("capacity_qps", 0.0)))},
            )
        )
    return found


def _from_llm(_: Sequence[Result], documents: Sequence[Any]) -> list[ConfigObservations]:
    """Each ``llm-trial`` (matched by target, workload and load; its per-request TTFT, TPOT
    and E2E as samples, throughput and goodput as values) and the ``llm-capacity``."""
    found: dict[str, ConfigObservations] = {}
    settings: dict[str, Any] = {}
    definitions: dict[str, str] | None = None
    for document in documents:
        if document.kind == LlmRun.kind:
            run = LlmRun.from_payload(document.payload, "an llm document")
            workload = run.workload.model_dump(mode="json", exclude={"seed"})  # the seed differs
            slo = run.slo.model_dump(mode="json") if run.slo else None
            settings = {"workload": workload, "slo": slo}
            definitions = dict(run.definitions) or None
    for document in documents:
        if document.kind == LlmTrial.kind:
            trial = LlmTrial.from_payload(document.payload, "an llm-trial document")
            if trial.interrupted:
                continue
            metrics: dict[str, Observation] = {}
            for name, key in (("ttft", "ttft_s"), ("tpot", "tpot_s"), ("e2e", "e2e_s")):
                values = tuple(float(v) for v in trial.samples.get(key, ()))
                if values:
                    for metric in (f"{name}_p50", f"{name}_p99"):
                        if metric in METRICS:
                            metrics[metric] = Observation(samples=values)
            if trial.summary.throughput is not None:
                metrics["output_tokens_per_s"] = Observation(
                    value=trial.summary.throughput.output_tokens_per_s
                )
            if trial.summary.goodput is not None:
                metrics["goodput_tokens_per_s"] = Observation(
                    value=trial.summary.goodput.output_tokens_per_s
                )
            parts = {
                "arrivals": trial.arrivals.model_dump(mode="json", exclude_none=True),
                "role": trial.role,
                **settings,
            }
            key = repr(sorted((k, repr(v)) for k, v in parts.items()))
            found[key] = ConfigObservations(
                key=key,
                label=trial.label or "?",
                model="",
                model_digest="",
                fingerprint="",
                machine="",
                libraries=(),
                metrics=metrics,
                definitions=definitions,
            )
        elif document.kind == LlmCapacity.kind:
            capacity = LlmCapacity.from_payload(document.payload, "an llm-capacity document")
            if not capacity.valid or capacity.capacity is None:
                continue
            key = repr(sorted((k, repr(v)) for k, v in {"capacity": capacity.slo}.items()))
            found[key] = ConfigObservations(
                key=key,
                label=f"capacity ({capacity.unit})",
                model=capacity.model,
                model_digest="",
                fingerprint=capacity.environment_fingerprint,
                machine="",
                libraries=(),
                metrics={"llm_capacity": Observation(value=float(capacity.capacity))},
            )
    return list(found.values())


def _from_tune(_: Sequence[Result], documents: Sequence[Any]) -> list[ConfigObservations]:
    """Each configuration a ``tune`` measured in full: its goodput at the SLO (the objective)
    and its capacity, matched by configuration key and the run's SLO."""
    found: list[ConfigObservations] = []
    runs = [
        TuneRun.from_payload(d.payload, "a tune document")
        for d in documents
        if d.kind == TuneRun.kind
    ]
    if not runs:
        return found
    run = runs[-1]
    slo = run.slo.model_dump(mode="json") if run.slo else None
    for config in run.configs:
        if not config.usable or config.phase != "full":
            continue
        metrics = {"goodput_tokens_per_s": Observation(value=config.goodput_tokens_per_s)}
        if config.capacity is not None and config.capacity.capacity is not None:
            metrics["llm_capacity"] = Observation(value=float(config.capacity.capacity))
        key = repr(
            sorted(
                (k, repr(v))
                for k, v in {"config": config.key, "slo": slo, "engine": run.engine}.items()
            )
        )
        found.append(
            ConfigObservations(
                key=key,
                label=config.key,
                model=run.model,
                model_digest="",
                fingerprint="",
                machine="",
                libraries=(),
                metrics=metrics,
            )
        )
    return found


Extractor = Callable[[Sequence[Result], Sequence[Any]], list[ConfigObservations]]

EXTRACTORS: dict[str, Extractor] = {
    "bench": _from_results,
    "measure": _from_results,
    "load": _from_capacity,
    "llm": _from_llm,
    "tune": _from_tune,
}
"""Run kind -> extractor. ``documents`` are the store's ``Document`` rows (kind, payload)."""


def comparable_kinds() -> tuple[str, ...]:
    """The run kinds ``compare`` understands."""
    return tuple(sorted(EXTRACTORS))


def observations(
    kind: str, results: Sequence[Result], documents: Sequence[Any]
) -> list[ConfigObservations]:
    """One run's comparable configurations (an unknown kind is the caller's error)."""
    return EXTRACTORS[kind](results, documents)
