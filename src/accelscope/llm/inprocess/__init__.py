"""An in-process ``Target``: a local Hugging Face model directory served from this process,
for CPU-only machines and CI, where no inference server (and no HTTP) is wanted.

One class per batching strategy behind :class:`InProcessModel` (loading, the client side of a
request, closing): :class:`StaticBatchingModel` (one ``generate`` call per batch of what
queued) and :class:`ContinuousBatchingModel` (``transformers``' paged scheduler).
:func:`in_process_model` builds the one a batching name asks for.
"""

from __future__ import annotations

from pathlib import Path
from typing import TypedDict, Unpack

from accelscope.errors import BadInputError
from accelscope.llm.inprocess.base import Batching, Cache, InProcessModel, parse_cache
from accelscope.llm.inprocess.continuous import ContinuousBatchingModel, ContinuousProgress
from accelscope.llm.inprocess.notes import host_bound_notes
from accelscope.llm.inprocess.static import StaticBatchingModel, StaticProgress

__all__ = [
    "STRATEGIES",
    "Batching",
    "Cache",
    "ContinuousBatchingModel",
    "ContinuousProgress",
    "InProcessModel",
    "InProcessOptions",
    "StaticBatchingModel",
    "StaticProgress",
    "host_bound_notes",
    "in_process_model",
    "parse_cache",
]

STRATEGIES: dict[str, type[InProcessModel]] = {
    cls.batching: cls for cls in (StaticBatchingModel, ContinuousBatchingModel)
}
"""The batching strategies, by name."""


class InProcessOptions(TypedDict, total=False):
    """The settings of :class:`InProcessModel` (its keyword arguments, with their defaults)."""

    max_batch: int
    dtype: str | None
    device: str
    threads: int | None
    cache: str
    compile: bool


def in_process_model(
    model_dir: Path, *, batching: str = "static", **options: Unpack[InProcessOptions]
) -> InProcessModel:
    """The in-process target for ``batching`` (``static`` or ``continuous``; anything else is
    one line of bad input), with the settings of :class:`InProcessModel`."""
    strategy = STRATEGIES.get(batching)
    if strategy is None:
        raise BadInputError(f"batching {batching!r}: give {' or '.join(STRATEGIES)}")
    return strategy(model_dir, **options)
