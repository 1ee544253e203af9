"""The sentences of a load run (verdict, harness floor), shared by the terminal view and the
HTML report; built from the stored documents (plain dicts), so stored runs re-render."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["harness_floor_text", "load_verdict", "policy_label"]


def policy_label(batching: dict[str, Any]) -> str:
    if int(batching["max_batch"]) <= 1:
        return "no batching"
    return f"batch ≤{batching['max_batch']}, delay {float(batching['max_delay_s']) * 1e3:g} ms"


def load_verdict(
    scenario: str,
    sla_p99_s: float | None,
    trials: Sequence[dict[str, Any]],
    capacity: dict[str, Any] | None,
) -> str:
    """One or two sentences with the numbers: the capacity, or the scenario's headline."""
    if not trials:
        return "No trial ran."
    if capacity is not None and sla_p99_s is not None:
        bound = f"p99 ≤ {sla_p99_s * 1e3:g} ms"
        if capacity["capacity_qps"] <= 0:
            return f"No offered rate met {bound} in a valid run ({len(trials)} trials)."
        best = capacity.get("capacity_trial") or {}
        batching = capacity.get("batching")
        how = policy_label(batching) if batching else "no batching"
        p99 = best.get("latency", {}).get("p99_s")
        tail = f" (measured p99 {p99 * 1e3:.1f} ms" if p99 is not None else " ("
        es = best.get("early_stopping") or {}
        claim = f", {es.get('queries')} queries, early-stopping passed)" if es else ")"
        rate = capacity["capacity_qps"]
        return f"Capacity at {bound}: {rate:.1f} queries/s with {how}{tail}{claim}."
    trial = trials[-1]
    latency = trial["latency"]
    validity = "valid" if trial["valid"] else "INVALID: " + "; ".join(trial["invalid_reasons"])
    if scenario == "offline":
        return f"Offline throughput {trial['throughput_per_s']:.1f} queries/s ({validity})."
    if scenario == "single-stream":
        estimate = trial.get("p99_estimate_s")
        extra = f", early-stopping p99 estimate {estimate * 1e3:.2f} ms" if estimate else ""
        p90_ms, p99_ms = latency["p90_s"] * 1e3, latency["p99_s"] * 1e3
        return f"Single-stream p90 {p90_ms:.2f} ms, p99 {p99_ms:.2f} ms{extra} ({validity})."
    rate = trial.get("offered_rate_per_s") or 0.0
    return (
        f"Server at {rate:.1f} queries/s: p99 {latency['p99_s'] * 1e3:.2f} ms, "
        f"{trial['errors']} errors, {trial['timeouts']} timeouts ({validity})."
    )


def _floor_ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3f}" if seconds < 1e-3 else f"{seconds * 1e3:.2f}"


def harness_floor_text(floor: dict[str, Any] | None) -> str | None:
    """The harness-floor sentence of a stored ``harness_floor`` dict (``None``: not measured,
    as in runs stored before it existed)."""
    if not floor or not isinstance(floor.get("latency"), dict):
        return None
    latency = floor["latency"]
    queries, rate = floor.get("queries"), floor.get("rate_per_s")
    how = ""
    if queries and rate:
        how = f" (null system under test, {queries} queries at {float(rate):g} q/s)"
    return (
        f"harness floor: p50 {_floor_ms(float(latency['p50_s']))} ms, "
        f"p99 {_floor_ms(float(latency['p99_s']))} ms per query{how} — service times well "
        "above this are measured faithfully"
    )
