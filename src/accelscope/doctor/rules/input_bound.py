"""Input-bound: the loop waits for its input for a large share of each step.

On CUDA the time at stake is read from the GPU's own timeline: the GPU idle behind the
DataLoader (``dataloader``) or behind the host's own preprocessing (``host_compute``); a wait
that overlapped with kernels is not at stake. On the CPU it is the host time blocked in the
DataLoader iterator. Threshold and advice are the cause table's
(:mod:`accelscope.doctor.causes`).
"""

from __future__ import annotations

from accelscope.doctor.causes import CAUSES, sentence
from accelscope.doctor.findings import CLEAR, FIRED, Finding, RuleContext, severity
from accelscope.doctor.rules._timeline import timeline_evidence, without_gpu_time

CAUSE = CAUSES["dataloader"]
HOST = CAUSES["host_compute"]


class InputBound:
    """Fires when waiting for input takes at least the ``dataloader`` cause's threshold of
    step time; on CUDA when the GPU idles behind the DataLoader or behind the host's
    preprocessing at least that cause's own threshold (the timeline's ``reported``), the
    share at stake being both together."""

    name = "input-bound"

    def check(self, ctx: RuleContext) -> Finding:
        """Input wait share against the threshold, with the loader's settings."""
        threshold = (
            f"time waiting for input >= {CAUSE.reported_at:.0%} of step time (on CUDA: the "
            f"GPU idle behind the DataLoader, or behind the host's preprocessing, either one "
            f">= {CAUSE.reported_at:.0%} on its own timeline; the share is both together)"
        )
        wait_s = ctx.breakdown.phase_mean_s["input"]
        facts = ctx.profile.facts
        loaders = facts.loaders if facts is not None else ()
        evidence: dict[str, object] = {
            "input_wait_share": ctx.breakdown.shares["input"],
            "input_wait_per_step_s": wait_s,
            "step_median_s": ctx.breakdown.step_median_s,
        }
        host_work = 0.0
        detail = ""
        reported = False
        if ctx.device == "cuda":
            missing = without_gpu_time(ctx, rule=self.name, title=CAUSE.title, threshold=threshold)
            if missing is not None:
                return missing
            assert ctx.timeline is not None  # without one, ``missing`` returned above
            shares = dict(ctx.timeline.ranked)
            host_work = shares.get("host_compute", 0.0)
            share = shares.get("dataloader", 0.0) + host_work  # exclusive causes: <= 1
            # reported as the timeline reports it: either cause at its own threshold
            reported = bool({"dataloader", "host_compute"} & dict(ctx.timeline.reported).keys())
            detail = (
                f" (the GPU's timeline: idle behind the DataLoader "
                f"{shares.get('dataloader', 0.0):.0%}, behind the host's own preprocessing "
                f"{host_work:.0%})"
            )
            evidence |= timeline_evidence(ctx) | {"input_gpu_idle_share": share}
        else:
            share = ctx.breakdown.shares["input"]
            reported = share >= CAUSE.reported_at
        if not reported:
            gpu = " with the GPU idle" if ctx.device == "cuda" else ""
            return Finding(
                rule=self.name,
                title=CAUSE.title,
                status=CLEAR,
                summary=f"input wait{gpu} is {share:.0%} of step time{detail}",
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
        advice = sentence(CAUSE.advice) + (
            f" With no workers yet: DataLoader(num_workers={ctx.cores}), one per core."
            if workers == 0
            else ""
        )
        if ctx.device == "cuda" and host_work >= share / 2:
            advice = sentence(HOST.advice)
            if loader is None or loader.num_workers < 2 * ctx.cores:
                what_ifs = [w for w in what_ifs if w != "workers"] + (
                    ["workers"] if loader is not None else []
                )
        gpu = (
            f": the GPU idle {share:.0%} of step time"
            if ctx.device == "cuda"
            else f": {share:.0%} of step time"
        )
        summary = (
            f"the loop waits {wait_s * 1e3:.1f} ms per step for input{gpu}"
            + (f" (DataLoader num_workers={workers})" if loader is not None else "")
            + detail
        )
        return Finding(
            rule=self.name,
            title=CAUSE.title,
            status=FIRED,
            summary=summary,
            threshold=threshold,
            share=share,
            severity=severity(share, CAUSE.high),
            evidence=evidence,
            advice=advice,
            what_ifs=tuple(what_ifs),
        )


RULE = InputBound()
