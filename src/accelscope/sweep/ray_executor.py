"""Measure on a Ray cluster: each configuration a Ray task on a node of the requested type, one
measurement at a time per node, in parallel across nodes; outcomes come back as they finish.

A node type is a Ray custom resource that every node of the type advertises with the value 1
(``ray start --address ... --resources '{"l4-pool": 1}'``). A task asks for the whole of it, so
no node ever runs two measurements at once (they would share its cores or GPU). Inside the task
the node's own :class:`~accelscope.sweep.executor.LocalExecutor` measures in a fresh process
with the same timeout, so a crash, hang or out-of-memory is isolated as it is locally, and the
worker collects *the node's* environment, so each result carries its node's fingerprint.

The files a task needs (the model file, weights, eval data, the fp32 accuracy reference) travel
through Ray's object store, once per sweep, and their sha256 is checked on arrival. User code
(``file.py:fn``, ``module:fn``) runs on the nodes only with ``--trust-model-code``; named
plugins and ``module:fn`` models must be installed there.

Faults: a task whose node died is retried once on another node of its type (Ray places it on a
live one), else it is recorded as failed with the reason; a task whose node type has no live
node left, or that outlives its timeout by :data:`LATE_S`, is cancelled and recorded as failed.
Nothing hangs, and what finished is already in the store (``--resume`` continues after the
driver itself was killed).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import logging
import os
import socket
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from accelscope.engine.probe import ProbeTable, probe_table
from accelscope.errors import BadInputError, NotAvailableError, exception_line
from accelscope.hardware.fingerprint import Environment, collect_environment
from accelscope.measurement.threads import available_cores
from accelscope.models.factory import is_factory_ref
from accelscope.result import Cause, Result, Status, legacy_cause
from accelscope.serialise import dump, load
from accelscope.spec import Precision
from accelscope.sweep.executor import NODE_LOST, LocalExecutor, ProgressFn, WorkerOutcome
from accelscope.sweep.worker import InterleaveTask, WorkerTask

__all__ = [
    "LATE_S",
    "NodeDescription",
    "RayExecutor",
    "check_reachable",
    "check_shippable",
    "ray_available",
    "resolve_address",
]

LATE_S = 300.0
"""How long past its timeout the driver waits for a task before cancelling it (shipping the
model, starting a Ray worker, a node that stopped answering)."""
WAIT_S = 2.0
"""How often the driver, while it waits, checks that each task's node type still has a node."""
_SHIP = "@ACCELSCOPE_SHIPPED@"
"""Stands for the task's directory on the node in a shipped task's file fields."""


def _node_died(exc: BaseException) -> bool:
    """True for the Ray errors that mean the task's node (or its result's copy) is gone."""
    from ray import exceptions as rx

    return isinstance(
        exc,
        (
            rx.NodeDiedError,
            rx.WorkerCrashedError,
            rx.LocalRayletDiedError,
            rx.ObjectLostError,  # owner died, fetch timed out, reconstruction failed
            rx.RaySystemError,
        ),
    )


def ray_available() -> str:
    """Empty when ``ray`` imports here; otherwise why the Ray executor is not available."""
    try:
        import ray  # noqa: F401
    except ImportError as exc:
        return (
            f"ray is not installed here ({exc}); install the extra: "
            "pip install -c constraints.txt 'accelscope[ray]'"
        )
    return ""


def _current_cluster_file() -> Path:
    """Where ``ray start --head`` writes the local cluster's address (what ``auto`` reads):
    under ``$RAY_TMPDIR``, else ``$TMPDIR``, else ``/tmp``, as Ray does."""
    base = os.environ.get("RAY_TMPDIR") or os.environ.get("TMPDIR") or "/tmp"
    return Path(base) / "ray" / "ray_current_cluster"


CURRENT_CLUSTER: Path | None = None
"""Overrides :func:`_current_cluster_file` (tests)."""
REACH_TIMEOUT_S = 5.0


def resolve_address(address: str) -> str:
    """``HOST:PORT`` (or ``ray://HOST:PORT``) that ``address`` means, as Ray resolves it:
    ``RAY_ADDRESS`` when set, the given address unless ``auto``, else the address the newest
    local ``ray start --head`` left in :data:`CURRENT_CLUSTER`."""
    from_env = os.environ.get("RAY_ADDRESS", "")
    if from_env:
        return from_env
    if address != "auto":
        return address
    try:
        found = (CURRENT_CLUSTER or _current_cluster_file()).read_text(encoding="utf-8").strip()
    except OSError:
        found = ""
    if not found:
        raise BadInputError(
            "no Ray cluster found on this machine (--ray-address auto): start one with "
            "ray start --head, or give --ray-address HOST:PORT"
        )
    return found


def check_reachable(address: str) -> str:
    """The resolved address; refuse (bad input) one nothing answers on: Ray itself would
    retry for minutes."""
    resolved = resolve_address(address)
    target = resolved.removeprefix("ray://")
    host, _, port_text = target.rpartition(":")
    if not host or not port_text.isdigit():
        raise BadInputError(f"Ray address {resolved!r}: give HOST:PORT or ray://HOST:PORT")
    try:
        with socket.create_connection((host, int(port_text)), timeout=REACH_TIMEOUT_S):
            pass
    except OSError as exc:
        stale = " (a stale address from an earlier local cluster?)" if address == "auto" else ""
        raise BadInputError(
            f"cannot reach the Ray cluster at {resolved}{stale}: {exc.strerror or exc}"
        ) from exc
    return resolved


def check_shippable(model_ref: str, trust_model_code: bool) -> None:
    """Refuse (bad input) to run user code on the cluster's nodes without
    ``--trust-model-code``."""
    if is_factory_ref(model_ref) and not trust_model_code:
        raise BadInputError(
            f"{model_ref} is code: it runs on the cluster's nodes only with --trust-model-code"
        )


@dataclass(frozen=True, kw_only=True)
class NodeDescription:
    """One node type as measured on one of its nodes: its environment, usable cores and the
    precision probes the sweep's pre-screen asked for."""

    node_type: str
    nodes: int
    environment: Environment
    cores: int
    probes: ProbeTable | None = None


@dataclass
class _Flight:
    task: WorkerTask | InterleaveTask
    node_type: str
    ref: Any
    submitted_at: float
    attempts: int = 1
    first_failure: str = ""


@dataclass(frozen=True)
class _Shipped:
    task_json: str
    names: tuple[tuple[str, str], ...]
    """(file name in the task's directory, sha256) per shipped file, in argument order."""
    refs: tuple[Any, ...]


_FILE_FIELDS = ("model_ref", "weights", "eval_data", "accuracy_path")


def _localize(task_json: str, workdir: str) -> str:
    """The task with its shipped files' placeholders pointing into ``workdir`` (field by
    field, so nested task JSON of an interleave task is re-encoded correctly)."""

    def plain(text: str) -> str:
        data = json.loads(text)
        for key in _FILE_FIELDS:
            if isinstance(data.get(key), str):
                data[key] = data[key].replace(_SHIP, workdir)
        return json.dumps(data)

    data = json.loads(task_json)
    if data.get("kind") != "interleave":
        return plain(task_json)
    data["task"] = plain(data["task"])
    data["models"] = [plain(m) for m in data.get("models", [])]
    return json.dumps(data)


@functools.cache
def _node_environment() -> Environment:
    """This node's environment, collected once per Ray worker process."""
    return collect_environment()


def measure_on_node(
    task_json: str, names_json: str, timeout_s: float, *contents: bytes
) -> dict[str, Any]:
    """The Ray task: write the shipped files, check their digests, measure the task in a fresh
    local process on this node, and return the outcome as plain data."""
    import ray

    node = ray.get_runtime_context().get_node_id()
    names = json.loads(names_json)
    with tempfile.TemporaryDirectory(prefix="accelscope-task-") as workdir:
        for (name, digest), content in zip(names, contents, strict=True):
            if hashlib.sha256(content).hexdigest() != digest:
                return {
                    "failure": f"{name} arrived corrupted (sha256 differs)",
                    "cause": Cause.ERROR.value,
                    "node": node,
                }
            (Path(workdir) / name).write_bytes(content)
        task_json = _localize(task_json, workdir)
        task: WorkerTask | InterleaveTask
        if json.loads(task_json).get("kind") == "interleave":
            task = InterleaveTask.from_json(task_json)
        else:
            task = replace(WorkerTask.from_json(task_json), environment=_node_environment())
        outcome = LocalExecutor(timeout_s).run(task)
    return {
        "result": None if outcome.result is None else outcome.result.to_json(),
        "failure": outcome.failure,
        "cause": None if outcome.cause is None else outcome.cause.value,
        "interleaved": outcome.interleaved,
        "node": node,
    }


def describe_node(pairs_json: str, threads: int | None, refresh: bool = False) -> dict[str, Any]:
    """The Ray task that describes a node type: this node's environment, usable cores and the
    requested precision probes (cached on the node like locally)."""
    env = _node_environment()
    cores = available_cores()
    pairs = [(runtime, Precision(p)) for runtime, p in json.loads(pairs_json)]
    probes = None
    if pairs:
        table = probe_table(
            pairs,
            fingerprint=env.fingerprint(),
            threads=min(threads or cores, cores),
            cache_dir=Path.home() / ".cache" / "accelscope" / "probes",
            refresh=refresh,
        )
        probes = dump(table)
    return {"environment": dump(env), "cores": cores, "probes": probes}


class RayExecutor:
    """Tasks on a Ray cluster's nodes of the requested types, one in flight per node."""

    def __init__(
        self,
        *,
        address: str,
        node_types: Sequence[str],
        timeout_s: float = 900.0,
    ) -> None:
        reason = ray_available()
        if reason:
            raise NotAvailableError(f"the Ray executor is not available: {reason}")
        if not node_types:
            raise BadInputError(
                "--executor ray needs --node-type: the Ray resource name(s) of the node types "
                "to measure on"
            )
        import ray

        self._ray: Any = ray
        self.address = address
        self.node_types = tuple(node_types)
        self.timeout_s = timeout_s
        self._flights: dict[int, _Flight] = {}
        self._tickets = 0
        self._shipped: dict[Path, tuple[str, str, Any]] = {}
        self._alive_at = 0.0
        self._alive: dict[str, int] = {}
        self._connect()
        self._measure = ray.remote(max_retries=0, num_cpus=0)(measure_on_node)
        self._describe = ray.remote(max_retries=0, num_cpus=0)(describe_node)

    # -- cluster -------------------------------------------------------------------------------

    def _connect(self) -> None:
        ray = self._ray
        check_reachable(self.address)
        try:
            ray.init(
                address=self.address,
                logging_level=logging.ERROR,
                log_to_driver=False,
                configure_logging=False,
            )
        except Exception as exc:
            raise BadInputError(
                f"cannot connect to the Ray cluster at {self.address}: {exception_line(exc)}"
            ) from exc
        try:
            counts = self._count_nodes(force=True)
            missing = [t for t in self.node_types if counts.get(t, 0) == 0]
            if missing:
                present = sorted(
                    name
                    for node in ray.nodes()
                    if node.get("Alive")
                    for name in node.get("Resources", {})
                    if not _builtin_resource(name)
                )
                raise BadInputError(
                    f"no live node of type {', '.join(missing)} in the Ray cluster at "
                    f"{self.address} (custom resources there: {', '.join(present) or 'none'}); "
                    f"start nodes with ray start --resources '{{\"{missing[0]}\": 1}}'"
                )
            for node in ray.nodes():
                for name in self.node_types:
                    amount = node.get("Resources", {}).get(name)
                    if node.get("Alive") and amount is not None and amount != 1:
                        raise BadInputError(
                            f"node {node.get('NodeManagerAddress')} advertises {name}: "
                            f"{amount:g}; accelscope measures one configuration at a time per "
                            f"node, so each node of a type must advertise {name}: 1"
                        )
        except BaseException:
            ray.shutdown()
            raise

    def _count_nodes(self, force: bool = False) -> dict[str, int]:
        """Live nodes per requested type (refreshed at most once a second)."""
        now = time.monotonic()
        if force or now - self._alive_at >= 1.0:
            counts = dict.fromkeys(self.node_types, 0)
            for node in self._ray.nodes():
                if not node.get("Alive"):
                    continue
                for name in self.node_types:
                    if node.get("Resources", {}).get(name) == 1:
                        counts[name] += 1
            self._alive, self._alive_at = counts, now
        return self._alive

    def describe(
        self, pairs: Sequence[tuple[str, Precision]], threads: int | None, refresh: bool = False
    ) -> list[NodeDescription]:
        """Each node type's environment, cores and probes, measured on one of its nodes (all
        types at once)."""
        pairs_json = json.dumps([[runtime, p.value] for runtime, p in pairs])
        counts = self._count_nodes(force=True)
        refs = [
            self._describe.options(resources={t: 1}).remote(pairs_json, threads, refresh)
            for t in self.node_types
        ]
        deadline = time.monotonic() + self.timeout_s + LATE_S
        try:
            while True:
                _ready, waiting = self._ray.wait(refs, num_returns=len(refs), timeout=WAIT_S)
                if not waiting:
                    break
                gone = [t for t in self.node_types if self._count_nodes().get(t, 0) == 0]
                if gone or time.monotonic() > deadline:
                    why = f"no live node of type {', '.join(gone)}" if gone else "timed out"
                    raise BadInputError(f"could not describe the cluster's node types: {why}")
            answers = self._ray.get(refs)
        except BadInputError:
            for ref in refs:
                with contextlib.suppress(Exception):
                    self._ray.cancel(ref, force=True)
            raise
        except Exception as exc:
            raise BadInputError(
                f"could not describe the cluster's node types: {exception_line(exc)}"
            ) from exc
        return [
            NodeDescription(
                node_type=t,
                nodes=counts.get(t, 0),
                environment=load(Environment, a["environment"]),
                cores=int(a["cores"]),
                probes=load(ProbeTable, a["probes"]) if a["probes"] else None,
            )
            for t, a in zip(self.node_types, answers, strict=True)
        ]

    # -- the executor interface -----------------------------------------------------------------

    def idle_slots(self, node_type: str = "") -> int:
        """Live nodes of ``node_type`` not measuring one of this sweep's tasks."""
        busy = sum(1 for f in self._flights.values() if f.node_type == node_type)
        return max(0, self._count_nodes().get(node_type, 0) - busy)

    def submit(
        self, task: WorkerTask | InterleaveTask, on_progress: ProgressFn | None = None
    ) -> int:
        """Send ``task`` to a node of its configuration's type; returns its ticket."""
        node_type = task.spec.node_type
        if node_type not in self.node_types:
            raise ValueError(f"task for node type {node_type!r}, not one of {self.node_types}")
        self._tickets += 1
        self._flights[self._tickets] = _Flight(
            task=task, node_type=node_type, ref=self._send(task), submitted_at=time.monotonic()
        )
        return self._tickets

    def next_finished(self) -> tuple[int, WorkerOutcome]:
        """Block until a task finishes, fails, is retried to no avail, or is given up on."""
        while True:
            if not self._flights:
                raise RuntimeError("next_finished() with nothing submitted")
            by_ref = {f.ref: ticket for ticket, f in self._flights.items()}
            ready, _ = self._ray.wait(list(by_ref), num_returns=1, timeout=WAIT_S)
            if ready:
                ticket = by_ref[ready[0]]
                outcome = self._settle(ticket)
                if outcome is not None:
                    del self._flights[ticket]
                    return ticket, outcome
                continue
            given_up = self._give_up()
            if given_up is not None:
                return given_up

    def run(
        self, task: WorkerTask | InterleaveTask, on_progress: ProgressFn | None = None
    ) -> WorkerOutcome:
        """Submit ``task`` and wait for it (outcomes of other tasks are kept for later)."""
        if self._flights:
            raise RuntimeError("run() while other tasks are in flight")
        ticket = self.submit(task, on_progress)
        finished, outcome = self.next_finished()
        assert finished == ticket
        return outcome

    def close(self) -> None:
        """Cancel what is still running and disconnect (a Ctrl-C or the end of the sweep)."""
        for flight in self._flights.values():
            with contextlib.suppress(Exception):  # its node may be gone already
                self._ray.cancel(flight.ref, force=True)
        self._flights.clear()
        self._ray.shutdown()

    def __enter__(self) -> RayExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals -----------------------------------------------------------------------------

    def _send(self, task: WorkerTask | InterleaveTask) -> Any:
        shipped = self._ship(task)
        return self._measure.options(resources={task.spec.node_type: 1}).remote(
            shipped.task_json, json.dumps(shipped.names), self.timeout_s, *shipped.refs
        )

    def _ship_file(self, path_text: str) -> str:
        """Put the file in the object store once; its name in the task's directory."""
        path = Path(path_text).resolve()
        if path not in self._shipped:
            content = path.read_bytes()
            name = f"{len(self._shipped)}-{path.name}"
            digest = hashlib.sha256(content).hexdigest()
            self._shipped[path] = (name, digest, self._ray.put(content))
        return self._shipped[path][0]

    def _ship(self, task: WorkerTask | InterleaveTask) -> _Shipped:
        used: dict[str, tuple[str, Any]] = {}

        def local(path_text: str | None) -> str | None:
            if path_text is None:
                return None
            name = self._ship_file(path_text)
            _, digest, ref = self._shipped[Path(path_text).resolve()]
            used[name] = (digest, ref)
            return f"{_SHIP}/{name}"

        def model(ref: str) -> str:
            if is_factory_ref(ref) and ".py:" in ref:
                file, function = ref.rsplit(":", 1)
                return f"{local(file)}:{function}"
            if is_factory_ref(ref) or not Path(ref).is_file():
                return ref  # a zoo name or an installed module: nothing to ship
            return local(ref) or ref

        def plain(t: WorkerTask) -> dict[str, Any]:
            data: dict[str, Any] = json.loads(t.to_json())
            data["model_ref"] = model(t.model_ref)
            data["weights"] = local(t.weights)
            data["eval_data"] = local(t.eval_data)
            data["accuracy_path"] = local(t.accuracy_path)
            return data

        if isinstance(task, InterleaveTask):
            data: dict[str, Any] = json.loads(task.to_json())
            data["task"] = json.dumps(plain(task.task))
            data["models"] = [json.dumps(plain(m)) for m in task.models]
            text = json.dumps(data)
        else:
            text = json.dumps(plain(task))
        names = tuple((name, digest) for name, (digest, _) in used.items())
        return _Shipped(text, names, tuple(ref for _, ref in used.values()))

    def _settle(self, ticket: int) -> WorkerOutcome | None:
        """The finished task's outcome; ``None`` when it was sent again (its node died)."""
        flight = self._flights[ticket]
        try:
            answer = self._ray.get(flight.ref)
        except Exception as exc:  # noqa: BLE001 - every Ray failure becomes a recorded reason
            from ray import exceptions as rx

            name = type(exc).__name__
            if isinstance(exc, rx.TaskCancelledError):
                return WorkerOutcome.failed(Cause.NODE_LOST, f"{NODE_LOST}the task was cancelled")
            if isinstance(exc, rx.OutOfMemoryError):
                return WorkerOutcome.failed(
                    Cause.OUT_OF_MEMORY,
                    f"out of memory: Ray's memory monitor killed the task ({name})",
                )
            if not _node_died(exc):
                return WorkerOutcome.failed(
                    Cause.ERROR, f"the Ray task failed: {name}: {exception_line(exc)}"
                )
            why = f"its node died ({name})"
            if flight.attempts >= 2:
                return WorkerOutcome.failed(
                    Cause.NODE_LOST,
                    f"{NODE_LOST}{flight.first_failure}; retried once, and that node died too",
                )
            if self._count_nodes(force=True).get(flight.node_type, 0) == 0:
                return WorkerOutcome.failed(
                    Cause.NODE_LOST,
                    f"{NODE_LOST}{why}; no other node of type {flight.node_type} is alive to "
                    "retry it",
                )
            flight.attempts += 1
            flight.first_failure = why
            flight.submitted_at = time.monotonic()
            flight.ref = self._send(flight.task)
            return None
        result = Result.from_json(answer["result"]) if answer.get("result") else None
        failure = str(answer.get("failure", ""))
        cause = _answer_cause(answer, failure)
        if flight.attempts > 1:
            note = f"measured on a second node: {flight.first_failure}"
            if result is not None:
                result = replace(result, warnings=(*result.warnings, note))
            elif failure:
                failure = f"{failure} ({note})"
        return WorkerOutcome(
            result,
            failure,
            interleaved=answer.get("interleaved"),
            node=str(answer.get("node", "")),
            cause=cause,
        )

    def _give_up(self) -> tuple[int, WorkerOutcome] | None:
        """A task whose node type has no live node, or that is long overdue: cancelled."""
        counts = self._count_nodes()
        now = time.monotonic()
        for ticket, flight in self._flights.items():
            if counts.get(flight.node_type, 0) == 0:
                why = f"no node of type {flight.node_type} is alive any more"
            elif now - flight.submitted_at > self.timeout_s + LATE_S:
                why = (
                    f"timeout: no answer from its node after {self.timeout_s + LATE_S:g} s "
                    f"(the task timeout plus {LATE_S:g} s)"
                )
            else:
                continue
            if flight.first_failure:
                why = f"{flight.first_failure}; then {why}"
            why = f"{NODE_LOST}{why}"
            with contextlib.suppress(Exception):  # its node may be gone already
                self._ray.cancel(flight.ref, force=True)
            del self._flights[ticket]
            return ticket, WorkerOutcome.failed(Cause.NODE_LOST, why)
        return None


def _answer_cause(answer: dict[str, Any], failure: str) -> Cause | None:
    """The cause a node's answer names; a node of an accelscope from before causes were sent
    names none: :func:`legacy_cause` reads its failure."""
    name = answer.get("cause")
    if isinstance(name, str):
        return Cause.named(name)
    return legacy_cause(Status.FAILED, failure) if failure else None


def _builtin_resource(name: str) -> bool:
    return name in {"CPU", "GPU", "memory", "object_store_memory"} or name.startswith(
        ("node:", "accelerator_type:")
    )
