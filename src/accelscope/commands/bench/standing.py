"""How far a GPU bench's best figure stands from the record and from the roofline floor.

The record: the published per-GPU results of :mod:`accelscope.plan.records` for this model on
this GPU (MLPerf Inference rounds), each with its scenario, precision, stack and source.

The floor: the fastest the model could run per item at the best row's precision on this GPU's
datasheet peaks, with the roofline's formula per operator, ``max(FLOPs / peak, bytes /
bandwidth)`` (:mod:`accelscope.roofline.analysis`), summed. It is the large-batch floor: each
operator's FLOPs and bytes *per item* are the difference between a count at batch 2 and one at
batch 1 (:func:`accelscope.roofline.counting.count_ops`, on the CPU), so weights read once per
batch are left out, as they are at the batches where throughput is measured. Bytes are counted
in fp32 and scaled to the row's activation width (2 bytes for bf16, fp16 and fp8's bf16
activations).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from accelscope.hardware.fingerprint import Environment
from accelscope.models.base import LoadedModel
from accelscope.models.inputs import make_batch
from accelscope.plan.records import PublishedRecord, records_for
from accelscope.result import Result, Status
from accelscope.roofline.counting import OpRecord, count_ops
from accelscope.roofline.theoretical import datasheet_for
from accelscope.spec import Device, Precision, RunSpec
from accelscope.sweep.gpu_default import PINNED

__all__ = ["Floor", "RecordGap", "Standing", "best_resident", "floor_for", "standing"]

_ACTIVATION_SCALE = {Precision.BF16: 0.5, Precision.FP16: 0.5, Precision.FP8: 0.5}


@dataclass(frozen=True, kw_only=True)
class RecordGap:
    """The best figure as a share of one published record."""

    record: PublishedRecord
    share: float


@dataclass(frozen=True, kw_only=True)
class Floor:
    """The roofline floor as a throughput, or why it is not known (``items_per_s`` ``None``)."""

    items_per_s: float | None
    derivation: str


@dataclass(frozen=True, kw_only=True)
class Standing:
    """The best device-resident GPU row against the records and the floor."""

    best_label: str
    best_items_per_s: float
    gpu_name: str
    records: tuple[RecordGap, ...]
    floor: Floor

    @property
    def floor_share(self) -> float | None:
        """The best figure as a share of the floor's throughput."""
        if self.floor.items_per_s is None:
            return None
        return self.best_items_per_s / self.floor.items_per_s

    def summary(self) -> dict[str, object]:
        """JSON-ready figures (``bench --json``): the best row, each record's share, the floor."""
        return {
            "gpu": self.gpu_name,
            "best": self.best_label,
            "best_items_per_s": self.best_items_per_s,
            "records": [
                {
                    "benchmark": gap.record.benchmark,
                    "scenario": gap.record.scenario,
                    "items_per_s": gap.record.items_per_s,
                    "precision": gap.record.precision,
                    "stack": gap.record.stack,
                    "batch_size": gap.record.batch_size,
                    "source": gap.record.source,
                    "share": gap.share,
                }
                for gap in self.records
            ],
            "floor_items_per_s": self.floor.items_per_s,
            "floor_share": self.floor_share,
            "floor_derivation": self.floor.derivation,
        }

    def lines(self) -> list[str]:
        """What the table and the report say, one line each."""
        head = f"best on {self.gpu_name}: {self.best_label} {self.best_items_per_s:,.0f} items/s"
        out = [head]
        for gap in self.records:
            out.append(
                f"  {gap.share:.0%} of {gap.record.describe()} (inputs {gap.record.inputs}; "
                f"{gap.record.source})"
            )
        if not self.records:
            out.append("  no published record of this model on this GPU in the catalog")
        if self.floor.items_per_s is not None and self.floor_share is not None:
            out.append(
                f"  {self.floor_share:.0%} of the roofline floor, "
                f"{self.floor.items_per_s:,.0f} items/s ({self.floor.derivation})"
            )
        else:
            out.append(f"  roofline floor not known: {self.floor.derivation}")
        return out


def best_resident(results: Sequence[Result]) -> Result | None:
    """The fastest accepted GPU row whose inputs were resident on the device (the figure MLPerf
    reports); rows that include the host copy are that row's twin, not a contender here."""
    rows = [
        r
        for r in results
        if r.status is Status.OK
        and r.measurement is not None
        and r.spec.device is Device.CUDA
        and PINNED not in r.spec.options
    ]
    if not rows:
        return None
    return max(rows, key=lambda r: r.measurement.throughput_items_per_s if r.measurement else 0.0)


def _peak_key(spec: RunSpec) -> str:
    if spec.precision is Precision.FP32:
        return "tf32" if spec.tf32 else "fp32"
    return spec.precision.value


def _per_item(one: list[OpRecord], two: list[OpRecord]) -> list[tuple[float, float]]:
    """Each operator's (FLOPs, bytes) per item: batch 2 minus batch 1, op by op."""
    if len(one) != len(two):  # a model whose op sequence depends on the batch: use totals
        flops = sum(r.flops or 0.0 for r in two) - sum(r.flops or 0.0 for r in one)
        return [(flops, float(sum(r.bytes for r in two) - sum(r.bytes for r in one)))]
    return [
        (max((b.flops or 0.0) - (a.flops or 0.0), 0.0), float(max(b.bytes - a.bytes, 0)))
        for a, b in zip(one, two, strict=True)
    ]


def floor_for(model: LoadedModel, spec: RunSpec, gpu_name: str) -> Floor:
    """The roofline floor of ``model`` at ``spec``'s precision on the GPU named ``gpu_name``."""
    import torch

    sheet = datasheet_for(gpu_name)
    if sheet is None:
        return Floor(items_per_s=None, derivation=f"no datasheet entry for {gpu_name}")
    key = _peak_key(spec)
    peak = sheet.flops_per_s.get(key)
    if not peak:
        return Floor(items_per_s=None, derivation=f"{sheet.product} has no {key} peak")
    if model.module is None:
        return Floor(items_per_s=None, derivation="the model has no PyTorch module to count")
    module = model.module
    counts = []
    for batch_size in (1, 2):
        batch = make_batch(model.inputs, batch_size, seed=0)
        feed = [batch[name] for name in model.input_names]

        def call(feed: list[Any] = feed) -> Any:
            return module(*feed)

        try:
            with torch.no_grad():
                records, _ = count_ops(call)
        except Exception as exc:  # noqa: BLE001 - the user's model can raise anything
            # the sweep's figures stand without a floor: say why, never lose the report
            why = f"counting its operators on the CPU failed ({type(exc).__name__}: {exc})"
            return Floor(items_per_s=None, derivation=why)
        counts.append(records)
    scale = _ACTIVATION_SCALE.get(spec.precision, 1.0)
    bandwidth = sheet.bandwidth_bytes_per_s
    seconds = sum(
        max(flops / peak, bytes_ * scale / bandwidth) for flops, bytes_ in _per_item(*counts)
    )
    if seconds <= 0:
        return Floor(items_per_s=None, derivation="no FLOPs or bytes counted")
    flops_item = sum(flops for flops, _ in _per_item(*counts))
    return Floor(
        items_per_s=1.0 / seconds,
        derivation=(
            f"{flops_item / 1e9:.2f} GFLOP per item, per operator max(FLOPs / {key} peak "
            f"{peak / 1e12:,.0f} TFLOP/s, bytes / {bandwidth / 1e12:.2f} TB/s), "
            f"{sheet.source}"
        ),
    )


def standing(results: Sequence[Result], model: LoadedModel, env: Environment) -> Standing | None:
    """The best device-resident GPU row against the records and the floor; ``None`` when the
    sweep measured no GPU row."""
    best = best_resident(results)
    if best is None or best.measurement is None:
        return None
    gpu = next((g for g in env.gpus if g.index == best.spec.device_index), None)
    gpu_name = gpu.name if gpu is not None else f"cuda:{best.spec.device_index}"
    rate = best.measurement.throughput_items_per_s
    return Standing(
        best_label=best.spec.label(),
        best_items_per_s=rate,
        gpu_name=gpu_name,
        records=tuple(
            RecordGap(record=record, share=rate / record.items_per_s)
            for record in records_for(model.ref, gpu_name)
        ),
        floor=floor_for(model, best.spec, gpu_name),
    )
