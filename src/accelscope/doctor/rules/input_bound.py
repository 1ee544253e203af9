"""Input-bound: the loop waits for the DataLoader for a large share of each step.

On CUDA only the part of the wait during which the GPU sat idle is at stake (CUDA events
around each wait, :mod:`accelscope.doctor.inprocess.device`): the rest overlapped with GPU work
the host had queued before it, and a faster pipeline would not shorten it.
"""

from __future__ import annotations

from accelscope.doctor.device_timeline import ADVICE
from accelscope.doctor.findings import CLEAR, FIRED, Finding, RuleContext, severity
from accelscope.doctor.rules._timeline import timeline_evidence

THRESHOLD = 0.20
HIGH = 0.50


class InputBound:
    """Fires when time blocked in the DataLoader iterator is >= 20 % of step time."""

    name = "input-bound"

    def check(self, ctx: RuleContext) -> Finding:
        """Input wait share against the threshold, with the loader's settings."""
        share = host_share = ctx.breakdown.shares["input"]
        wait_s = ctx.breakdown.phase_mean_s["input"]
        facts = ctx.profile.facts
        loaders = facts.loaders if facts is not None else ()
        evidence: dict[str, object] = {
            "input_wait_share": host_share,
            "input_wait_per_step_s": wait_s,
            "step_median_s": ctx.breakdown.step_median_s,
        }
        threshold = (
            f"time waiting for input >= {THRESHOLD:.0%} of step time (on CUDA: with the GPU idle)"
        )
        pace = ctx.pace
        overlapped = ""
        if pace is not None:
            share = min(host_share, pace.input_idle_share)
            evidence |= {
                "input_wait_gpu_idle_share": share,
                "input_wait_overlapped_with_gpu_work_share": max(0.0, host_share - share),
            }
            if host_share - share >= 0.01:
                overlapped = (
                    f"; {host_share - share:.0%} of the step waited while the GPU worked "
                    "(overlapped, not at stake)"
                )
        timeline = ctx.timeline
        host_work = 0.0
        if timeline is not None:  # the GPU's own timeline: idle behind the input or the host
            shares = dict(timeline.ranked)
            host_work = shares.get("host_compute", 0.0)
            share = min(1.0, shares.get("dataloader", 0.0) + host_work)
            overlapped = (
                f" (the GPU's timeline: idle behind the DataLoader "
                f"{shares.get('dataloader', 0.0):.0%}, behind the host's own preprocessing "
                f"{host_work:.0%})"
            )
            evidence |= timeline_evidence(ctx) | {"input_gpu_idle_share": share}
        if share < THRESHOLD:
            gpu = " with the GPU idle" if pace is not None or timeline is not None else ""
            return Finding(
                rule=self.name,
                title="input-bound",
                status=CLEAR,
                summary=f"input wait{gpu} is {share:.0%} of step time{overlapped}",
                threshold=threshold,
                share=share,
                evidence=evidence,
            )
        what_ifs: list[str] = []
        loader = loaders[0] if loaders else None
        if loader is not None:
            evidence |= {
                "num_workers": loader.num_workers,
                "pin_memory": loader.pin_memory,
                "batch_size": loader.batch_size,
                "dataset": loader.dataset,
            }
            if loader.num_workers < 2 * ctx.cores:
                what_ifs.append("workers")
            if not loader.iterable:
                what_ifs.append("cache")
            if loader.num_workers > 0:
                what_ifs += ["prefetch"] + ([] if loader.persistent_workers else ["persistent"])
            if ctx.device == "cuda" and not loader.pin_memory:
                what_ifs.append("pin_memory")
        if ctx.telemetry is not None and ctx.telemetry.samples:
            samples = ctx.telemetry.samples
            evidence["script_cpu_cores_mean"] = sum(s.process_cpu_cores for s in samples) / len(
                samples
            )
        workers = loader.num_workers if loader is not None else 0
        advice = (
            f"Prepare batches in parallel with the loop: DataLoader(num_workers={ctx.cores}) "
            "(one per core), or cache decoded samples if __getitem__ is deterministic."
            if workers == 0
            else "Give the DataLoader more workers or a deeper prefetch, or cache decoded "
            "samples; move heavy decoding off the critical path."
        )
        if timeline is not None and host_work >= share / 2:
            advice = ADVICE["host_compute"][0].upper() + ADVICE["host_compute"][1:] + "."
            if loader is None or loader.num_workers < 2 * ctx.cores:
                what_ifs = [w for w in what_ifs if w != "workers"] + (
                    ["workers"] if loader is not None else []
                )
        gpu = (
            f", the GPU idle for {share * ctx.breakdown.step_mean_s * 1e3:.1f} ms of it "
            f"({share:.0%} of step time, CUDA events)"
            if pace is not None and timeline is None
            else f": the GPU idle {share:.0%} of step time"
            if timeline is not None
            else f": {share:.0%} of step time"
        )
        summary = (
            f"the loop waits {wait_s * 1e3:.1f} ms per step for input{gpu}"
            + (f" (DataLoader num_workers={workers})" if loader is not None else "")
            + overlapped
        )
        return Finding(
            rule=self.name,
            title="input-bound",
            status=FIRED,
            summary=summary,
            threshold=threshold,
            share=share,
            severity=severity(share, HIGH),
            evidence=evidence,
            advice=advice,
            what_ifs=tuple(what_ifs),
        )


RULE = InputBound()
