"""What the load generator drives: a system under test (real time) or a service model
(simulated time)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from accelscope.load.schedule import Query

__all__ = ["ServiceModel", "SystemUnderTest"]


class SystemUnderTest(Protocol):
    """Runs one batch of queries to completion; called from its own server thread."""

    def issue(self, queries: Sequence[Query]) -> None:
        """Run ``queries`` as one batch and return when done; raising fails the whole batch."""
        ...


class ServiceModel(Protocol):
    """How long a batch takes in simulated time (it may raise to simulate a failed batch)."""

    def service_time_s(self, queries: Sequence[Query]) -> float:
        """Seconds the batch ``queries`` occupies its server (``inf``: it never returns)."""
        ...
