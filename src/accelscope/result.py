"""``Result``: one configuration's outcome, self-describing and lossless through JSON.

A result carries its spec, the environment it ran in, the raw measurement, memory, threads,
accuracy and a status (``ok``, ``rejected`` with a reason, ``failed`` with a reason).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from accelscope.accuracy.fidelity import Fidelity
from accelscope.errors import StoreError
from accelscope.hardware.energy import EnergyFigure
from accelscope.hardware.fingerprint import Environment
from accelscope.measurement.memory import MemoryPeak
from accelscope.measurement.record import Measurement
from accelscope.measurement.threads import ThreadSettings
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

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return {
            "fidelity": None if self.fidelity is None else self.fidelity.to_dict(),
            "metric_name": self.metric_name,
            "metric_value": self.metric_value,
            "reference_metric_value": self.reference_metric_value,
            "metric_source": self.metric_source,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Accuracy:
        """Inverse of :meth:`to_dict`."""
        fidelity = data.get("fidelity")
        return cls(
            fidelity=None if fidelity is None else Fidelity.from_dict(fidelity),
            metric_name=data.get("metric_name"),
            metric_value=data.get("metric_value"),
            reference_metric_value=data.get("reference_metric_value"),
            metric_source=data.get("metric_source"),
        )


@dataclass(frozen=True, kw_only=True)
class Result:
    """Everything known about one measured (or failed) configuration."""

    spec: RunSpec
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
    created_at: str = field(default_factory=utc_now)
    schema_version: int = SCHEMA_VERSION

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict; raw samples included, derived statistics not."""
        return {
            "schema_version": self.schema_version,
            "created_at": self.created_at,
            "spec": self.spec.to_dict(),
            "environment": self.environment.to_dict(),
            "status": self.status.value,
            "status_reason": self.status_reason,
            "measurement": None if self.measurement is None else self.measurement.to_dict(),
            "memory": None if self.memory is None else self.memory.to_dict(),
            "threads": None if self.threads is None else self.threads.to_dict(),
            "accuracy": None if self.accuracy is None else self.accuracy.to_dict(),
            "prepare_s": self.prepare_s,
            "warnings": list(self.warnings),
            "node": self.node,
            "energy": None if self.energy is None else self.energy.to_dict(),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Result:
        """Inverse of :meth:`to_dict`; a newer schema than this accelscope knows is refused."""
        version = int(data.get("schema_version", 0))
        if version > SCHEMA_VERSION:
            raise StoreError(
                f"result has schema version {version}, newer than this accelscope "
                f"({SCHEMA_VERSION}); upgrade accelscope to read it"
            )
        measurement = data.get("measurement")
        memory = data.get("memory")
        threads = data.get("threads")
        accuracy = data.get("accuracy")
        energy = data.get("energy")
        return cls(
            spec=RunSpec.from_dict(data["spec"]),
            environment=Environment.from_dict(data["environment"]),
            status=Status(data["status"]),
            status_reason=data.get("status_reason", ""),
            measurement=None if measurement is None else Measurement.from_dict(measurement),
            memory=None if memory is None else MemoryPeak.from_dict(memory),
            threads=None if threads is None else ThreadSettings.from_dict(threads),
            accuracy=None if accuracy is None else Accuracy.from_dict(accuracy),
            prepare_s=data.get("prepare_s"),
            warnings=tuple(data.get("warnings", [])),
            node=str(data.get("node", "")),
            energy=None if energy is None else EnergyFigure.from_dict(energy),
            created_at=data["created_at"],
            schema_version=version,
        )

    def to_json(self) -> str:
        """Compact JSON text (floats round-trip exactly)."""
        return json.dumps(self.to_dict(), sort_keys=True, allow_nan=True)

    @classmethod
    def from_json(cls, text: str) -> Result:
        """Inverse of :meth:`to_json`."""
        return cls.from_dict(json.loads(text))
