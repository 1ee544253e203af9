"""A zoo model's static work: FLOPs and bytes per operator for one batch, counted, never timed.

The same counting the ``roofline`` command stores (:func:`accelscope.roofline.counting.count_ops`
on the eager runner, one batch on the CPU), without the timing, the profiler or the ceilings:
what ``plan`` projects from when no roofline run of the model is stored. One forward pass at
batch 1 (a ResNet-50 in about a second on one core), so it runs inside ``plan``.

Only zoo models are counted: a model file or a factory is the user's code or data, which
``plan`` does not run; for those, ``accelscope roofline MODEL`` stores the profile.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from accelscope.documents import Operator
from accelscope.errors import BadInputError, NotAvailableError
from accelscope.roofline.counting import OpRecord, count_ops
from accelscope.spec import Device, Precision, RunSpec

__all__ = ["StaticCount", "StaticWork", "count_static_work"]


@dataclass(frozen=True, kw_only=True)
class StaticWork:
    """One batch's work, per operator (name and dtype, summed over its calls): counted FLOPs
    and the lower bound of bytes moved (:mod:`accelscope.roofline.counting`). No time."""

    model: str
    batch_size: int
    precision: str
    operators: tuple[Operator, ...]
    uncounted: tuple[str, ...] = ()
    """Operators with no FLOP rule (their FLOPs count as 0, their bytes are counted)."""

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be 1 or more, got {self.batch_size}")
        if not self.operators:
            raise ValueError(f"no operator counted for {self.model}: nothing to project")
        if self.total_flops <= 0:
            raise ValueError(f"no FLOPs counted for {self.model}: nothing to project")

    @property
    def total_flops(self) -> float:
        """FLOPs of the batch."""
        return sum(op.flops for op in self.operators)

    @property
    def total_bytes(self) -> float:
        """Bytes the batch moves (lower bound: each operator's inputs and outputs once)."""
        return sum(op.bytes for op in self.operators)

    @property
    def flops_per_item(self) -> float:
        """FLOPs of one item."""
        return self.total_flops / self.batch_size

    @property
    def bytes_per_item(self) -> float:
        """Bytes one item moves (at this batch: weights are read once per batch)."""
        return self.total_bytes / self.batch_size


@dataclass(frozen=True, kw_only=True)
class StaticCount:
    """The counted work, or why there is none (``work`` ``None`` and ``missing`` says why)."""

    work: StaticWork | None
    missing: str = ""

    def __post_init__(self) -> None:
        if (self.work is None) == (not self.missing):
            raise ValueError("a static count holds either the work or why it is missing")


def operators_of(records: Sequence[OpRecord]) -> tuple[Operator, ...]:
    """Counted calls summed by (name, dtype) in first-seen order; views (no data moved, no
    FLOPs) are left out, as the roofline profile leaves them out."""
    groups: dict[tuple[str, str], list[OpRecord]] = {}
    for record in records:
        if record.category != "view":
            groups.setdefault((record.name, record.dtype), []).append(record)
    return tuple(
        Operator(
            name=name,
            dtype=dtype,
            category=calls[0].category,
            calls=len(calls),
            flops=sum(r.flops or 0.0 for r in calls),
            flops_counted=all(r.flops is not None for r in calls),
            bytes=sum(r.bytes for r in calls),
        )
        for (name, dtype), calls in groups.items()
    )


def count_static_work(
    name: str, *, batch_size: int = 1, precision: Precision = Precision.FP32
) -> StaticCount:
    """The work of the zoo model ``name`` for one batch of ``batch_size`` at ``precision``,
    counted on the CPU through the eager runner the roofline command profiles with; a model
    that is not in the zoo, or whose packages are missing, comes back with why."""
    from accelscope.backends.eager import EagerBackend
    from accelscope.models.inputs import make_batch
    from accelscope.models.loading import load_model
    from accelscope.models.zoo import zoo_entry

    try:
        entry = zoo_entry(name)
    except BadInputError:
        return StaticCount(
            work=None,
            missing=f"{name} is not a zoo model (plan counts the work of zoo models only)",
        )
    try:
        model = load_model(entry.name)
    except NotAvailableError as exc:
        return StaticCount(work=None, missing=f"its work cannot be counted here: {exc}")
    spec = RunSpec(
        model=model.ref,
        backend="eager",
        precision=precision,
        batch_size=batch_size,
        threads=1,
        device=Device.CPU,
        model_digest=model.digest,
    )
    runner = EagerBackend().prepare(model, spec)
    try:
        feed = runner.feed(make_batch(model.inputs, batch_size, seed=0))
        records, _ = count_ops(lambda: runner.run(feed))
    finally:
        runner.close()
    operators = operators_of(records)
    return StaticCount(
        work=StaticWork(
            model=model.ref,
            batch_size=batch_size,
            precision=spec.precision_label,
            operators=operators,
            uncounted=tuple(op.name for op in operators if not op.flops_counted),
        )
    )
