"""``accelscope bench``: the typed API behind the command. Returns data; never prints.

Validates everything first (model, backends, strategy, store path), computes the fp32
reference once, sweeps in isolated worker processes, commits each result as it exists, and
writes the offline HTML report.
"""

from __future__ import annotations

import importlib
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from accelscope.accuracy.metrics import metric_fn
from accelscope.commands._lifecycle import CommandRun, check_paths
from accelscope.commands.bench.html import render_bench_report
from accelscope.commands.bench.standing import Standing, standing
from accelscope.engine.probe import ProbeTable, probe_table
from accelscope.errors import BadInputError, exception_line
from accelscope.hardware.fingerprint import Environment, collect_environment
from accelscope.hardware.gpu import check_device
from accelscope.measurement.threads import available_cores
from accelscope.measurement.timer import TimerConfig
from accelscope.models.base import LoadedModel
from accelscope.models.loading import load_model
from accelscope.result import Result
from accelscope.serialise import dump, load
from accelscope.spec import Device, DeviceRef, Precision, TensorSpec
from accelscope.store.sqlite import DEFAULT_STORE_PATH, ResultStore
from accelscope.sweep.confirm import Confirmation
from accelscope.sweep.driver import (
    STRATEGIES,
    NodeTarget,
    ReferenceRunner,
    SweepEvents,
    SweepPlan,
    run_sweep,
)
from accelscope.sweep.executor import Executor, LocalExecutor
from accelscope.sweep.gpu_default import DEFAULT_GPU_BATCHES
from accelscope.sweep.guard import AccuracyRule
from accelscope.sweep.memory_fit import MemoryFit, estimate_memory, read_device_memory
from accelscope.sweep.ray_executor import RayExecutor, check_reachable, check_shippable
from accelscope.sweep.select import Selection, select_by_node_type
from accelscope.sweep.space import Candidate, SweepSpace, expand, probe_requests

EXECUTORS = ("local", "ray")

__all__ = [
    "EXECUTORS",
    "BenchOutcome",
    "BenchPreview",
    "BenchRequest",
    "bench",
    "preview",
    "selections_for_run",
]


@dataclass(frozen=True, kw_only=True)
class BenchRequest:
    """What ``accelscope bench`` should sweep. Empty tuples mean the defaults: every registered
    backend, every precision with a fast path here, batch 8, all usable cores.

    ``device_index`` is the CUDA ordinal (``--device cuda:1``); ``tf32`` the TF32 settings fp32
    runs under on CUDA (default IEEE fp32 only; ``(False, True)`` measures both as rows)."""

    model: str
    backends: tuple[str, ...] = ()
    precisions: tuple[Precision, ...] = ()
    batch_sizes: tuple[int, ...] = ()
    threads: tuple[int, ...] = ()
    device: Device = Device.CPU
    device_index: int = 0
    tf32: tuple[bool, ...] = (False,)
    options: tuple[tuple[str, str], ...] = ()
    force_precisions: bool = False
    sla_p99_s: float | None = None
    max_accuracy_drop: float = 0.01
    strategy: str = "grid"
    budget_s: float = 900.0
    measure_budget_s: float = 10.0
    timeout_s: float = 900.0
    resume: bool = False
    accuracy_samples: int = 256
    inputs: tuple[TensorSpec, ...] | None = None
    weights: Path | None = None
    trust_model_code: bool = False
    plugins: tuple[str, ...] = ()
    seed: int = 0
    report_path: Path | None = None
    eval_data: Path | None = None
    metric: str = "top1_accuracy"
    confirm_rounds: int = 6
    refresh_probes: bool = False
    executor: str = "local"
    """``local`` (this machine) or ``ray`` (a Ray cluster's nodes of ``node_types``)."""
    ray_address: str = "auto"
    node_types: tuple[str, ...] = ()

    @property
    def gpu_default(self) -> bool:
        """True for the default GPU sweep: ``--device cuda`` with no backend, precision, option
        or TF32 choice (:mod:`accelscope.sweep.gpu_default`); its batch axis is
        :data:`~accelscope.sweep.gpu_default.DEFAULT_GPU_BATCHES` unless ``--batch`` names one."""
        return (
            self.device is Device.CUDA
            and not self.backends
            and not self.precisions
            and not self.options
            and self.tf32 == (False,)
        )

    def settings(self) -> dict[str, Any]:
        """What the run's verdict depends on, stored with the run."""
        settings: dict[str, Any] = {
            "sla_p99_s": self.sla_p99_s,
            "max_accuracy_drop": self.max_accuracy_drop,
            "strategy": self.strategy,
        }
        if self.node_types:
            settings["node_types"] = list(self.node_types)
        return settings


@dataclass(frozen=True, kw_only=True)
class BenchOutcome:
    """The sweep's final results, the selection, and where things were written."""

    results: tuple[Result, ...]
    selection: Selection
    rule: AccuracyRule
    run_id: str | None
    store_path: Path | None
    report_path: Path | None
    model: LoadedModel
    measurement_time_s: float
    wall_time_s: float
    resumed: int = 0
    notes: list[str] = field(default_factory=list)
    probes: ProbeTable | None = None
    selections: dict[str, Selection] = field(default_factory=dict)
    """One selection per node type (``""``: this machine)."""
    standing: Standing | None = None
    """On a GPU: the best device-resident figure against the records and the roofline floor."""


@dataclass(frozen=True, kw_only=True)
class BenchPreview:
    """What ``bench --dry-run`` shows: every configuration the sweep would consider, each to be
    measured or skipped with why, and the memory check the batches were held against."""

    model: LoadedModel
    candidates: tuple[Candidate, ...]
    memory: MemoryFit | None
    notes: tuple[str, ...] = ()


def selections_for_run(
    results: list[Result],
    settings: dict[str, Any],
    confirmations: Sequence[dict[str, Any]] = (),
) -> dict[str, Selection]:
    """Recompute a stored bench run's selection (one per node type) from its results, settings
    and its latest ``confirmation`` document (the interleaved re-measure) of each node type."""
    sla = settings.get("sla_p99_s")
    return select_by_node_type(
        results,
        float(sla) if sla is not None else None,
        [load(Confirmation, c) for c in confirmations],
    )


def _validate(request: BenchRequest) -> None:
    if request.strategy not in STRATEGIES:
        raise BadInputError(
            f"unknown strategy {request.strategy!r}; choose one of: {', '.join(STRATEGIES)}"
        )
    if not 0 <= request.max_accuracy_drop < 1:
        raise BadInputError("max accuracy drop must be between 0 and 100 %")
    metric_fn(request.metric)  # unknown metric names are bad input
    if request.accuracy_samples <= 0:
        raise BadInputError("accuracy samples must be a positive integer")
    if request.confirm_rounds < 0 or request.confirm_rounds == 1:
        raise BadInputError("confirm rounds must be 0 (off) or at least 2")
    for number, what in ((request.budget_s, "budget"), (request.timeout_s, "timeout")):
        if number <= 0:
            raise BadInputError(f"{what} must be positive")
    if request.executor not in EXECUTORS:
        raise BadInputError(
            f"unknown executor {request.executor!r}; choose one of: {', '.join(EXECUTORS)}"
        )
    if request.node_types and request.executor != "ray":
        raise BadInputError("--node-type needs --executor ray")
    if request.executor == "ray":
        if not request.node_types:
            raise BadInputError(
                "--executor ray needs --node-type: the Ray resource name(s) of the node types "
                "to measure on"
            )
        check_shippable(request.model, request.trust_model_code)
        check_reachable(request.ray_address)
    for plugin in request.plugins:
        try:
            importlib.import_module(plugin)
        except ImportError as exc:
            raise BadInputError(f"cannot import plugin {plugin!r}: {exc}") from exc


def _prior(
    path: Path | None, model: LoadedModel, request: BenchRequest
) -> tuple[str | None, list[Result]]:
    if path is None or not path.exists():
        raise BadInputError("--resume needs the store of the interrupted run (no store found)")
    with ResultStore(path) as store:
        run_id = store.latest_unfinished_run("bench", model.ref)
        if run_id is None:
            raise BadInputError(f"nothing to resume: no unfinished bench run of {model.ref}")
        run = store.get_run(run_id)
        results = list(run.results)
    before = tuple(run.settings.get("node_types", ()))
    if before != request.node_types:
        where = ", ".join(before) if before else "this machine"
        raise BadInputError(
            f"cannot resume run {run_id} with other node types: it measured on {where} "
            f"(give the same --executor and --node-type)"
        )
    digests = {r.spec.model_digest for r in results}
    if digests and digests != {model.digest}:
        raise BadInputError(f"cannot resume: the model {model.ref} changed since run {run_id}")
    return run_id, results


def bench(
    request: BenchRequest,
    *,
    store_path: Path | None = DEFAULT_STORE_PATH,
    events: SweepEvents | None = None,
    executor: Executor | None = None,
    environment: Environment | None = None,
    probes: ProbeTable | None = None,
    command_line: str | None = None,
    reference_runner: ReferenceRunner | None = None,
) -> BenchOutcome:
    """Sweep ``request`` and select the fastest accepted configuration within the SLA.

    ``probes`` replaces the measured precision probes (tests pass fakes); by default the
    probes the pre-screen needs are read from the per-machine cache or measured.
    ``reference_runner`` runs the fp32 reference of a GPU sweep (by default in a worker
    process of this machine: this process never uses the GPU).
    """
    _validate(request)
    env = environment or collect_environment()
    device = DeviceRef(request.device, request.device_index)
    if request.executor == "local":
        check_device(device, env.gpus)  # a cluster's node types are checked once described
    space = _space(request)
    check_paths(store_path, request.report_path)
    model = _load(request)
    space = _with_memory(space, model, env, request.executor, events)
    resume_id, prior = _prior(store_path, model, request) if request.resume else (None, [])
    rule = AccuracyRule(request.max_accuracy_drop)
    cluster = (
        RayExecutor(
            address=request.ray_address,
            node_types=request.node_types,
            timeout_s=request.timeout_s,
        )
        if request.executor == "ray" and executor is None
        else None
    )
    try:
        nodes: tuple[NodeTarget, ...] = ()
        if cluster is not None:
            nodes = _describe_nodes(cluster, request, space, model, env, events)
        elif probes is None:
            probes = _probes(request, space, model, env, store_path, events)
        plan = SweepPlan(
            space=space,
            rule=rule,
            sla_p99_s=request.sla_p99_s,
            strategy=request.strategy,
            timer=TimerConfig(budget_s=request.measure_budget_s),
            total_budget_s=request.budget_s,
            accuracy_samples=request.accuracy_samples,
            inputs=request.inputs,
            weights=str(request.weights) if request.weights else None,
            trust_model_code=request.trust_model_code,
            plugins=request.plugins,
            seed=request.seed,
            eval_data=str(request.eval_data) if request.eval_data else None,
            metric=request.metric,
            probes=probes,
            confirm_rounds=request.confirm_rounds,
            nodes=nodes,
            reference_timeout_s=request.timeout_s,
        )
        run = CommandRun(
            "bench",
            model.ref,
            env,
            request.settings(),
            store_path=store_path,
            command_line=command_line,
            resume_id=resume_id,
            resume_hint="--resume continues it",
        )
        with run, tempfile.TemporaryDirectory(prefix="accelscope-bench-") as workdir:
            outcome = run_sweep(
                plan,
                model,
                env,
                executor or cluster or LocalExecutor(request.timeout_s),
                sink=run.add_result,
                workdir=Path(workdir),
                prior=prior,
                events=events,
                reference_runner=reference_runner,
            )
            if probes is not None and probes.verdicts:
                run.add_document("probes", dump(probes))
            for node in nodes:
                if node.probes is not None and node.probes.verdicts:
                    run.add_document("probes", {**dump(node.probes), "node_type": node.node_type})
            for chosen in outcome.selections.values():
                if chosen.confirmation is not None:
                    run.add_document("confirmation", dump(chosen.confirmation))
    finally:
        if cluster is not None:
            cluster.close()
    several = len(outcome.selections) > 1
    found = None if several else standing(outcome.results, model, env)
    html = render_bench_report(
        outcome.results,
        title=f"accelscope bench: {model.ref}",
        model=model.ref,
        best_key=None if several else outcome.selection.best_key,
        lowest_latency_key=None if several else outcome.selection.lowest_latency_key,
        verdict=" ".join(chosen.verdict for chosen in outcome.selections.values()),
        sla_p99_s=request.sla_p99_s,
        baseline_key=None if several else outcome.selection.baseline_key,
        confirmation=None if several else outcome.selection.confirmation,
        standing=found,
    )
    report_path = run.write_report(html, request.report_path)
    return BenchOutcome(
        results=outcome.results,
        selection=outcome.selection,
        rule=rule,
        run_id=run.run_id,
        store_path=run.stored_path,
        report_path=report_path,
        model=model,
        measurement_time_s=outcome.measurement_time_s,
        wall_time_s=outcome.wall_time_s,
        resumed=len(prior),
        probes=probes,
        selections=outcome.selections,
        standing=found,
    )


def _space(request: BenchRequest) -> SweepSpace:
    """The space ``request`` asks for (bad input raised before the model loads)."""
    default_batches = DEFAULT_GPU_BATCHES if request.gpu_default else (8,)
    return SweepSpace(
        backends=request.backends,
        precisions=request.precisions,
        batch_sizes=request.batch_sizes or default_batches,
        threads=request.threads or (available_cores(),),
        device=request.device,
        options=request.options,
        force_precisions=request.force_precisions,
        device_index=request.device_index,
        tf32=request.tf32,
        gpu_default=request.gpu_default,
    )


def _load(request: BenchRequest) -> LoadedModel:
    return load_model(
        request.model,
        inputs=request.inputs,
        weights=request.weights,
        trust_model_code=request.trust_model_code,
        eval_data=request.eval_data,
        metric=request.metric,
    )


def _with_memory(
    space: SweepSpace,
    model: LoadedModel,
    env: Environment,
    executor: str,
    events: SweepEvents | None = None,
) -> SweepSpace:
    """On a local GPU, the space with its memory check: the model's activation peaks (measured
    on this CPU) against the device's free memory now. Nothing to check on the CPU, on a
    cluster (its nodes' memory is not known here) or for a model without a PyTorch module."""
    gpu = next((g for g in env.gpus if g.index == space.device_index), None)
    if space.device is not Device.CUDA or executor != "local" or gpu is None:
        return space
    if model.module is None:
        return space
    try:
        estimate = estimate_memory(model)
    except Exception as exc:  # noqa: BLE001 - the user's model can raise anything
        # no estimate, no check: each batch runs, and an out-of-memory ends its batch axis
        if events is not None:
            why = f"{type(exc).__name__}: {exception_line(exc)}"
            events.note(f"memory check off: the model failed on the CPU ({why})")
        return space
    return replace(space, memory=MemoryFit(estimate=estimate, device=read_device_memory(gpu)))


def preview(request: BenchRequest, *, environment: Environment | None = None) -> BenchPreview:
    """The configurations ``request`` would measure or skip, and why, without measuring: the
    precision screen by the ISA rule where a real run would probe first (said in ``notes``)."""
    _validate(request)
    env = environment or collect_environment()
    if request.executor == "local":
        check_device(DeviceRef(request.device, request.device_index), env.gpus)
    space = _space(request)
    model = _load(request)
    space = _with_memory(space, model, env, request.executor)
    notes: list[str] = []
    if probe_requests(space, model, env):
        notes.append(
            "reduced precisions screened by the ISA rule: a real run measures the precision "
            "probes first and may skip what they find slower"
        )
    return BenchPreview(
        model=model,
        candidates=tuple(expand(space, model, env)),
        memory=space.memory,
        notes=tuple(notes),
    )


def _describe_nodes(
    cluster: RayExecutor,
    request: BenchRequest,
    space: SweepSpace,
    model: LoadedModel,
    env: Environment,
    events: SweepEvents | None,
) -> tuple[NodeTarget, ...]:
    """Each node type's environment and precision probes, measured on one of its nodes; its
    thread counts are the requested ones, or all of its cores."""
    pairs = probe_requests(space, model, env)
    if events is not None:
        what = f" and their precision probes ({len(pairs)})" if pairs else ""
        events.note(f"describing node types {', '.join(cluster.node_types)}{what} on the cluster")
    described = cluster.describe(
        pairs, max(request.threads) if request.threads else None, request.refresh_probes
    )
    for d in described:  # a node type without GPUs lists its configurations as skipped
        if d.environment.gpus:
            try:
                check_device(DeviceRef(request.device, request.device_index), d.environment.gpus)
            except BadInputError as exc:
                raise BadInputError(f"node type {d.node_type}: {exc.message}") from None
    if events is not None:
        for d in described:
            events.note(
                f"  {d.node_type}: {d.nodes} node(s), {d.environment.cpu.model_name or 'cpu'}, "
                f"{d.cores} usable cores"
            )
    return tuple(
        NodeTarget(
            node_type=d.node_type,
            environment=d.environment,
            probes=d.probes,
            threads=request.threads or (d.cores,),
        )
        for d in described
    )


def _probes(
    request: BenchRequest,
    space: SweepSpace,
    model: LoadedModel,
    env: Environment,
    store_path: Path | None,
    events: SweepEvents | None,
) -> ProbeTable | None:
    """The measured precision probes this sweep's pre-screen needs (cached per machine)."""
    pairs = probe_requests(space, model, env)
    if not pairs:
        return None
    if events is not None:
        names = ", ".join(f"{runtime} {precision.value}" for runtime, precision in pairs)
        events.note(f"precision probes (cached per machine after the first run): {names}")
    return probe_table(
        pairs,
        fingerprint=env.fingerprint(),
        threads=min(max(space.threads), available_cores()),
        cache_dir=(store_path or DEFAULT_STORE_PATH).parent / "probes",
        refresh=request.refresh_probes,
    )
