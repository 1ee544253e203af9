"""One trial's load from the nodes of a Ray cluster (``llm --workers ray:N``): the cluster
``bench --executor ray`` measures on.

The schedule is dealt as for local processes (:func:`~accelscope.llm.scaleout.deal`); each
worker is a Ray actor pinned to a node (worker ``w`` on the ``w``-th live node, round-robin,
so two workers on a two-node cluster are on both nodes), and every actor is asked whether it
is ready before one wall-clock start, :data:`RAY_START_LEAD_S` ahead, is sent to all of them
(the nodes' clocks are taken to agree: NTP on a real cluster, one clock on one machine). An
actor returns its records when its slice has ended; one that dies loses them: its requests are
counted as not sent, with a note, and the run is kept.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Callable, Sequence
from typing import Any

from accelscope.errors import BadInputError, NotAvailableError
from accelscope.llm.records import Target
from accelscope.llm.scaleout import (
    READY_TIMEOUT_S,
    WorkerOutcome,
    WorkerPlan,
    deal,
    merge_workers,
)
from accelscope.llm.trial import TrialInterrupted, TrialRecords, run_trial
from accelscope.llm.workload import Session

__all__ = ["RAY_START_LEAD_S", "run_ray_trial"]

RAY_START_LEAD_S = 1.0
"""The shared start's lead over the moment it is sent: an actor call crosses the cluster."""


class _Worker:
    """The actor: a target of its own, one slice of the schedule at a time."""

    def __init__(self, target: Target) -> None:
        self.target = target

    def node(self) -> str:
        import ray

        node: str = ray.get_runtime_context().get_node_id()
        return node

    def run(self, plan: WorkerPlan, start_wall_s: float) -> WorkerOutcome:
        origin = time.perf_counter() + (start_wall_s - time.time())
        try:
            outcome = run_trial(
                self.target,
                plan.sessions,
                concurrency=plan.concurrency,
                max_in_flight=plan.max_in_flight,
                timeout_s=plan.timeout_s,
                multi_turn=plan.multi_turn,
                origin_s=origin,
            )
        except TrialInterrupted as stop:
            outcome = stop.partial
        for record in outcome.records:
            record.output_text = ""
        return WorkerOutcome(
            plan=plan,
            records=outcome.records,
            request_cpu_s=outcome.request_cpu_s,
            streamed=outcome.streamed,
            host=socket.gethostname(),
            pid=os.getpid(),
            node=self.node(),
        )


def _host(ray: Any, node: str) -> str:
    """The address of the Ray node ``node`` (its actor died: it cannot say its host name)."""
    found = [n for n in ray.nodes() if n.get("NodeID") == node]
    return str(found[0].get("NodeManagerAddress", "")) if found else ""


def run_ray_trial(
    target: Target,
    sessions: Sequence[Session],
    workers: int,
    *,
    address: str = "auto",
    concurrency: int | None = None,
    max_in_flight: int = 256,
    timeout_s: float = 300.0,
    multi_turn: bool | None = None,
    on_started: Callable[[list[str]], None] | None = None,
) -> TrialRecords:
    """``sessions`` sent by ``workers`` Ray actors on the cluster at ``address``, merged as
    :func:`~accelscope.llm.scaleout.run_scaled_trial` merges local workers; ``on_started``
    gets the node id of each worker."""
    try:
        import ray
    except ImportError as exc:
        raise NotAvailableError(f"--workers ray:N needs ray (pip install ray): {exc}") from None
    numbered = any(len(s.turns) > 1 for s in sessions) if multi_turn is None else multi_turn
    plans = deal(
        sessions,
        workers,
        concurrency=concurrency,
        max_in_flight=max_in_flight,
        timeout_s=timeout_s,
        multi_turn=numbered,
    )
    try:
        ray.init(
            address=address,
            logging_level=logging.ERROR,
            log_to_driver=False,
            configure_logging=False,
        )
    except Exception as exc:  # Ray's connection errors share no base class
        raise BadInputError(f"cannot connect to the Ray cluster at {address}: {exc}") from exc
    try:
        return _run(ray, target, plans, on_started)
    finally:
        ray.shutdown()


def _run(
    ray: Any,
    target: Target,
    plans: list[WorkerPlan],
    on_started: Callable[[list[str]], None] | None,
) -> TrialRecords:
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    nodes = sorted(n["NodeID"] for n in ray.nodes() if n.get("Alive"))
    actor = ray.remote(num_cpus=0, max_restarts=0)(_Worker)
    actors = [
        actor.options(
            scheduling_strategy=NodeAffinitySchedulingStrategy(nodes[i % len(nodes)], soft=False)
        ).remote(target)
        for i in range(len(plans))
    ]
    placed: list[str] = ray.get([a.node.remote() for a in actors], timeout=READY_TIMEOUT_S)
    start_wall_s = time.time() + RAY_START_LEAD_S
    origin = time.perf_counter() + RAY_START_LEAD_S
    calls = [a.run.remote(plan, start_wall_s) for a, plan in zip(actors, plans, strict=True)]
    if on_started is not None:
        on_started(placed)
    finished: list[WorkerOutcome] = []
    try:
        for plan, call, node in zip(plans, calls, placed, strict=True):
            try:
                finished.append(ray.get(call))
            except (ray.exceptions.RayActorError, ray.exceptions.RayTaskError) as exc:
                why = f"died on its node ({type(exc).__name__})"
                finished.append(
                    WorkerOutcome(plan=plan, records=[], died=why, host=_host(ray, node), node=node)
                )
    finally:
        for a in actors:
            ray.kill(a)
    return merge_workers(finished, origin)
