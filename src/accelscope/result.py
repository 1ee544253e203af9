"""``Result``: one configuration's outcome, self-describing and lossless through JSON.

A result carries its spec, the environment it ran in, the raw measurement, memory, threads,
accuracy and a status (``ok``, ``rejected`` with a reason, ``failed`` or ``skipped`` with a
reason and its :class:`Cause`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum, auto
from typing import Annotated, Any

from pydantic import BeforeValidator, PlainSerializer

from accelscope.accuracy.fidelity import Fidelity
from accelscope.errors import StoreError
from accelscope.hardware.energy import EnergyFigure
from accelscope.hardware.fingerprint import Environment
from accelscope.measurement.memory import MemoryPeak
from accelscope.measurement.record import Measurement
from accelscope.measurement.threads import ThreadSettings
from accelscope.serialise import dump, load
from accelscope.spec import RunSpec

__all__ = ["SCHEMA_VERSION", "Accuracy", "Cause", "Result", "Status", "legacy_cause", "utc_now"]

SCHEMA_VERSION = 1
"""Version of the Result JSON layout (the store's tables have their own,
``accelscope.store.sqlite.STORE_SCHEMA_VERSION``)."""


def utc_now() -> str:
    """The current time as an ISO-8601 UTC string with microseconds."""
    return datetime.now(UTC).isoformat(timespec="microseconds")


class Status(StrEnum):
    """Outcome of one configuration."""

    OK = "ok"
    REJECTED = "rejected"
    FAILED = "failed"
    SKIPPED = "skipped"


class Cause(StrEnum):
    """Why a configuration has no measurement (a failed or skipped result), decided once where
    it happened and stored by its name (``out_of_memory``); the result's ``status_reason`` says
    it in words, for people. These are a measuring worker's and a sweep's causes; a server's
    start and trials have their own (:class:`accelscope.tune.failures.FailureKind`)."""

    OUT_OF_MEMORY = auto()
    """Failed: the host or the device ran out of memory. Skipped: a smaller batch of the same
    configuration did, so this one would too."""
    TIMEOUT = auto()
    """Failed: no result within the worker's time limit (the worker was killed)."""
    CRASHED = auto()
    """Failed: the worker process died without a result (a signal, an exit)."""
    NODE_LOST = auto()
    """Failed: its cluster node died or its task was cancelled; not the configuration's doing,
    so ``--resume`` measures it again."""
    ERROR = auto()
    """Failed: the measurement raised (the model, the runtime, the input; the reason says)."""
    BUDGET = auto()
    """Skipped: the sweep's time budget ended before it ran (``--resume`` measures it)."""
    NO_NODE = auto()
    """Skipped: no live node of its type to measure it (``--resume`` measures it)."""
    PRESCREEN = auto()
    """Skipped: the pre-screen ruled it out before a worker started (not available here, or
    it would not fit in the device's memory)."""
    UNKNOWN = auto()
    """Stored before causes were, with a reason :func:`legacy_cause` does not know, or stored
    by a newer accelscope under a cause this one does not know."""

    @classmethod
    def named(cls, name: str) -> Cause:
        """The cause stored or sent as ``name``; one this accelscope does not know (a newer
        one's) is :attr:`UNKNOWN`."""
        try:
            return cls(name)
        except ValueError:
            return cls.UNKNOWN


# The reasons accelscope wrote before it stored causes (sweep/driver.py, sweep/executor.py),
# as they were written: the words of the current code may change, the stored ones do not.
_OLD_NODE_LOST = "node lost: "
_OLD_BUDGET = "sweep budget ended before this configuration ran"
_OLD_NO_NODE = "no node of its type is alive to measure it"


def legacy_cause(status: Status, reason: str) -> Cause | None:
    """The cause of a result stored before causes were (no ``cause`` key), or sent by a worker
    of such an accelscope: the one place a reason's words decide its cause, read the way
    accelscope read them then. ``None`` for a measured (ok or rejected) result."""
    if status is Status.FAILED:
        if reason.startswith(_OLD_NODE_LOST):
            return Cause.NODE_LOST
        if "out of memory" in reason.lower():
            return Cause.OUT_OF_MEMORY
        if reason.startswith("timeout"):
            return Cause.TIMEOUT
        if reason.startswith("crashed"):
            return Cause.CRASHED
        return Cause.UNKNOWN
    if status is Status.SKIPPED:
        if reason == _OLD_BUDGET:
            return Cause.BUDGET
        if reason == _OLD_NO_NODE:
            return Cause.NO_NODE
        if "already ran out of memory" in reason:
            return Cause.OUT_OF_MEMORY
        return Cause.PRESCREEN  # the sweep's only other skips
    return None


def _stored_cause(value: object) -> object:
    """A stored cause: its name (:meth:`Cause.named`)."""
    return Cause.named(value) if isinstance(value, str) else value


@dataclass(frozen=True, kw_only=True)
class Accuracy:
    """Accuracy of a configuration: fidelity to the reference and, with eval data, a metric.

    ``metric_value`` is this configuration's metric on ``metric_source``;
    ``reference_metric_value`` the eager fp32 value on the same data (equal for the reference).
    """

    fidelity: Fidelity | None = None
    metric_name: str | None = None
    metric_value: float | None = None
    reference_metric_value: float | None = None
    metric_source: str | None = None

    @property
    def metric_drop(self) -> float | None:
        """Reference metric minus this one (positive = worse), or ``None``."""
        if self.metric_value is None or self.reference_metric_value is None:
            return None
        return self.reference_metric_value - self.metric_value


@dataclass(frozen=True, kw_only=True)
class Result:
    """Everything known about one measured (or failed) configuration."""

    # The stored key order puts the version and the time first (kw_only allows the defaults
    # there).
    schema_version: int = SCHEMA_VERSION
    created_at: str = field(default_factory=utc_now)
    spec: Annotated[RunSpec, PlainSerializer(RunSpec.to_dict)]
    """Stored as :meth:`RunSpec.to_dict`, the form its key is the digest of."""
    environment: Environment
    status: Status
    status_reason: str = ""
    measurement: Measurement | None = None
    memory: MemoryPeak | None = None
    threads: ThreadSettings | None = None
    accuracy: Accuracy | None = None
    prepare_s: float | None = None
    warnings: tuple[str, ...] = ()
    node: str = ""
    """The cluster node that measured it (Ray node id); empty: this machine."""
    energy: EnergyFigure | None = None
    """Joules over the configuration's energy window and the items it ran (joules per item),
    or "not measured: why"; ``None`` for results stored before energy was measured."""
    cause: Annotated[Cause | None, BeforeValidator(_stored_cause)] = None
    """Why it has no measurement (failed or skipped), decided where that happened; ``None`` for
    a measured result. A result stored before causes were reads the cause :func:`legacy_cause`
    finds in its ``status_reason``."""

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Result:
        """A result read back from :meth:`to_json`'s data; a newer schema than this accelscope
        knows is refused (one stored before versions were written reads as version 0), and one
        stored before causes were gets the cause its reason names (:func:`legacy_cause`)."""
        version = int(data.get("schema_version", 0))
        if version > SCHEMA_VERSION:
            raise StoreError(
                f"result has schema version {version}, newer than this accelscope "
                f"({SCHEMA_VERSION}); upgrade accelscope to read it"
            )
        if "cause" not in data:
            data = {**data, "cause": _legacy_stored_cause(data)}
        return load(cls, {**data, "schema_version": version})

    def to_json(self) -> str:
        """Compact JSON text of the fields (raw samples included, derived statistics not;
        floats round-trip exactly)."""
        return json.dumps(dump(self), sort_keys=True, allow_nan=True)

    @classmethod
    def from_json(cls, text: str) -> Result:
        """Inverse of :meth:`to_json`."""
        return cls.from_dict(json.loads(text))


def _legacy_stored_cause(data: dict[str, Any]) -> Cause | None:
    try:
        status = Status(str(data.get("status")))
    except ValueError:
        return None  # validation refuses the status itself
    return legacy_cause(status, str(data.get("status_reason", "")))
