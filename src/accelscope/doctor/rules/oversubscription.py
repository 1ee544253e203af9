"""Thread oversubscription: more busy threads than cores (intra-op threads + loader workers,
plus what other processes keep busy), so multi-threaded operators wait for their threads."""

from __future__ import annotations

from accelscope.doctor.findings import CLEAR, FIRED, Finding, RuleContext

EXTERNAL_MARGIN = 0.5
"""Cores of other processes' load, beyond the free ones, that make parallel regions wait."""


class Oversubscription:
    """Fires when torch intra-op threads + DataLoader workers exceed the usable cores, or when
    multi-threaded operators share the cores with other processes' measured load."""

    name = "thread-oversubscription"

    def check(self, ctx: RuleContext) -> Finding:
        """Thread demand against the cores, with other processes' load from telemetry."""
        threshold = (
            "torch intra-op threads + DataLoader workers (+ other processes' measured "
            "load, for multi-threaded operators) > usable cores"
        )
        facts = ctx.profile.facts
        if facts is None:
            return Finding(
                rule=self.name,
                title="thread oversubscription",
                status=CLEAR,
                summary="no thread facts recorded",
                threshold=threshold,
            )
        workers = sum(loader.num_workers for loader in facts.loaders)
        demand = facts.torch_threads + workers
        evidence: dict[str, object] = {
            "torch_threads": facts.torch_threads,
            "dataloader_workers": workers,
            "cores": ctx.cores,
        }
        external = 0.0
        if ctx.telemetry is not None and ctx.telemetry.samples:
            samples = ctx.telemetry.samples
            n = len(samples)
            evidence["run_queue_mean"] = sum(s.procs_running for s in samples) / n
            system = sum(sum(s.cpu_percent) / 100.0 for s in samples) / n
            external = max(0.0, system - sum(s.process_cpu_cores for s in samples) / n)
            evidence["other_processes_cores"] = external
        own = demand > ctx.cores
        shared = facts.torch_threads > 1 and demand + external >= ctx.cores + EXTERNAL_MARGIN
        if not own and not shared:
            return Finding(
                rule=self.name,
                title="thread oversubscription",
                status=CLEAR,
                summary=f"{facts.torch_threads} threads + {workers} workers on {ctx.cores} cores",
                threshold=threshold,
                evidence=evidence,
            )
        threads, sized = ctx.threads_to_try(external if shared and not own else 0.0)
        evidence["threads_sized_from"] = sized
        if facts.worker_busy_cores is not None:
            evidence["dataloader_workers_busy_cores"] = facts.worker_busy_cores
        summary = (
            f"{facts.torch_threads} intra-op threads + {workers} DataLoader workers "
            f"compete for {ctx.cores} cores"
        )
        if shared and not own:
            summary = (
                f"{facts.torch_threads} intra-op threads share {ctx.cores} cores with "
                f"other processes using ~{external:.1f} cores: multi-threaded operators "
                "wait for their threads"
            )
        return Finding(
            rule=self.name,
            title="thread oversubscription",
            status=FIRED,
            summary=summary,
            threshold=threshold,
            share=None,
            severity="medium",
            evidence=evidence,
            advice=(
                f"torch.set_num_threads({threads}) in the main process, or fewer workers, so the "
                "threads stop waiting for each other."
            ),
            what_ifs=(f"threads={threads}",),
        )


RULE = Oversubscription()
