"""The dynamic batcher's policy: launch a batch when it is full or its oldest query has waited
the maximum queue delay.

The policy is pure (times in, decision out), so the trial loop applies the same rule in real
and in simulated time. ``max_batch = 1`` is no batching: each query runs alone, at once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from accelscope.errors import BadInputError

__all__ = ["NO_BATCHING", "BatchPolicy"]


@dataclass(frozen=True)
class BatchPolicy:
    """Maximum batch size (queries; one item each) and maximum queue delay (seconds)."""

    max_batch: int = 1
    max_delay_s: float = 0.0

    def __post_init__(self) -> None:
        if isinstance(self.max_batch, bool) or self.max_batch < 1:
            raise BadInputError(f"max batch must be a positive integer, got {self.max_batch}")
        if not math.isfinite(self.max_delay_s) or self.max_delay_s < 0:
            raise BadInputError(f"max queue delay must be >= 0 s, got {self.max_delay_s}")

    @property
    def batching(self) -> bool:
        """False for one query per batch (no dynamic batching)."""
        return self.max_batch > 1

    def launch_at_s(self, queued: int, oldest_enqueued_s: float) -> float:
        """When a server that is free now should launch, given ``queued`` waiting queries, the
        oldest enqueued at ``oldest_enqueued_s``: at once when full (or not batching), else when
        the oldest has waited ``max_delay_s``. ``inf`` when nothing is queued."""
        if queued <= 0:
            return math.inf
        if queued >= self.max_batch:
            return -math.inf
        return oldest_enqueued_s + self.max_delay_s

    def label(self) -> str:
        """``b8 d5ms`` or ``no batching``."""
        if not self.batching:
            return "no batching"
        return f"max batch {self.max_batch}, max delay {self.max_delay_s * 1e3:g} ms"


NO_BATCHING = BatchPolicy(1, 0.0)
