"""A real model as the system under test: any configuration ``bench`` can build, in-process.

Each query carries one item from a seeded input pool; a batch of queries is gathered into one
tensor per input (concatenation along dimension 0). Runtimes that serve one fixed batch size
(``torch.compile`` with static shapes, ONNX exports, OpenVINO) get one runner per *bucket* -
powers of two up to the maximum batch, and the maximum itself - and a batch is padded up to
the smallest bucket that holds it by repeating its last row; the padded rows are counted so the
report can say what padding cost. PyTorch eager serves every batch size as it is.
"""

from __future__ import annotations

import contextlib
import threading
import time
import warnings
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from accelscope.backends.base import Backend, Runner
from accelscope.engine.accuracy_check import calibration_batches
from accelscope.errors import MeasurementError
from accelscope.load.schedule import Query
from accelscope.models.base import LoadedModel
from accelscope.models.inputs import make_batch
from accelscope.spec import BATCH_DIM, RunSpec

if TYPE_CHECKING:
    import torch

__all__ = ["DYNAMIC_BATCH_BACKENDS", "ModelSUT", "buckets_for"]

DYNAMIC_BATCH_BACKENDS = frozenset({"eager"})
"""Backends whose runner accepts any batch size (no padding, one runner)."""


def buckets_for(max_batch: int, dynamic: bool) -> tuple[int, ...]:
    """The batch sizes to prepare: ``(max_batch,)`` for a dynamic runtime, else the powers of
    two below ``max_batch`` and ``max_batch`` itself."""
    if dynamic:
        return (max_batch,)
    sizes = []
    size = 1
    while size < max_batch:
        sizes.append(size)
        size *= 2
    sizes.append(max_batch)
    return tuple(sizes)


class ModelSUT:
    """Serves ``model`` under ``spec`` (``spec.batch_size`` is ignored: ``max_batch`` rules).

    Call :meth:`prepare` first (compiles or quantizes every bucket: this is the slow part);
    :meth:`issue` then runs a batch of queries and returns when the outputs exist.
    """

    def __init__(
        self,
        model: LoadedModel,
        spec: RunSpec,
        backend: Backend,
        *,
        max_batch: int,
        pool_size: int = 64,
        seed: int = 0,
    ) -> None:
        self.model = model
        self.spec = spec
        self.backend = backend
        self.batched = any(BATCH_DIM in t.shape for t in model.inputs)
        self.max_batch = max_batch if self.batched else 1
        self.dynamic = spec.backend in DYNAMIC_BATCH_BACKENDS
        self.buckets = buckets_for(self.max_batch, self.dynamic)
        self.pool_size = pool_size if self.batched else 1
        self.seed = seed
        self.prepare_s = 0.0
        self.padded_items = 0
        self.served_items = 0
        self._runners: dict[int, Runner] = {}
        self._pool: dict[str, torch.Tensor] = {}
        self._lock = threading.Lock()

    def bucket_for(self, size: int) -> int:
        """The prepared batch size a batch of ``size`` queries runs at."""
        if self.dynamic:
            return size
        return next(b for b in self.buckets if b >= size)

    def prepare(self) -> None:
        """Build the input pool and one runner per bucket (timed in ``prepare_s``)."""
        began = time.perf_counter()
        self._pool = make_batch(self.model.inputs, self.pool_size, self.seed)
        for bucket in self.buckets:
            spec = replace(self.spec, batch_size=bucket)
            calibration = calibration_batches(self.model, bucket)
            self._runners[bucket] = self.backend.prepare(self.model, spec, calibration)
        for bucket in self.buckets:  # after every compile: a later one can evict earlier code
            self._settle(bucket)
        self.prepare_s = time.perf_counter() - began

    def _settle(self, bucket: int) -> None:
        """Two warm calls with pool batches, so any recompile happens now, not mid-trial.

        ``torch.compile`` runners at batch 1 recompile once on their second call (seen with
        ResNet-50 int8: the batch dimension is specialised); inductor reads the global
        ``freezing`` flag while tracing, so the warm calls run under the runner's setting, as
        the backend's own compiling call does (without it, int8 fails to recompile).
        """
        context: Any = contextlib.nullcontext()
        if self.spec.backend == "compile":
            from torch._inductor import config as inductor_config

            freezing = dict(self.spec.options).get("freezing", "true") == "true"
            context = inductor_config.patch(freezing=freezing)
        queries = [Query(i, i) for i in range(bucket if self.batched else 1)]
        try:
            with context:
                for _ in range(2):
                    self.issue(queries)
        except Exception as exc:
            lines = str(exc).strip().splitlines() or [type(exc).__name__]
            raise MeasurementError(
                f"{self.spec.label()} failed a warm-up batch of {len(queries)}: "
                f"{type(exc).__name__}: {lines[0][:300]}"
            ) from exc
        self.served_items = self.padded_items = 0

    def _batch(self, queries: Sequence[Query], bucket: int) -> dict[str, Any]:
        import torch

        if not self.batched:
            return dict(self._pool)
        rows = [q.sample % self.pool_size for q in queries]
        rows += [rows[-1]] * (bucket - len(rows))
        index = torch.tensor(rows, dtype=torch.long)
        return {name: values.index_select(0, index) for name, values in self._pool.items()}

    def issue(self, queries: Sequence[Query]) -> None:
        """Run ``queries`` as one batch (gather, pad, feed, run, synchronise)."""
        if not queries:
            return
        if len(queries) > self.max_batch:
            raise MeasurementError(f"batch of {len(queries)} exceeds max batch {self.max_batch}")
        bucket = self.bucket_for(len(queries)) if self.batched else 1
        runner = self._runners.get(bucket if not self.dynamic else self.max_batch)
        if runner is None:
            raise MeasurementError("the model was not prepared (call prepare first)")
        raw = runner.run(runner.feed(self._batch(queries, bucket)))
        runner.synchronize()
        del raw
        with self._lock:
            self.served_items += len(queries)
            self.padded_items += bucket - len(queries) if self.batched else 0

    def thread_setup(self, instance: int = 0) -> None:
        """In the server thread: pin torch's intra-op threads, then :meth:`prepare` there, so
        the runners are built on the thread that runs them (``torch.compile`` guards check
        thread-local state; a runner compiled on another thread can recompile on first use)."""
        import torch

        torch.set_num_threads(self.spec.threads)
        if not self._runners:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # runtime chatter while compiling/quantizing
                self.prepare()

    def close(self) -> None:
        """Release every runner."""
        for runner in self._runners.values():
            runner.close()
        self._runners.clear()
