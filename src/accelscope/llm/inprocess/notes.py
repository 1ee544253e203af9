"""What a run of the in-process engine on a GPU says about itself: whether its decoding is
host-bound (TPOT far above the decode floor) and which of its own settings would move it.

On an H200 a 90 M Llama decoded at 6.55 ms per token against a 0.04 ms floor: each step is
Python, ``generate``'s bookkeeping and one kernel launch per operator, and the GPU waits. The
floor's own ``bound`` line says "overheads"; this names the in-process levers.
"""

from __future__ import annotations

from collections.abc import Sequence

from accelscope.llm.documents import LlmTrial

__all__ = ["HOST_BOUND_EFFICIENCY", "host_bound_notes"]

HOST_BOUND_EFFICIENCY = 0.1
"""Decode efficiency (floor over measured TPOT) below this: TPOT is over 10x the floor, so
memory bandwidth is not what sets it."""


def host_bound_notes(
    trials: Sequence[LlmTrial], *, device: str, cache: str, compile: bool, max_batch: int
) -> list[str]:
    """One line per GPU trial whose TPOT is over 10x its decode floor, naming the levers not
    in use (static cache with ``--compile``, a larger ``--max-batch``); nothing on the CPU,
    where the floor's own line is the whole story."""
    if device == "cpu":
        return []
    levers = []
    if not compile:
        levers.append(
            "--cache static --compile (one CUDA-graph replay per decoding step instead of a "
            "kernel launch per operator)"
        )
    levers.append(
        f"a larger --max-batch than {max_batch} with the concurrency to fill it (the step's "
        "fixed cost is shared by more tokens)"
    )
    notes = []
    for trial in trials:
        floor = trial.floor
        if floor is None or floor.decode_efficiency is None or floor.tpot_floor_s is None:
            continue
        if floor.decode_efficiency >= HOST_BOUND_EFFICIENCY or not floor.tpot_measured_p50_s:
            continue
        used = f"cache {cache}" + (", compiled" if compile else "")
        notes.append(
            f"{trial.label}: in-process engine host-bound on {device} ({used}): TPOT p50 "
            f"{floor.tpot_measured_p50_s * 1e3:.2f} ms is {1 / floor.decode_efficiency:.0f}x "
            f"the decode floor of {floor.tpot_floor_s * 1e3:.3f} ms; what would move it: "
            + "; ".join(levers)
        )
    return notes
