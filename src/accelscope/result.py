"""``Result``: one configuration's outcome, self-describing and lossless through JSON.

A result carries its spec, the environment it ran in, the raw measurement, memory, threads,
accuracy and a status (``ok``, ``rejected`` with a reason, ``failed`` with a reason).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Any

from pydantic import PlainSerializer

from accelscope.accuracy.fidelity import Fidelity
from accelscope.errors import StoreError
from accelscope.hardware.energy import EnergyFigure
from accelscope.hardware.fingerprint import Environment
from accelscope.measurement.memory import MemoryPeak
from accelscope.measurement.record import Measurement
from accelscope.measurement.threads import ThreadSettings
from accelscope.serialise import dump, load
from accelscope.spec import RunSpec

__all__ = ["SCHEMA_VERSION", "Accuracy", "Result", "Status", "utc_now"]

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

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Result:
        """A result read back from :meth:`to_json`'s data; a newer schema than this accelscope
        knows is refused (one stored before versions were written reads as version 0)."""
        version = int(data.get("schema_version", 0))
        if version > SCHEMA_VERSION:
            raise StoreError(
                f"result has schema version {version}, newer than this accelscope "
                f"({SCHEMA_VERSION}); upgrade accelscope to read it"
            )
        return load(cls, {**data, "schema_version": version})

    def to_json(self) -> str:
        """Compact JSON text of the fields (raw samples included, derived statistics not;
        floats round-trip exactly)."""
        return json.dumps(dump(self), sort_keys=True, allow_nan=True)

    @classmethod
    def from_json(cls, text: str) -> Result:
        """Inverse of :meth:`to_json`."""
        return cls.from_dict(json.loads(text))
